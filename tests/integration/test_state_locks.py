"""The state folder's locks are Postgres advisory locks (decision 332, issue 47 item 3), on the real embedded Postgres.

Every lock here is held by another process (a `python -c` child holding it on its own connection), as a process of
another host would: nothing in the lock depends on this machine's file system. A child killed with SIGKILL leaves
no lock behind; a results folder whose writer died on another host is recorded failed by the next command.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.results import ResultsStore, RunKey
from churn_assets.files import LockTimeoutError
from churn_assets.freshness.scenario import Scenario
from churn_assets.orchestration.dead_runs import reap_dead_catalog_rows
from churn_assets.services import ServiceUrls
from churn_assets.state import StatePaths
from churn_assets.state_locks import StateLocks, state_locks

pytestmark = pytest.mark.integration

HOLDER = """
import sys, time
from churn_assets.state_locks import StateLocks
locks = StateLocks(sys.argv[1], sys.argv[2])
with locks.hold(sys.argv[3], shared=sys.argv[4] == "shared"):
    print("held", flush=True)
    time.sleep(600)
"""


def _holder(locks: StateLocks, name: str, *, shared: bool = False) -> subprocess.Popen[str]:
    """A child process holding `name` until it is killed; returns once it holds it."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, locks.url, locks.namespace, name,
                              "shared" if shared else "exclusive"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


def _stop(child: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    os.kill(child.pid, sig)
    child.wait(timeout=30)


def test_an_exclusive_lock_held_by_another_process_times_out_naming_it(state_paths: StatePaths,
                                                                         services: ServiceUrls) -> None:
    locks = state_locks(state_paths)
    assert locks.url == services.warehouse and locks.namespace == state_paths.state_id
    child = _holder(locks, "w/inputs/ledger")
    try:
        assert locks.is_held("w/inputs/ledger") and not locks.is_held("w/inputs/other")
        waited: list[str] = []
        started = time.monotonic()
        with pytest.raises(LockTimeoutError, match="another process has held the build of the ledger for 1 s"), \
                locks.hold("w/inputs/ledger", timeout=1, what="the build of the ledger",
                           on_wait=lambda: waited.append("waiting")):
            pytest.fail("the lock was taken while another process held it")
        assert waited == ["waiting"] and 1.0 <= time.monotonic() - started < 10
        with locks.hold("w/inputs/other", timeout=0):  # another name is another lock
            assert locks.is_held("w/inputs/other")
        other_folder = StateLocks(locks.url, "another-state-id")
        with other_folder.hold("w/inputs/ledger", timeout=0):  # another state folder's lock of the same name
            assert other_folder.is_held("w/inputs/ledger")
    finally:
        _stop(child)
    with locks.hold("w/inputs/ledger", timeout=5, on_wait=lambda: pytest.fail("the holder is gone")):
        assert locks.is_held("w/inputs/ledger")  # a second connection of this process sees it taken
    assert not locks.is_held("w/inputs/ledger")


def test_shared_holders_exclude_only_the_exclusive_one(state_paths: StatePaths, services: ServiceUrls) -> None:
    locks = state_locks(state_paths)
    child = _holder(locks, "w/in-use", shared=True)
    try:
        with locks.hold("w/in-use", shared=True, timeout=0):  # a second user of the world
            assert locks.is_held("w/in-use")
        with pytest.raises(LockTimeoutError, match="world w"), locks.hold("w/in-use", timeout=0, what="world w"):
            pytest.fail("a removal took the world while it was in use")
    finally:
        _stop(child)
    with locks.hold("w/in-use", timeout=0):
        assert locks.is_held("w/in-use")


def test_a_holder_killed_outright_leaves_no_lock(state_paths: StatePaths, services: ServiceUrls) -> None:
    locks = state_locks(state_paths)
    child = _holder(locks, "w/operational_store/2024-01-15")
    _stop(child, signal.SIGKILL)
    deadline = time.monotonic() + 10  # Postgres ends the backend once it reads the closed socket
    while locks.is_held("w/operational_store/2024-01-15"):
        assert time.monotonic() < deadline, "the killed holder's lock outlived it"
        time.sleep(0.1)
    with locks.hold("w/operational_store/2024-01-15", timeout=0):
        assert locks.is_held("w/operational_store/2024-01-15")


def test_a_results_folder_whose_writer_died_on_another_host_is_recorded_failed(
        state_paths: StatePaths, services: ServiceUrls) -> None:
    """The reaper could not tell whether another host's process lives; the folder's advisory lock tells: held, its
    writer lives (left running); free, it is gone (recorded failed), whichever host it ran on."""
    catalog = RunCatalog(services.warehouse)
    store = ResultsStore(state_paths.results_root, state_locks(state_paths))
    assert store.locks is not None
    keys = []
    for day in (15, 16):
        scenario = Scenario("locks-s42-aaaaaa", "naive", "tiered", dt.date(2024, 1, day), dt.date(2024, 1, 29))
        key = RunKey(scenario.world_id, scenario.key, f"{day:02d}" * 8, "git-test")  # a catalog row per experiment
        run_dir = store.run_dir(key)
        run_dir.mkdir(parents=True)
        (run_dir / "owner.json").write_text(json.dumps({"pid": 4242, "create_time": 1.0, "host": "hostb"}) + "\n")
        catalog.start(scenario, key, run_dir)
        keys.append(key)
    alive, dead = keys
    child = _holder(store.locks, store.lock_name(store.run_dir(alive)))  # its writer lives (on "hostb")
    try:
        reaped = reap_dead_catalog_rows(state_paths, catalog)
    finally:
        _stop(child)
    ours = {k.scenario_key: k for k in keys}
    assert [r.ref.split()[-1] for r in reaped if r.ref.split()[-1] in ours] == [dead.scenario_key]
    dead_row, alive_row = catalog.get(dead), catalog.get(alive)
    assert dead_row is not None and dead_row.status == "failed"
    assert "killed: the run's process (pid 4242) is gone" in (dead_row.error or "")
    assert alive_row is not None and alive_row.status == "running"
    again = reap_dead_catalog_rows(state_paths, catalog)  # its writer gone now
    assert [r.ref.split()[-1] for r in again if r.ref.split()[-1] in ours] == [alive.scenario_key]


def test_a_retry_folder_is_held_by_its_experiments_first_folders_lock(state_paths: StatePaths,
                                                                      services: ServiceUrls) -> None:
    store = ResultsStore(state_paths.results_root, state_locks(state_paths))
    key = RunKey("locks-s42-aaaaaa", "k", "cd" * 8, "git-test", repeat=2)
    assert store.lock_name(store.run_dir(key.retried(3))) == store.lock_name(store.run_dir(key)) == \
        f"results locks-s42-aaaaaa/k/{'cd' * 8}__git-test__rep2"
    with store.run_lock(key, on_wait=lambda: pytest.fail("free")):
        assert store.is_writing(store.run_dir(key.retried(1)))
    assert not store.is_writing(store.run_dir(key.retried(1)))


def test_the_locks_follow_a_postgres_started_again_elsewhere(state_paths: StatePaths, services: ServiceUrls,
                                                             tmp_path: Path) -> None:
    """An embedded Postgres started again listens on another socket: the locks ask where it is now, once."""
    gone = f"postgresql://postgres@/churnbench?host={tmp_path}&port=1"
    here = state_locks(state_paths).url
    moved = StateLocks(gone, state_paths.state_id, find_url=lambda: here)
    with moved.hold("w/inputs/ledger", timeout=0):
        assert moved.url == here and state_locks(state_paths).is_held("w/inputs/ledger")
    with pytest.raises(psycopg.OperationalError), StateLocks(gone, "x").hold("w/inputs/ledger"):
        pytest.fail("a lock taken on a Postgres that is not there")
