"""kill -9 mid-run (issue 22, item 1): a real `churnbench run` SIGKILLs itself at deterministic points
(`CHURNBENCH_FAULT`, churn_assets/faults.py): while an input is materialized (the operational store written
without its `_meta`), while answering (after 7 of 20 tasks), and in `finish` (tasks.jsonl written, summary.json
not yet). After each kill nothing reads complete; the next command records the dead runs failed in Dagster and in
the catalog; the run that finally completes has, task for task, the results of an uninterrupted run."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import signal
from pathlib import Path

import dagster as dg
import pytest

from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.results import OWNER_FILE, PARTIAL_FILE, SUMMARY_FILE, TASKS_FILE, TIMINGS_FILE
from churn_assets.orchestration.dead_runs import PID_TAG, reap_dead_runs
from churn_assets.orchestration.materialize import Session

from .conftest import T_PRIME, TASKS, Cli, T, run_args, scenario_key

pytestmark = pytest.mark.integration
KILLED = -signal.SIGKILL


def _runs_of(session: Session, pid: int, started: bool = False) -> list[dg.DagsterRun]:
    statuses = [dg.DagsterRunStatus.STARTED] if started else []
    return list(session.instance.get_runs(filters=dg.RunsFilter(tags={PID_TAG: str(pid)}, statuses=statuses)))


def _catalog_row(session: Session, key: str) -> object:
    [row] = RunCatalog(session.urls.warehouse).find(key)
    return row


def test_a_run_killed_at_each_point_resumes_to_the_results_of_an_uninterrupted_run(
        session: Session, session_defs: dg.Definitions, small_world: str, cli: Cli, cli_task_count: None) -> None:
    from churn_assets.fabric.mongo import database_name, read_meta
    from churn_assets.services import mongo_client

    args = run_args(small_world)
    key = scenario_key(small_world)
    scenario_results = session.paths.results_dir(small_world) / key

    # 1. Killed while the operational store of T is written: the database has no `_meta`, so no reader takes
    #    it for complete, and its Dagster run is left STARTED by the dead process.
    killed = cli(*args, fault="operational_before_meta:1")
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    [input_run] = _runs_of(session, killed.pid, started=True)
    client = mongo_client(session.urls.mongodb)
    try:
        assert read_meta(client[database_name(small_world, dt.date.fromisoformat(T))]) is None
    finally:
        client.close()

    # 2. Killed while answering, after 7 tasks checkpointed. Its own start recorded run 1 failed.
    answering = cli(*args, fault="after_tasks:7")
    assert answering.returncode == KILLED, answering.stderr[-2000:]
    assert f"Dagster run {input_run.run_id}: its process (pid {killed.pid}) is gone; recorded failed" \
        in answering.stderr
    assert session.instance.get_run_by_id(input_run.run_id).status == dg.DagsterRunStatus.FAILURE
    [run_dir] = scenario_results.iterdir()
    assert len((run_dir / PARTIAL_FILE).read_text().splitlines()) == 7
    assert not (run_dir / SUMMARY_FILE).exists()
    assert json.loads((run_dir / OWNER_FILE).read_text())["pid"] == answering.pid
    assert _catalog_row(session, key).status == "running"
    [eval_run] = _runs_of(session, answering.pid, started=True)

    # What the next command does when it opens the state folder: `results list`, which materializes nothing,
    # records the catalog row failed and the Dagster run the row names failed too (issue 35: it used to stay
    # STARTED until the next materializing command), and shows the row without figures.
    listed = cli("results", "list", "--world", small_world)
    assert listed.returncode == 0, listed.stderr
    assert f"results catalog run {_catalog_row(session, key).run_id} {key}: its process (pid {answering.pid}) is " \
        "gone; recorded failed" in listed.stderr
    assert f"Dagster run {eval_run.run_id}: its process (pid {answering.pid}) is gone; recorded failed" in listed.stderr
    assert session.instance.get_run_by_id(eval_run.run_id).status == dg.DagsterRunStatus.FAILURE
    row = _catalog_row(session, key)
    assert row.status == "failed" and "7 task(s) checkpointed" in row.error and row.accuracy is None
    line = next(x for x in listed.stdout.splitlines() if key in x)
    assert " failed " in line and "%" not in line  # no figures without a summary behind them
    shown = cli("results", "show", key)
    assert "checkpointed   7 task(s) answered so far (not results" in shown.stdout, shown.stdout
    assert reap_dead_runs(session.paths, session.instance, session.urls.warehouse) == []  # once only

    # 3. Killed in `finish`: tasks.jsonl is written, summary.json is not: the folder is not complete.
    finishing = cli(*args, fault="finish:1")
    assert finishing.returncode == KILLED, finishing.stderr[-2000:]
    assert (run_dir / TASKS_FILE).exists() and not (run_dir / SUMMARY_FILE).exists()
    assert len((run_dir / PARTIAL_FILE).read_text().splitlines()) == TASKS

    # 4. The run completes from its checkpoint (in this process: the same code, so the same identity): every task
    #    was answered before, none is asked again.
    assert {(d.where, d.recorded) for d in reap_dead_runs(session.paths, session.instance, session.urls.warehouse)} \
        == {("dagster", "failed"), ("catalog", "failed")}
    resumed = _run(session, session_defs, small_world)
    assert resumed["reused"] is False and Path(resumed["results"]) == run_dir
    assert json.loads((run_dir / TIMINGS_FILE).read_text())["resumed_tasks"] == TASKS
    row = _catalog_row(session, key)
    assert row.status == "complete" and row.attempts == 3 and row.tasks == TASKS
    for pid in (killed.pid, answering.pid, finishing.pid):
        assert _runs_of(session, pid, started=True) == []

    # 5. The same run uninterrupted (its finished folder moved aside) gives the same bytes.
    kept = run_dir.with_name(run_dir.name + ".resumed")
    shutil.move(run_dir, kept)
    try:
        _run(session, session_defs, small_world)
        assert json.loads((run_dir / TIMINGS_FILE).read_text())["resumed_tasks"] == 0
        for name in (TASKS_FILE, SUMMARY_FILE, "stale.csv"):
            assert (run_dir / name).read_bytes() == (kept / name).read_bytes(), name
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def _run(session: Session, definitions: dg.Definitions, world: str, policy: str = "tiered") -> dict[str, object]:
    from churn_assets.orchestration.scenario_runs import run_scenario

    return run_scenario(session, definitions, world, "naive", dt.date.fromisoformat(T_PRIME), dt.date.fromisoformat(T),
                        policy, "default", lambda _line: None)


def test_a_checkpoint_with_a_torn_line_is_rewritten_atomically(tmp_path: Path) -> None:
    """Resuming drops a line cut short by the kill and rewrites the checkpoint through a temporary file and a
    rename (never truncated in place, where a second kill would lose every row)."""
    from churn_assets.evaluation.results import RunWriter

    partial = tmp_path / PARTIAL_FILE
    partial.write_text('{"task_id":"q001","v":1}\n{"task_id":"q002","v":2}\n{"task_id":"q0')
    inode = partial.stat().st_ino
    writer = RunWriter(tmp_path)
    assert list(writer.completed) == ["q001", "q002"]
    assert partial.read_text() == '{"task_id":"q001","v":1}\n{"task_id":"q002","v":2}\n'
    assert partial.stat().st_ino != inode  # replaced by rename, not rewritten in place
    assert not list(tmp_path.glob(".*.tmp"))
