"""The celery engine's seams without a broker (issue 47; decisions 329-330): where a run's jobs run, a worker of other
code refusing a job, and how a job's end becomes its future's result or one line (`EnginePool._outcome`, given
stand-ins for celery's AsyncResult). The engine itself runs in `tests/integration/test_engine.py`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from churn_assets.orchestration import engine
from churn_assets.orchestration.cells import Cell, CellResult
from churn_assets.services.engine import BrokerService, EngineWorkerService
from churn_assets.state import STATE_DIR_ENV, StatePaths


def test_one_worker_runs_in_this_process_and_more_on_the_engine(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """No option selects another way to run cells (decision 330): one worker is the calling process, where a job
    runs at submission on the caller's session and definitions; more are the engine's."""
    from churn_assets.orchestration import cells

    session = SimpleNamespace(paths=StatePaths.resolve(str(tmp_path)))
    made: list[int] = []
    monkeypatch.setattr(cells, "EnginePool", lambda _session, workers, _say: made.append(workers) or "engine")
    assert cells.cell_pool(session, 3) == "engine" and made == [3]  # type: ignore[arg-type, comparison-overlap]
    pool = cells.cell_pool(session, 1)  # type: ignore[arg-type]
    assert isinstance(pool, cells.InProcessPool) and made == [3]
    pool.definitions = "the caller's definitions"  # type: ignore[assignment]
    with pool:
        pool.warm_up()
        future = pool.submit(cells.worker_session, ())
    assert future.result() == (session, "the caller's definitions")
    with pytest.raises(RuntimeError, match="worker was not started"):
        cells.worker_session()  # outside a job: no worker state is left behind


def test_a_worker_of_other_code_refuses_the_job_naming_both_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    task = SimpleNamespace(request=SimpleNamespace(hostname="w1@hostb"))
    monkeypatch.setattr(engine, "_WORKER_VERSION", "git-000000000000")
    refused = engine._run_job(task, calls.append, ("ran",), "git-111111111111")
    assert isinstance(refused, engine.Refused) and calls == []
    assert refused.line == ("worker w1@hostb runs code git-000000000000, the run sending it git-111111111111: start "
                            "the worker from the run's code")
    assert engine._run_job(task, calls.append, ("ran",), "git-000000000000") is None and calls == ["ran"]


def test_a_worker_that_does_not_see_the_runs_state_folder_refuses_the_job(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """A worker on another host without the shared filesystem: no folder at the run's path, or another folder
    there (another id), or another path; each refused in one line naming both, before the job runs."""
    calls: list[str] = []
    task = SimpleNamespace(request=SimpleNamespace(hostname="w1@hostb"))
    monkeypatch.setattr(engine, "_WORKER_VERSION", "git-000000000000")
    shared = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(shared))

    def run(state: tuple[str, str]) -> Any:
        return engine._run_job(task, calls.append, ("ran",), "git-000000000000", state)

    missing = run((str(shared), "a1b2"))
    assert isinstance(missing, engine.Refused) and f"sees no state folder at {shared}" in missing.line
    assert "shared filesystem at the same path" in missing.line and "\n" not in missing.line
    here = StatePaths(shared).ensure().state_id
    other = run((str(shared), "a1b2"))
    assert isinstance(other, engine.Refused)
    assert f"sees another state folder at {shared} (id {here}, the run's a1b2)" in other.line
    elsewhere = run(("/srv/churnbench", here))
    assert isinstance(elsewhere, engine.Refused)
    assert f"works on the state folder {shared}, the run on /srv/churnbench" in elsewhere.line
    assert calls == []
    assert run((str(shared), here)) is None and calls == ["ran"]


@dataclass
class FakeResult:
    """What `_outcome` reads of celery's AsyncResult."""

    value: Any = None
    done: bool = True
    failure: bool = False
    worker: str | None = None
    broken: Exception | None = None

    def ready(self) -> bool:
        if self.broken is not None:
            raise self.broken
        return self.done

    def get(self, **_kwargs: Any) -> Any:
        return self.value

    def failed(self) -> bool:
        return self.failure


def _pool() -> engine.EnginePool:
    pool = engine.EnginePool.__new__(engine.EnginePool)  # no broker: only `where` and `_outcome` are used
    pool.url = "redis://:secret@127.0.0.2:6390/0"
    return pool


class WorkerLostError(Exception):
    """Named as celery's (billiard's) error is: `_outcome` recognises it by name."""


def test_a_job_ends_as_its_value_with_its_worker_or_as_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    monkeypatch.delenv("CHURNBENCH_BROKER_URL", raising=False)
    pool = _pool()
    cell = Cell("w", "grounding", "tiered", dt.date(2024, 1, 29), dt.date(2024, 1, 30))
    assert pool._outcome(FakeResult(done=False)) is None
    ok, value = pool._outcome(FakeResult(CellResult(cell, {"accuracy": 1.0}), worker="w1@hostb"))  # type: ignore[misc]
    assert ok and value.worker == "w1@hostb" and value.summary == {"accuracy": 1.0}
    ok, value = pool._outcome(FakeResult(engine.Refused("worker w1 runs code a, the run sending it b")))  # type: ignore[misc]
    assert not ok and str(value) == "worker w1 runs code a, the run sending it b"
    ok, value = pool._outcome(FakeResult(WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL)"),  # type: ignore[misc]
                                         failure=True))
    assert not ok and str(value) == ("its worker process died twice (WorkerLostError: Worker exited prematurely: "
                                     "signal 9 (SIGKILL))")
    ok, value = pool._outcome(FakeResult(broken=ConnectionError("Error 111 connecting to 127.0.0.2:6390")))  # type: ignore[misc]
    assert not ok and "the broker redis://:***@127.0.0.2:6390/0 stopped answering: ConnectionError: Error 111" \
        in str(value) and "the same command resumes" in str(value) and "secret" not in str(value)


def test_silent_workers_fail_the_waiting_jobs_later_while_local_worker_processes_are_alive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No worker answers: waiting jobs fail after `NO_WORKER_S`, or after `STARTING_S` while the local worker
    processes are alive (still importing the code location on a loaded machine), naming where to look."""
    import threading
    from concurrent.futures import Future

    clock = [1000.0]
    monkeypatch.setattr(engine.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(engine, "answering_workers", lambda _url: [])
    alive = ["running"]
    monkeypatch.setattr(engine, "ensure_local_workers",
                        lambda *_a: [SimpleNamespace(state=state) for state in alive])
    pool = _pool()
    pool.session, pool.local, pool.workers, pool.code_version = SimpleNamespace(paths=None), 2, 2, "git-x"
    pool._lock, pool._answered = threading.Lock(), 1000.0
    revoked: list[str] = []

    class Waiting:  # what `_check_workers` calls on celery's AsyncResult
        def __init__(self, name: str) -> None:
            self.name = name

        def revoke(self) -> None:
            revoked.append(self.name)

    future: Future[Any] = Future()
    pool._waiting = {Waiting("job"): future}

    clock[0] += engine.NO_WORKER_S + 1  # alive but silent: still starting
    pool._check_workers()
    assert not future.done() and revoked == []
    clock[0] = 1000.0 + engine.STARTING_S + 1
    pool._check_workers()
    assert future.done() and revoked == ["job"]
    assert "no cell engine worker has answered" in str(future.exception())
    assert "churnbench services status" in str(future.exception())

    alive.clear()  # no local process at all: the shorter wait
    pool._answered, clock[0] = 1000.0, 1000.0 + engine.NO_WORKER_S + 1
    future = Future()
    pool._waiting = {Waiting("job2"): future}
    pool._check_workers()
    assert future.done() and revoked == ["job", "job2"]


def test_the_broker_asks_for_a_password_and_binds_the_service_address(tmp_path: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    paths = StatePaths.resolve(tmp_path / "state").ensure()
    command = BrokerService().command(paths, "127.0.0.2", 6390)
    assert command[command.index("--bind") + 1] == "127.0.0.2" and command[command.index("--port") + 1] == "6390"
    password = (paths.services_dir / "broker-password").read_text().strip()
    assert command[command.index("--requirepass") + 1] == password and len(password) >= 32
    assert oct((paths.services_dir / "broker-password").stat().st_mode & 0o777) == "0o600"
    assert BrokerService().url_for("127.0.0.2", 6390) == "redis://127.0.0.2:6390/0"  # records hold no password


def test_a_worker_never_started_is_stopped_and_says_so(tmp_path: Any) -> None:
    paths = StatePaths.resolve(tmp_path / "state").ensure()
    worker = EngineWorkerService(0)
    assert worker.status(paths).state == "stopped"
    assert worker.stop(paths).action == "was not running"


def test_a_local_worker_shares_the_runs_settings_but_its_own_three() -> None:
    from churn_assets.services.engine import settings_fingerprint

    base = {"CHURNBENCH_LLM_GGUF": "a.gguf", "HOME": "/root", "PATH": "/bin"}
    same = settings_fingerprint(base)
    assert settings_fingerprint({**base, "HOME": "/other", "CHURNBENCH_STATE_DIR": "/s", "CHURNBENCH_BROKER_URL": "r",
                                 "CHURNBENCH_TORCH_THREADS": "1"}) == same
    assert settings_fingerprint({**base, "CHURNBENCH_LLM_GGUF": "b.gguf"}) != same
    assert settings_fingerprint({**base, "CHURNBENCH_FAULT": "after_tasks:1"}) != same
    assert settings_fingerprint({**base, "PYTHONPATH": "/elsewhere"}) != same


def test_a_sweep_cell_names_the_engine_worker_that_ran_it() -> None:
    """The sweep's cell table (the run's metadata in the UI) says where each cell ran on celery; nothing on the pool."""
    from churn_assets.orchestration.sweeps import outcome_of

    cell = SimpleNamespace(to_json=lambda: {"arm": "grounding"})
    assert outcome_of(cell, {"accuracy": 1.0}, 3.0, "worker-1@host")["worker"] == "worker-1@host"  # type: ignore[arg-type]
    assert "worker" not in outcome_of(cell, {"accuracy": 1.0}, 3.0)  # type: ignore[arg-type]


def test_the_run_worker_takes_its_versions_runs_and_finds_the_embedded_broker_itself(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Decision 333: `churnbench worker --runs` on the queue of its code version; with the embedded broker it is not
    given CHURNBENCH_BROKER_URL (which means an external broker whose cell workers run elsewhere), so a sweep run in
    it starts its local cell workers as the command line does."""
    import subprocess

    from churn_assets.services import engine as engine_services

    started: list[tuple[list[str], dict[str, str]]] = []

    def popen(cmd: list[str], env: dict[str, str], **_kwargs: Any) -> Any:
        started.append((cmd, env))
        return SimpleNamespace(pid=os.getpid())

    monkeypatch.setattr(subprocess, "Popen", popen)
    paths = StatePaths.resolve(tmp_path / "state").ensure()
    paths.services_dir.mkdir(parents=True, exist_ok=True)
    monkeypatch.delenv(engine_services.BROKER_URL_ENV, raising=False)
    EngineWorkerService(None).start_with(paths, "redis://:pw@127.0.0.1:1/0", "git-abc", 1)
    monkeypatch.setenv(engine_services.BROKER_URL_ENV, "redis://:pw@broker:6379/0")
    EngineWorkerService(None).start_with(paths, "redis://:pw@broker:6379/0", "git-abc", 1)
    EngineWorkerService(0).start_with(paths, "redis://:pw@127.0.0.1:1/0", "git-abc", 1)
    (runs, embedded), (_, external), (cells, cell_env) = started
    assert runs[-1] == "--runs" and "--runs" not in cells and "run-worker@%h" in runs
    url_env = engine_services.BROKER_URL_ENV
    assert url_env not in embedded and external[url_env] == "redis://:pw@broker:6379/0"
    assert cell_env[url_env] == "redis://:pw@127.0.0.1:1/0"
    assert engine_services.runs_queue("git-abc") != engine_services.runs_queue("git-abd") != engine_services.QUEUE


def test_a_run_worker_is_named_as_one_whatever_name_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep counts its cell workers by name and leaves run workers out: `--runs --name box-1` is
    `run-worker-box-1`, on its code version's queue."""
    from click.testing import CliRunner

    from churn_assets.commands import worker as worker_command
    from churn_assets.services.engine import BROKER_URL_ENV, RUN_SLOTS, runs_queue

    started: list[list[str]] = []
    monkeypatch.setenv(BROKER_URL_ENV, "redis://:pw@broker:6379/0")
    monkeypatch.setenv("C_FORCE_ROOT", "1")
    monkeypatch.setattr(engine, "engine_app", lambda _url: SimpleNamespace(worker_main=started.append))
    monkeypatch.setattr(engine, "serving", lambda _version: None)  # this process is not a worker
    for name, expected in (("box-1", "run-worker-box-1"), ("run-worker@box-2", "run-worker@box-2")):
        result = CliRunner().invoke(worker_command.worker, ["--runs", "--name", name, "--code-version", "git-abc"])
        assert result.exit_code == 0, result.output
        argv = started[-1]
        assert argv[argv.index("-n") + 1] == expected
        assert argv[argv.index("-Q") + 1] == runs_queue("git-abc") and argv[argv.index("-c") + 1] == str(RUN_SLOTS)
