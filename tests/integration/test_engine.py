"""Cells on the celery engine (issue 47, items 2, 6 and 7; decisions 329 and 330), with the services bound to
127.0.0.2.

Two `churnbench worker` processes are started as a worker on another host is (docs/deployment.md, "Workers on other
hosts"): given only the variables `churnbench services urls --show-secrets` prints (every service over TCP with its
password, the broker's URL) and the state folder's path (a shared filesystem). This process points at the same
broker (`CHURNBENCH_BROKER_URL`: an external broker's run starts no local worker) and evaluates two cells of a
30-day world on them; the figures equal a one-worker run's in this process (`workers=1`) after the results are
removed. Then one worker process is killed with SIGKILL in the middle of a cell: the cell starts again (a second
`eval_run` run of its partition), is scored once (one catalog row, each task once) and its figures are the
undisturbed run's. (A worker of other code refusing a job: `tests/test_engine.py`.)
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from churn_assets.services import (
    DAGSTER_POSTGRES_URL_ENV,
    MONGODB_URI_ENV,
    POSTGRES_URL_ENV,
    SAAS_API_KEY_ENV,
    SAAS_URL_ENV,
    SERVICE_HOST_ENV,
    purge_embedded_data,
    start_services,
    worker_settings,
)
from churn_assets.services.base import SAAS_KEY_ISSUER_ENV
from churn_assets.services.engine import BROKER_URL_ENV, broker_url
from churn_assets.state import STATE_DIR_ENV, StatePaths

pytestmark = pytest.mark.integration
HOST = "127.0.0.2"
FOREIGN_ENVS = (POSTGRES_URL_ENV, DAGSTER_POSTGRES_URL_ENV, MONGODB_URI_ENV, SAAS_URL_ENV, SAAS_API_KEY_ENV,
                SAAS_KEY_ISSUER_ENV, BROKER_URL_ENV, "CHURNBENCH_ARM_PASSWORD")
T = dt.date(2024, 1, 30)
FIGURES = ("experiment_hash", "accuracy", "stale_answers", "exposure", "verdicts")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StatePaths, str]]:
    """A fresh state folder bound to 127.0.0.2 with a 30-day world and its broker; this process points at the broker
    as an external one (so a run starts no local worker). Everything is stopped and purged at the end."""
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import add_world
    from churn_assets.world.config import load_config

    paths = StatePaths.resolve(tmp_path_factory.mktemp("engine-state"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SERVICE_HOST_ENV, HOST)
        mp.setenv(STATE_DIR_ENV, str(paths.root))
        for name in FOREIGN_ENVS:
            mp.delenv(name, raising=False)
        try:
            start_services(paths)
            config = load_config(days=30)
            with open_session(paths) as session:
                add_world(paths, session.instance, config)
            mp.setenv(BROKER_URL_ENV, broker_url(paths))
            yield paths, config.world_id
        finally:
            mp.delenv(BROKER_URL_ENV, raising=False)
            purge_embedded_data(paths)


@contextmanager
def by_address(paths: StatePaths, churnbench_exe: str, names: list[str], *options: str,
               **extra: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`churnbench worker` processes started as on another host: their environment holds only what `churnbench
    services urls --show-secrets` prints (the services' TCP URLs and secrets, the broker's URL), the state folder's
    path and `extra`; `options` go on their command line (`--runs`: run workers). Stopped at the end."""
    settings, _notes = worker_settings(paths)
    given = {s.name: s.value for s in settings}
    assert given[BROKER_URL_ENV] == os.environ[BROKER_URL_ENV]
    environment = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), STATE_DIR_ENV: str(paths.root),
                   **given, **extra}
    workers = [subprocess.Popen([churnbench_exe, "worker", *options, "--name", f"{name}@test", "--log-file",
                                 str(paths.root / f"{name}.log")], env=environment, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT) for name in names]
    try:
        yield workers
    finally:
        for process in workers:
            process.terminate()
        for process in workers:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


def _cells(world: str) -> list[Any]:
    from churn_assets.orchestration.cells import Cell

    return [Cell(world, "grounding", "tiered", T - dt.timedelta(days=1), T),
            Cell(world, "grounding", "off", T - dt.timedelta(days=1), T)]


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary.get(k) for k in FIGURES}


def _clear(paths: StatePaths, results: list[Any]) -> None:
    """Remove the cells' results folders and catalog rows: the next run evaluates them again."""
    from churn_assets.evaluation.catalog_removal import delete_scenario_runs
    from churn_assets.fabric.postgres import connection
    from churn_assets.orchestration.materialize import open_session

    for r in results:
        shutil.rmtree(paths.results_dir(r.cell.world) / r.summary["scenario_key"])
    with open_session(paths) as session, connection(session.urls.warehouse, autocommit=True) as conn:
        delete_scenario_runs(conn, [r.summary["scenario_key"] for r in results])


def test_two_workers_started_by_address_evaluate_cells_with_one_process_figures(
        cluster: tuple[StatePaths, str], churnbench_exe: str) -> None:
    from churn_assets.orchestration.cells import run_cells

    paths, world = cluster
    lines: list[str] = []
    with by_address(paths, churnbench_exe, ["by-address-0", "by-address-1"]):
        on_engine = run_cells(paths, _cells(world), workers=2, progress=lines.append)
    assert all(r.ok for r in on_engine), lines
    # The engine's record of where each cell ran: celery's extended result names its worker.
    assert {r.worker.split("@")[0] for r in on_engine} <= {"by-address-0", "by-address-1"}
    assert all(r.worker for r in on_engine)
    assert any("on by-address-" in line for line in lines), lines
    # Nothing of the services listens on 127.0.0.1: every worker reached them by their 127.0.0.2 URLs.
    assert all("127.0.0.1" not in json.dumps(r.summary) for r in on_engine)

    rows = [_scored_rows(r) for r in on_engine]

    _clear(paths, on_engine)
    in_process = run_cells(paths, _cells(world), workers=1)
    assert all(r.ok for r in in_process), [r.error for r in in_process]
    assert [_figures(r.summary) for r in on_engine] == [_figures(r.summary) for r in in_process]
    assert rows == [_scored_rows(r) for r in in_process]  # every answer, verdict and trace, byte for byte


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether process `pid` is `ancestor` or one of its descendants (read from /proc)."""
    while pid > 1:
        if pid == ancestor:
            return True
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return False


def test_a_run_worker_started_by_address_executes_a_launched_run(cluster: tuple[StatePaths, str],
                                                                  churnbench_exe: str) -> None:
    """Decision 333's run worker started as on another host (`churnbench worker --runs`, docs/deployment.md), given
    only the printed variables and the state folder's path: a run launched through the state folder's run launcher
    (what the UI's launch calls once Dagster has made the run) goes to it and is executed there by Dagster's run
    body, ending SUCCESS in a process of that worker."""
    import dagster as dg
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster._core.launcher import LaunchRunContext

    from churn_assets.orchestration.code_location import CODE_LOCATION_MODULE
    from churn_assets.orchestration.dead_runs import PID_TAG
    from churn_assets.orchestration.materialize import open_session

    paths, world = cluster
    keys = [dg.AssetKey("ledger")]  # a 30-day world's ledger: seconds to simulate again, byte for byte
    with by_address(paths, churnbench_exe, ["box"], "--runs") as [worker], open_session(paths) as session:
        job = importlib.import_module(CODE_LOCATION_MODULE).defs.resolve_implicit_global_asset_job_def()
        origin = ReconstructableRepository.for_module(CODE_LOCATION_MODULE, "defs").get_python_origin()
        run = session.instance.create_run_for_job(
            job_def=job, asset_selection=set(keys), job_code_origin=origin.get_job_origin(job.name),
            tags=job.get_tags_for_partition_key(world, selected_asset_keys=keys))
        session.instance.run_launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
        deadline = time.monotonic() + 300
        while not (ended := session.instance.get_run_by_id(run.run_id)) or not ended.is_finished:
            assert time.monotonic() < deadline, f"the run is still {ended and ended.status}"
            time.sleep(0.5)
        assert ended.status == dg.DagsterRunStatus.SUCCESS, [e.message for e in session.instance.all_logs(run.run_id)]
        assert _descends_from(int(ended.tags[PID_TAG]), worker.pid), ended.tags


def _scored_rows(result: Any) -> bytes:
    return (Path(result.summary["results"]) / "tasks.jsonl").read_bytes()


def _undisturbed_then_cleared(paths: StatePaths, world: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any],
                                                                                                    list[Any], str]:
    """One cell evaluated undisturbed in this process, then its results removed; the runs that follow use the
    embedded broker and local workers, as `churnbench paper` has them. (cell, its undisturbed result, its key)"""
    from churn_assets.orchestration.cells import run_cells

    cell = _cells(world)[:1]
    undisturbed = run_cells(paths, cell, workers=1)  # reused when an earlier test ran it
    assert undisturbed[0].ok, undisturbed[0].error
    _clear(paths, undisturbed)
    monkeypatch.delenv(BROKER_URL_ENV)
    return cell, undisturbed, undisturbed[0].summary["scenario_key"]


def _resumes_scored_once(paths: StatePaths, cell: list[Any], undisturbed: list[Any]) -> None:
    """The disturbed cell run again on two workers: complete, each task scored once, the undisturbed figures."""
    from churn_assets.orchestration.cells import run_cells

    again = run_cells(paths, cell, workers=2)
    assert again[0].ok, again[0].error
    assert _figures(again[0].summary) == _figures(undisturbed[0].summary)
    rows = [json.loads(line) for line in _scored_rows(again[0]).splitlines()]
    assert len(rows) == undisturbed[0].summary["tasks"] and len({r["task_id"] for r in rows}) == len(rows)


def test_a_worker_killed_mid_cell_runs_it_again_and_scores_it_once(cluster: tuple[StatePaths, str],
                                                                  churnbench_exe: str, tmp_path: Path) -> None:
    """Two workers whose processes pause at their 60th scored answer (`CHURNBENCH_FAULT`, counted per process): the
    first to pause is killed with SIGKILL there; the cell runs again (on the other worker or the killed one's new
    process) and a pause met after the kill is released at once."""
    import dagster as dg

    from churn_assets.fabric.postgres import connection
    from churn_assets.orchestration.cells import run_cells
    from churn_assets.orchestration.materialize import open_session

    paths, world = cluster
    cell = _cells(world)[:1]
    undisturbed = run_cells(paths, cell, workers=1)  # reused when the test above ran first
    assert undisturbed[0].ok, undisturbed[0].error
    key = undisturbed[0].summary["scenario_key"]
    _clear(paths, undisturbed)
    pause = tmp_path / "paused"
    outcome: list[Any] = []
    killed: int | None = None
    with by_address(paths, churnbench_exe, ["faulty-0", "faulty-1"], CHURNBENCH_FAULT=f"after_tasks:60:pause={pause}"):
        runner = threading.Thread(target=lambda: outcome.extend(run_cells(paths, cell, workers=2)))
        runner.start()
        while runner.is_alive():
            if pause.exists():
                text = pause.read_text().strip()
                if killed is None and text:
                    killed = int(text)
                    os.kill(killed, signal.SIGKILL)  # mid-cell: 60 of its 180 answers scored
                pause.unlink(missing_ok=True)  # the kill's own marker, or a later pause: released
            time.sleep(0.05)
        runner.join()
    assert killed is not None, "no worker process reached its 60th answer"
    assert outcome and outcome[0].ok, outcome[0].error if outcome else "no result"

    with open_session(paths) as session:
        runs = list(session.instance.get_runs(dg.RunsFilter(tags={"dagster/partition": key})))  # newest first
        with connection(session.urls.warehouse) as conn:
            statuses_of_rows = sorted(row[0] for row in conn.execute(
                "SELECT status FROM churnbench.results_runs WHERE scenario_key = %s", (key,)).fetchall())
            experiments = conn.execute("SELECT count(*) FROM churnbench.results_experiments WHERE scenario_key = %s",
                                       (key,)).fetchone()
    statuses = sorted(r.status.value for r in runs[:2])  # the newest two: the killed one and its rerun
    assert statuses == ["STARTED", "SUCCESS"] or statuses == ["FAILURE", "SUCCESS"], statuses  # started twice
    assert _figures(outcome[0].summary) == _figures(undisturbed[0].summary)
    rows = [json.loads(line) for line in _scored_rows(outcome[0]).splitlines()]
    assert len(rows) == undisturbed[0].summary["tasks"] and len({r["task_id"] for r in rows}) == len(rows)
    # Scored once: one complete catalog row and one experiment; the killed attempt's row is taken over by the rerun
    # or left recorded failed (as a process killed outright leaves it), never left running.
    assert statuses_of_rows in (["complete"], ["complete", "failed"]), statuses_of_rows
    assert experiments is not None and experiments[0] == 1


def test_the_broker_killed_mid_cell_fails_the_run_in_one_line_and_the_same_run_resumes(
        cluster: tuple[StatePaths, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The embedded broker SIGKILLed while a local worker is in the middle of a cell (paused at its 60th answer): the
    run fails that cell in one line naming the broker; the same run again starts a broker (a new port) and workers
    on it, and the cell ends complete and scored once, with the undisturbed figures (issue 47, item 6)."""
    from churn_assets.fabric.postgres import connection
    from churn_assets.orchestration.cells import run_cells
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.services.process import read_record

    paths, world = cluster
    cell, undisturbed, key = _undisturbed_then_cleared(paths, world, monkeypatch)
    pause = tmp_path / "paused"
    monkeypatch.setenv("CHURNBENCH_FAULT", f"after_tasks:60:pause={pause}")  # the local workers take the run's
    outcome: list[Any] = []
    killed = False
    runner = threading.Thread(target=lambda: outcome.extend(run_cells(paths, cell, workers=2)))
    runner.start()
    while runner.is_alive():
        if pause.exists() and pause.read_text().strip():
            if not killed:
                os.kill(int(read_record(paths, "broker")["pid"]), signal.SIGKILL)  # mid-cell: 60 of 180 scored
                killed = True
            pause.unlink(missing_ok=True)  # the worker goes on with its cell, its broker gone
        time.sleep(0.05)
    runner.join()
    assert killed, "no worker reached its 60th answer"
    assert not outcome[0].ok and "\n" not in outcome[0].error, outcome[0].error
    assert "broker" in outcome[0].error and "stopped answering" in outcome[0].error, outcome[0].error

    monkeypatch.delenv("CHURNBENCH_FAULT")
    _resumes_scored_once(paths, cell, undisturbed)
    with open_session(paths) as session, connection(session.urls.warehouse) as conn:
        statuses = sorted(row[0] for row in conn.execute(
            "SELECT status FROM churnbench.results_runs WHERE scenario_key = %s", (key,)).fetchall())
        experiments = conn.execute("SELECT count(*) FROM churnbench.results_experiments WHERE scenario_key = %s",
                                   (key,)).fetchone()
    assert statuses in (["complete"], ["complete", "failed"]), statuses  # never left running, never twice complete
    assert experiments is not None and experiments[0] == 1


CANCELED_RUN = """
import datetime as dt, sys
from churn_assets.orchestration.cells import Cell, run_cells
from churn_assets.state import StatePaths
world, t_prime, t = sys.argv[1], dt.date.fromisoformat(sys.argv[2]), dt.date.fromisoformat(sys.argv[3])
run_cells(StatePaths.resolve(), [Cell(world, "grounding", "tiered", t_prime, t)], workers=2, progress=print)
"""


def test_a_run_ended_mid_cell_cancels_the_running_cell_in_its_worker(
        cluster: tuple[StatePaths, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What the UI's Terminate does to a sweep's run (SIGINT to its process), with a cell running on a local engine
    worker (paused at its 60th answer): the cell is canceled in the worker, not left to run on. Its Dagster run ends
    CANCELED, its catalog row failed, its checkpoint kept; the worker process that ran it exits (celery starts
    another); the same cell run again resumes and is scored once, with the undisturbed figures (issue 47, item 4)."""
    import dagster as dg

    from churn_assets.evaluation.results import PARTIAL_FILE
    from churn_assets.fabric.postgres import connection
    from churn_assets.orchestration.materialize import open_session

    paths, world = cluster
    cell, undisturbed, key = _undisturbed_then_cleared(paths, world, monkeypatch)
    pause = tmp_path / "paused"
    environment = {**os.environ, "CHURNBENCH_FAULT": f"after_tasks:60:pause={pause}"}
    run = subprocess.Popen([sys.executable, "-c", CANCELED_RUN, world, cell[0].t_prime.isoformat(),
                            cell[0].t.isoformat()], env=environment, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not (pause.exists() and pause.read_text().strip()):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0][-3000:]
        time.sleep(0.05)
    worker_pid = int(pause.read_text())
    run.send_signal(signal.SIGINT)  # what Ctrl-C sends the command's run
    output = run.communicate(timeout=120)[0]
    assert run.returncode != 0, output[-3000:]
    assert "cells: the run ended before its jobs: 1 running canceled in their workers, 0 queued revoked" in output, \
        output[-3000:]
    deadline = time.monotonic() + 60
    while _alive(worker_pid):  # canceled in the middle of its pause, the worker process exits
        assert time.monotonic() < deadline, "the canceled cell's worker process went on"
        time.sleep(0.1)
    pause.unlink(missing_ok=True)

    with open_session(paths) as session, connection(session.urls.warehouse) as conn:
        [cell_run] = session.instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": key}), limit=1)
        row = conn.execute("SELECT status, error, results_dir FROM churnbench.results_runs WHERE scenario_key = %s",
                           (key,)).fetchone()
    assert cell_run.status == dg.DagsterRunStatus.CANCELED, cell_run.status
    assert row is not None and row[0] == "failed" and "JobCanceled: canceled" in row[1], row
    assert len((Path(row[2]) / PARTIAL_FILE).read_text().splitlines()) >= 59  # kept for the next run

    _resumes_scored_once(paths, cell, undisturbed)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_the_papers_default_workers_run_on_the_engine_started_as_services(cluster: tuple[StatePaths, str],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine is the default: without `CHURNBENCH_BROKER_URL`, a run with the paper's default workers (two on
    these machines; `--workers` above 1 anywhere) starts the embedded broker and local workers, left running with
    their code version and log (`services status`, the broker with its queue depth), and the engine's record of
    the cell (celery's extended result) names the local worker that ran it; `services down` stops them (and every
    other service: this test runs last in the module)."""
    from churn_assets.commands.run import default_workers
    from churn_assets.evaluation.results import code_version
    from churn_assets.orchestration.cells import run_cells
    from churn_assets.services import services_status, stop_services

    paths, world = cluster
    monkeypatch.delenv(BROKER_URL_ENV)
    workers = max(2, default_workers())
    lines: list[str] = []
    results = run_cells(paths, _cells(world)[:1], workers=workers, progress=lines.append)  # the result is reused
    assert results[0].ok and results[0].worker.startswith("worker-"), (results[0].error, results[0].worker)
    assert lines[-1].endswith(f"({workers} engine workers)"), lines
    shown = {s.name: s for s in services_status(paths)}
    assert shown["broker"].state == "running" and "queue 0 task(s)" in shown["broker"].detail
    for i in range(workers):
        assert shown[f"worker-{i}"].state == "running" and f"code {code_version()}" in shown[f"worker-{i}"].detail
    stopped = {s.name: s.action for s in stop_services(paths)}
    assert stopped["worker-0"] == "stopped" and stopped["broker"] == "stopped"
    assert "worker-0" not in {s.name for s in services_status(paths, check_health=False)}  # its record is gone

    in_process: list[str] = []
    assert run_cells(paths, _cells(world)[:1], workers=1, progress=in_process.append)[0].worker == ""
    assert in_process[-1].endswith("(in this process)"), in_process
    assert "broker" not in {s.name for s in services_status(paths, check_health=False)}  # one worker: no engine

    # `services up --workers 2` starts them before any run, with this process's settings (a run with the same ones
    # finds them running); `services down` stops them.
    from click.testing import CliRunner

    from churn_assets.cli import main

    shown_up = CliRunner().invoke(main, ["services", "up", "--workers", "2"])
    assert shown_up.exit_code == 0, shown_up.output
    assert all(name in shown_up.output for name in ("broker", "worker-0", "worker-1")), shown_up.output
    stopped = {s.name: s.action for s in stop_services(paths)}
    assert stopped["worker-1"] == "stopped" and stopped["broker"] == "stopped"
