"""Ctrl-C during a materialization (issue 46's edges, seen while measuring issue 45): the command said
"materializing eval_run [...] failed (run ...): dagster._core.errors.DagsterExecutionInterruptedError" with a
trace file, as if churnbench had a bug. An interrupted run is now told apart from a failed one and the command
says it was interrupted and that the same command resumes. Seams: Dagster's result events (the real path is the
kill-and-resume reliability test's)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from churn_assets.commands.error_output import INTERRUPTED_EXIT, report
from churn_assets.orchestration.materialize import interrupted


def _failure(cls_name: str) -> SimpleNamespace:
    error = SimpleNamespace(cls_name=cls_name)
    return SimpleNamespace(is_step_failure=True, step_failure_data=SimpleNamespace(error=error))


def test_an_interrupted_step_is_told_from_a_failed_one() -> None:
    started = SimpleNamespace(is_step_failure=False, step_failure_data=None)
    assert interrupted(SimpleNamespace(all_events=[started, _failure("DagsterExecutionInterruptedError")]))
    assert not interrupted(SimpleNamespace(all_events=[started, _failure("ValueError")]))
    assert not interrupted(SimpleNamespace(all_events=[started]))


def test_the_command_says_it_was_interrupted_and_resumes(capsys: pytest.CaptureFixture[str]) -> None:
    assert report(KeyboardInterrupt("run 1234")) == INTERRUPTED_EXIT
    [line] = capsys.readouterr().err.splitlines()
    assert line == "churnbench: interrupted (what was answered or built is kept: the same command resumes)"
