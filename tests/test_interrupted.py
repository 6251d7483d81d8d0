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


def _failure(cls_name: str, source: str = "USER_CODE_ERROR") -> SimpleNamespace:
    error = SimpleNamespace(cls_name=cls_name)
    return SimpleNamespace(is_step_failure=True, step_failure_data=SimpleNamespace(
        error=error, error_source=SimpleNamespace(value=source)))


def test_an_interrupted_step_is_told_from_a_failed_one() -> None:
    started = SimpleNamespace(is_step_failure=False, step_failure_data=None)
    assert interrupted(SimpleNamespace(all_events=[started, _failure("DagsterExecutionInterruptedError")]))
    assert interrupted(SimpleNamespace(all_events=[started, _failure("JobCanceled", source="INTERRUPT")]))
    assert not interrupted(SimpleNamespace(all_events=[started, _failure("ValueError")]))
    assert not interrupted(SimpleNamespace(all_events=[started]))


def test_a_run_on_dagsters_run_body_is_interrupted_when_it_ended_canceled() -> None:
    """Decision 334: the run body catches the interrupt its step re-raises; a body run that ended canceled (or ran in
    a worker process the engine canceled) is an interrupt even when no step recorded one."""
    from churn_assets.orchestration.run_body import BodyResult

    assert interrupted(BodyResult("run", success=False, all_events=[], canceled=True))
    assert not interrupted(BodyResult("run", success=False, all_events=[_failure("ValueError")]))


def test_a_failure_outside_the_steps_says_the_runs_own_error() -> None:
    """A body run that failed before any step (the job could not be loaded): its run-failure event's error, not
    "the run failed"."""
    from dagster._core.events import DagsterEvent, JobFailureData
    from dagster._utils.error import SerializableErrorInfo

    from churn_assets.orchestration.materialize import failure_message
    from churn_assets.orchestration.run_body import BodyResult

    error = SerializableErrorInfo("DagsterImportError: no module named gone_module\n", [], "DagsterImportError")
    failed = DagsterEvent("PIPELINE_FAILURE", "__ASSET_JOB", event_specific_data=JobFailureData(error, None, None))
    assert failure_message(BodyResult("run", False, [failed])) == "DagsterImportError: no module named gone_module"
    assert failure_message(BodyResult("run", False, [])) == "the run failed (see the run in the Dagster UI)"


def test_the_command_says_it_was_interrupted_and_resumes(capsys: pytest.CaptureFixture[str]) -> None:
    assert report(KeyboardInterrupt("run 1234")) == INTERRUPTED_EXIT
    [line] = capsys.readouterr().err.splitlines()
    assert line == "churnbench: interrupted (what was answered or built is kept: the same command resumes)"
