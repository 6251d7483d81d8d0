"""Concurrent commands on one state folder (issue 22, item 2): each waits for the other or refuses in one line, and
nothing is half-built. Overlaps are made deterministic by pausing a command inside its locks
(`CHURNBENCH_FAULT=materialize:1:pause=<file>`, churn_assets/faults.py) instead of racing two processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest

from churn_assets.faults import FAULT_ENV
from churn_assets.orchestration.materialize import Session
from churn_assets.state import StatePaths

from .conftest import T_PRIME, T

pytestmark = pytest.mark.integration


class Background:
    """A churnbench command in the background, its output in files (read while it runs)."""

    def __init__(self, exe: str, args: list[str], env: dict[str, str], folder: Path, name: str) -> None:
        self.out, self.err = folder / f"{name}.out", folder / f"{name}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen([exe, *args], env=env, stdout=out, stderr=err, text=True)

    def output(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def wait_for(self, found: Callable[[], bool], what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not found():
            assert self.proc.poll() is None, f"exited {self.proc.returncode} before {what}:\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} after {timeout} s:\n{self.output()[-3000:]}"
            time.sleep(0.05)

    def finish(self, timeout: float = 300) -> int:
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture
def background(churnbench_exe: str, cli_environ: dict[str, str], tmp_path: Path
               ) -> Iterator[Callable[..., Background]]:
    started: list[Background] = []

    def start(*args: str, pause: Path | None = None, name: str = "cmd") -> Background:
        env = {**cli_environ, "PYTHONUNBUFFERED": "1"}  # its output is read while it runs
        if pause is not None:
            env[FAULT_ENV] = f"materialize:1:pause={pause}"
        started.append(Background(churnbench_exe, list(args), env, tmp_path, name))
        return started[-1]

    yield start
    for b in started:
        b.kill()


@pytest.fixture(scope="module")
def lone_world(session: Session) -> str:
    """A registered 30-day world of this module (seed 5) with nothing built."""
    from churn_assets.orchestration.world_registry import add_world
    from churn_assets.world.config import load_config

    config = load_config(days=30, seed=5, name="concurrent")
    add_world(session.paths, session.instance, config)
    return config.world_id


def test_worlds_rm_during_a_run_refuses_and_removes_nothing(session: Session, lone_world: str, cli: Callable,
                                                           background: Callable[..., Background],
                                                           tmp_path: Path) -> None:
    from churn_assets.orchestration.world_registry import is_registered, remove_world, world_artefacts

    pause = tmp_path / "run.paused"
    run = background("run", "--world", lone_world, "--arm", "naive", "--t-prime", T_PRIME, "--t", T, pause=pause,
                     name="run")
    run.wait_for(pause.exists, "the run paused in its first build")
    before = world_artefacts(session.paths, session.instance, lone_world)
    refused = cli("worlds", "rm", lone_world)
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert line == (f"churnbench: error: world {lone_world} is in use by another churnbench command (a run, project "
                    "or materialize of it): nothing was removed; try again when it is done")
    assert is_registered(session.instance, lone_world)
    assert world_artefacts(session.paths, session.instance, lone_world) == before
    # The run dies (its locks go with it); now the removal goes through and leaves nothing.
    run.kill()
    remove_world(session.paths, session.instance, lone_world)
    assert world_artefacts(session.paths, session.instance, lone_world) == []
    assert not is_registered(session.instance, lone_world)


def test_two_worlds_add_materialize_of_one_world_build_one_after_the_other(
        session: Session, cli: Callable, background: Callable[..., Background], tmp_path: Path) -> None:
    from churn_assets.orchestration.world_registry import remove_world
    from churn_assets.world.config import load_config
    from churn_assets.world.ledger import load_ledger

    args = ["worlds", "add", "--days", "30", "--seed", "6", "--name", "twice", "--materialize"]
    world = load_config(days=30, seed=6, name="twice").world_id
    pause = tmp_path / "first.paused"
    first = background(*args, pause=pause, name="first")
    first.wait_for(pause.exists, "the first paused holding the ledger's build lock")
    second = background(*args, name="second")
    second.wait_for(lambda: "another churnbench process is building it; waiting" in second.output(),
                    "the second waiting")
    assert not (session.paths.ledger_dir(world) / "ledger.jsonl").exists()
    pause.unlink()  # the first goes on; the second builds after it
    assert first.finish() == 0, first.output()
    assert second.finish() == 0, second.output()
    loaded = load_ledger(session.paths.ledger_dir(world))  # verifies the hash chain and the manifest
    assert len(loaded.records) > 0
    assert not list(session.paths.ledger_dir(world).glob(".*.tmp"))
    remove_world(session.paths, session.instance, world)


def test_a_second_project_waits_for_the_first_and_takes_over_when_it_dies(
        session: Session, session_defs: dg.Definitions, background: Callable[..., Background], tmp_path: Path) -> None:
    """Two `project` of one world: the second waits on the first's build lock; when the first is killed the kernel
    drops the lock and the second builds (stopped here at its own first build: the dbt build is not re-run)."""
    from churn_assets.orchestration.materialize import materialize
    from churn_assets.orchestration.world_registry import add_world, remove_world
    from churn_assets.world.config import load_config

    config = load_config(days=30, seed=8, name="project")
    world = config.world_id
    add_world(session.paths, session.instance, config)
    materialize(session, session_defs, ["ledger"], [world])
    first_pause, second_pause = tmp_path / "first.paused", tmp_path / "second.paused"
    first = background("project", "--world", world, pause=first_pause, name="first")
    first.wait_for(first_pause.exists, "the first project paused in truth + raw")
    second = background("project", "--world", world, pause=second_pause, name="second")
    second.wait_for(lambda: "another churnbench process is building it; waiting" in second.output(),
                    "the second project waiting")
    assert not second_pause.exists()
    first.kill()
    second.wait_for(second_pause.exists, "the second project building once the first died")
    second.kill()
    remove_world(session.paths, session.instance, world)


def test_services_up_from_two_shells_start_each_service_once(churnbench_exe: str, cli_env: Callable,
                                                             tmp_path: Path) -> None:
    from churn_assets.services import purge_embedded_data

    paths = StatePaths.resolve(tmp_path / "two-shells")
    env = {k: v for k, v in cli_env(paths.root).items() if k != FAULT_ENV}
    try:
        procs = [subprocess.Popen([churnbench_exe, "services", "up"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=180) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        lines = [line for out, _ in outs for line in out.splitlines() if line.startswith("postgres")]
        assert sum("(started" in line for line in lines) == 1, lines
        assert sum("(already running" in line for line in lines) == 1, lines
        # One server of each: the records name the processes the second `up` found.
        pids = {out.split("pid ")[1].split()[0] for line_out, _ in outs for out in line_out.splitlines()
                if out.startswith("postgres")}
        assert len(pids) == 1
        assert os.path.exists(paths.pg_data / "postmaster.pid")
    finally:
        purge_embedded_data(paths)
