"""The CLI's error-output rule (issue 35, item 6; docs/guarantees.md "Error output"): every error is one line on
stderr; a usage error exits 2 with no trace kept; a refusal of bad input exits 1 with no trace kept; an error with
a trace worth reading (a cause, a Dagster step's trace, a bug) exits 1 naming the file the full trace was written
to; `--debug` or `CHURNBENCH_DEBUG=1` prints the trace; a failed Dagster step carries the line in its failure
metadata."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from churn_assets.cli import ChurnbenchGroup, main
from churn_assets.errors import DEBUG_ENV, UserFacingError, add_context
from churn_assets.state import STATE_DIR_ENV


@click.group(cls=ChurnbenchGroup)
def probe() -> None:
    """A group with the CLI's error handling and commands that fail on purpose."""


@probe.command("refuse")
def refuse() -> None:
    raise UserFacingError("world nope-s1-abcdef is not registered (see `churnbench worlds list`)")


@probe.command("caused")
def caused() -> None:
    try:
        raise ConnectionError("connection refused by 127.0.0.1:9")
    except ConnectionError as e:
        raise UserFacingError("the LLM endpoint http://127.0.0.1:9/v1 failed:\n  Connection error") from e


@probe.command("elsewhere")
def elsewhere() -> None:
    error = UserFacingError("materializing eval_run [k] failed (run r1): eval_run k: task q003 (t1): refused")
    error.trace = "step eval_run:\nTraceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: deep"
    raise error


@probe.command("bug")
def bug() -> None:
    {}["missing"]


def _invoke(*args: str, env: dict[str, str] | None = None) -> click.testing.Result:
    return CliRunner().invoke(probe, list(args), env=env)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "state"
    root.mkdir()
    monkeypatch.setenv(STATE_DIR_ENV, str(root))
    # set, then removed: monkeypatch then restores the variable's absence at teardown, also after `--debug` (whose
    # callback sets it in this process) set it again; a bare delenv of an absent variable would restore nothing
    monkeypatch.setenv(DEBUG_ENV, "")
    monkeypatch.delenv(DEBUG_ENV)
    return root


def test_a_refusal_is_one_line_without_a_trace_file(state: Path) -> None:
    got = _invoke("refuse")
    assert got.exit_code == 1
    assert got.stderr == "churnbench: error: world nope-s1-abcdef is not registered (see `churnbench worlds list`)\n"
    assert not (state / "logs").exists()


@pytest.mark.parametrize("command", ["caused", "elsewhere"])
def test_an_error_with_a_trace_is_one_line_naming_the_trace_file(state: Path, command: str) -> None:
    got = _invoke(command)
    assert got.exit_code == 1 and got.stderr.count("\n") == 1, got.stderr
    line = got.stderr.strip()
    assert line.startswith("churnbench: error: ") and "Traceback" not in line
    trace = Path(line.rsplit("(trace: ", 1)[1].rstrip(")"))
    assert trace.parent == state / "logs" / "errors"
    text = trace.read_text()
    assert "Traceback (most recent call last)" in text
    if command == "caused":  # the cause is in the file, the line is one line
        assert "ConnectionError: connection refused" in text and "Connection error" in line
    else:  # the step's own trace, where the error happened
        assert "--- where it happened ---" in text and "RuntimeError: deep" in text


def test_debug_prints_the_trace_before_the_line(state: Path) -> None:
    for env in ({DEBUG_ENV: "1"}, None):
        args = ["caused"] if env else []
        got = CliRunner().invoke(probe, args, env=env) if env else CliRunner().invoke(
            main, ["--debug", "generate", "--set", "rates_per_day.hires=x", "--out", str(state / "w")])
        assert got.stderr.rstrip().splitlines()[-1].startswith("churnbench: error: ")
        if env:
            assert "Traceback (most recent call last)" in got.stderr and "ConnectionError" in got.stderr
        else:  # a refusal under --debug: its traceback too, though no file is kept for it
            assert "Traceback (most recent call last)" in got.stderr and "must be a number" in got.stderr


def test_a_bug_is_one_line_naming_its_trace(state: Path) -> None:
    got = _invoke("bug")
    assert got.exit_code == 1 and got.stderr.count("\n") == 1
    assert got.stderr.startswith("churnbench: internal error: KeyError: 'missing' (trace: ")
    assert "a bug in churnbench" in got.stderr


def test_a_usage_error_is_one_line_and_exit_2(state: Path) -> None:
    for args, words in ((["run", "--nosuch"], "No such option '--nosuch'"),
                        (["run", "--world", "w"], "Missing option"),
                        (["run", "--world", "w", "--arm", "nosuch", "--t-prime", "a", "--t", "b"],
                         "Invalid value for '--arm'")):
        got = CliRunner().invoke(main, args, prog_name="churnbench")
        assert got.exit_code == 2 and got.stderr.count("\n") == 1, got.stderr
        assert got.stderr.startswith("churnbench run: usage error: ") and words in got.stderr
        assert got.stderr.rstrip().endswith("(see `churnbench run --help`)")
    assert not (state / "logs").exists()


def test_the_real_cli_in_a_process_keeps_the_rule(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "churn_assets", "run", "--world"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", STATE_DIR_ENV: str(tmp_path)})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("churnbench") and "usage error: Option '--world' requires an argument" in proc.stderr


def test_add_context_names_the_task_once() -> None:
    e = add_context(UserFacingError("staged partition s.t @ 2024-01-05: hashes differ"), "task q001 (t1_list_price)")
    assert str(add_context(e, "task q001 (t1_list_price)")) == \
        "task q001 (t1_list_price): staged partition s.t @ 2024-01-05: hashes differ"


def test_a_failed_step_records_its_line_alone_as_its_error() -> None:
    """What a run launched from the UI shows as its failure (issue 46): the step failure's error and the run
    failure's (Dagster copies the first step failure's) are the one line the CLI prints, with no class name, no
    stack and no copy of the line in the metadata; the description stays the line (what the CLI and the sensors
    read), and a refusal is not retried."""
    import dagster as dg

    from churn_assets.orchestration.assets.common import user_errors
    from churn_assets.orchestration.materialize import failure_message, failure_trace

    @dg.asset(retry_policy=dg.RetryPolicy(max_retries=2))
    def refusing() -> None:
        with user_errors("eval_run k: "):
            raise UserFacingError("unknown arm 'nosuch'\n(known: naive, grounding)")

    result = dg.materialize([refusing], raise_on_error=False)
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert not [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY]
    data = failure.step_failure_data
    assert data.user_failure_data is not None
    line = "eval_run k: unknown arm 'nosuch' (known: naive, grounding)"
    assert data.user_failure_data.description == line
    assert "error" not in data.user_failure_data.metadata
    [run_failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE]
    for error in (data.error, run_failure.job_failure_data.error):
        assert error is not None
        assert (error.message, list(error.stack), error.cls_name, error.cause) == (line, [], "Failure", None)
    assert failure_message(result) == line
    assert failure_trace(result) == f"step refusing:\n{line}"


def test_a_refusal_keeps_its_metadata_across_a_process_boundary() -> None:
    """A pool worker's refusal reaches the parent pickled: still a `dg.Failure` with its line and metadata."""
    import pickle

    import dagster as dg

    from churn_assets.orchestration.assets.common import step_failure
    from churn_assets.orchestration.refusal import StepRefusal

    refusal = pickle.loads(pickle.dumps(step_failure("a\nb", {"missing": "x"})))
    assert isinstance(refusal, StepRefusal) and isinstance(refusal, dg.Failure) and not refusal.allow_retries
    assert (refusal.description, refusal.metadata["missing"].value) == ("a b", "x")
    assert refusal.user_code_process_error_infos[0].message == "a b"
