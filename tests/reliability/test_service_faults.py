"""Service faults (issue 22, item 7): the MongoDB-protocol server, the SaaS API and Postgres killed during an
evaluation, Postgres killed during a staged-cache materialization, and a full disk at the results writer. Each
run fails with one line naming what failed (no traceback), records nothing partial as complete, and the next run
completes with the results of an uninterrupted one.

The run is paused at a deterministic point (`CHURNBENCH_FAULT=<point>:<n>:pause=<file>`, churn_assets/faults.py)
while the test kills the service, then let go. One scenario takes the evaluation faults one after the other, each
run resuming the checkpoint the one before left (which holds only real answers)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.results import PARTIAL_FILE, SUMMARY_FILE, TASKS_FILE
from churn_assets.faults import FAULT_ENV
from churn_assets.orchestration.materialize import Session
from churn_assets.services import MONGO, POSTGRES, SAAS, ensure_services

from .conftest import T_PRIME, TASKS, Cli, T, run_args

pytestmark = pytest.mark.integration
# Another SaaS plan: the same answers as the reference run (decision 189), in a scenario of its own (naive takes no
# policy since issue 35, so a policy can no longer tell the two apart)
PROFILE = "unlimited"


def _pause_then(proc: subprocess.Popen[str], pause: Path, act: Callable[[], None], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not pause.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the fault point was never reached"
        time.sleep(0.05)
    act()
    pause.unlink()


def _run_paused(command: list[str], env: dict[str, str], pause: Path, act: Callable[[], None]) -> tuple[int, str]:
    """Run `command` until its fault point pauses it, `act`, let it go on; its exit code and stderr."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _pause_then(proc, pause, act)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


def _kill(service: object, session: Session) -> int:
    pid = service.status(session.paths, check_health=False).pid  # type: ignore[attr-defined]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return int(pid)


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [ln for ln in stderr.strip().splitlines() if ln.startswith("churnbench: error:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def _key(world: str, saas_profile: str) -> str:
    from churn_assets.arms.registry import define_scenario

    return define_scenario(world, "naive", "tiered", dt.date.fromisoformat(T_PRIME), dt.date.fromisoformat(T),
                           saas_profile=saas_profile).key


def _rows(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / TASKS_FILE).read_text().splitlines()]


def _restart_services(session: Session) -> None:
    """What the next command does (`ensure_services`), and the same for this process's open Dagster instance: each
    of its storages meets the dead connections of the killed Postgres once, which drops its pool. The session's
    URLs are the restarted services' (a restarted MongoDB-protocol server listens on a new port), so the tests that
    share this session after this file find them."""
    session.urls = ensure_services(session.paths)
    probes = (lambda: session.instance.get_runs(limit=1), lambda: session.instance.get_dynamic_partitions("world"),
              lambda: session.instance.all_instigator_state())
    for probe in probes:
        for _attempt in range(2):
            try:
                probe()
                break
            except Exception:  # the stale pooled connection: invalidated by this failure
                continue


def test_service_faults_during_an_evaluation_fail_it_in_one_line_and_the_rerun_gives_uninterrupted_results(
        session: Session, small_world: str, churnbench_exe: str, cli_environ: dict[str, str], cli: Cli,
        tmp_path: Path) -> None:
    """One scenario, five runs: the disk is full at its 2nd task write; the MongoDB-protocol server, the SaaS API and
    Postgres are killed while it answers (after 3, 4 and 5 more tasks); the fifth run completes."""
    reference = cli(*run_args(small_world))  # the same answers, uninterrupted (reused if it ran before)
    assert reference.returncode == 0, reference.stderr[-3000:]
    reference_dir = Path(reference.stdout.strip().splitlines()[-1].removeprefix("results: "))
    args = [*run_args(small_world), "--saas-profile", PROFILE]
    key = _key(small_world, PROFILE)
    full = cli(*args, fault="task_write:2:enospc")  # the disk is full at the second answer's checkpoint write
    assert full.returncode == 1, full.stderr[-3000:]
    line = _one_error_line(full.stderr)
    assert "no space left on the device of" in line and PARTIAL_FILE in line, line
    [row] = RunCatalog(session.urls.warehouse).find(key)
    assert row.status == "failed" and "no space left" in (row.error or "")
    [folder] = (session.paths.results_dir(small_world) / key).iterdir()
    assert not (folder / SUMMARY_FILE).exists() and len((folder / PARTIAL_FILE).read_text().splitlines()) == 1

    pause = tmp_path / "paused"
    for n, (service, label) in enumerate([(MONGO, "MongoDB-protocol server"), (SAAS, "SaaS API"),
                                          (POSTGRES, "Postgres")]):
        env = {**cli_environ, FAULT_ENV: f"after_tasks:{3 + n}:pause={pause}"}
        returncode, err = _run_paused([churnbench_exe, *args], env, pause, lambda s=service: _kill(s, session))
        assert returncode == 1, err[-3000:]
        line = _one_error_line(err)
        assert label in line and "churnbench services up" in line, line
        assert not (folder / SUMMARY_FILE).exists()
        checkpoint = [json.loads(x) for x in (folder / PARTIAL_FILE).read_text().splitlines()]
        assert all(r["transport_error"] is None for r in checkpoint)  # an outage is not recorded as a verdict
        _restart_services(session)

    done = cli(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = RunCatalog(session.urls.warehouse).find(key)
    assert row.status == "complete" and row.tasks == TASKS and row.attempts == 5
    assert _rows(folder) == _rows(reference_dir)
    summary = json.loads((folder / SUMMARY_FILE).read_text())
    assert summary["verdicts"] == json.loads((reference_dir / SUMMARY_FILE).read_text())["verdicts"]
    assert summary["verdicts"]["transport_failure"] == 0


STAGED_SCRIPT = """
import sys, datetime as dt
from churn_assets.errors import UserFacingError
from churn_assets.orchestration.definitions import defs_for
from churn_assets.orchestration.materialize import materialize, open_session
from churn_assets.orchestration.partitions import world_day_key
from churn_assets.state import StatePaths

paths = StatePaths.resolve()
try:
    with open_session(paths) as session:
        key = world_day_key(sys.argv[2], sys.argv[3])
        [run] = materialize(session, defs_for(str(paths.root)), [sys.argv[1]], [key])
        print("rows", run.metadata[sys.argv[1]].get("dagster/row_count"))
except UserFacingError as e:
    print(f"churnbench: error: {e}", file=sys.stderr)
    sys.exit(1)
"""


def test_postgres_killed_during_a_staged_cache_materialization_records_nothing_and_a_rerun_builds_it(
        session: Session, session_defs: dg.Definitions, small_world: str, cli_environ: dict[str, str],
        tmp_path: Path) -> None:
    """Killed inside the partition's transaction (rows and meta row written, not committed): the step fails naming
    Postgres, no materialization and no meta row are recorded (what was there before stays: another test of the
    session may have built this partition), and the rerun writes the partition."""
    from churn_assets.fabric.postgres import connection
    from churn_assets.grounding.staging import partition_record
    from churn_assets.orchestration.materialize import materialize

    asset, table, day = "staged_prices", "prices", "2024-01-24"
    key = f"{day}|{small_world}"

    def latest() -> int | None:  # the storage id of the partition's latest materialization
        found = session.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]), limit=1).records
        return found[0].storage_id if found else None

    def meta() -> Any:
        with connection(session.urls.warehouse, autocommit=True) as conn:
            return partition_record(conn, small_world, table, dt.date.fromisoformat(day))

    before, meta_before = latest(), meta()
    pause = tmp_path / "staged.paused"
    command = [sys.executable, "-c", STAGED_SCRIPT, asset, small_world, day]
    returncode, err = _run_paused(command, {**cli_environ, FAULT_ENV: f"staged_before_commit:1:pause={pause}"}, pause,
                                  lambda: _kill(POSTGRES, session))
    assert returncode == 1, err[-3000:]
    line = _one_error_line(err)
    assert "Postgres" in line, line
    _restart_services(session)
    assert latest() == before  # no materialization recorded
    assert meta() == meta_before  # the partition's meta row: not written (or the earlier one, untouched)
    materialize(session, session_defs, [asset], [key])  # the rerun (in this process: no second start-up)
    record = meta()
    assert record is not None and record.rows > 0
    after = latest()
    assert after is not None and after != before
