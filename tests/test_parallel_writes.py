"""Writers that may run at once on one state folder (parallel cells): the run-folder lock, atomic writes,
file locks, and the day builds that rely on them (documents, ledger, state id).

Threads stand in for processes where that is equivalent (an flock belongs to the open file description, so
two threads of one process exclude each other as two processes do); the lock of a killed holder is tested
with a real process. Two processes running whole cells at once are in tests/integration/test_figures_unchanged.py.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from scripted_answer import ScriptedAnswer

from churn_assets.evaluation.results import PARTIAL_FILE, SUMMARY_FILE, TASKS_FILE, ResultsStore
from churn_assets.evaluation.runner import RunSpec, evaluate
from churn_assets.files import LockTimeoutError, atomic_write_text, file_lock, is_locked, other_process_alive
from churn_assets.freshness.planning import served_vintage
from churn_assets.freshness.policies import Off
from churn_assets.freshness.scenario import Scenario
from churn_assets.grounding.registry import load_registry
from churn_assets.state import StatePaths
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task, task_set_hash
from churn_assets.world.config import load_config
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger, simulate

T = dt.date(2024, 1, 30)
T_PRIME = dt.date(2024, 1, 10)


class GatedArm:
    """Answers gold under its planned vintage; before its `gate_at`-th answer it waits for `gate` (so a test
    can hold a run in the middle while another run of the same key starts)."""

    def __init__(self, resolver: GoldResolver, planned: dict[str, dt.date], gate: threading.Event | None = None,
                 gate_at: int = 3) -> None:
        self.resolver, self._planned, self.gate, self.gate_at, self.calls = resolver, planned, gate, gate_at, 0
        self.name = "grounding_no_freshness_tiers"

    @property
    def planned_vintage(self) -> dict[str, dt.date]:
        return dict(self._planned)

    def answer(self, task: Task) -> ScriptedAnswer:
        self.calls += 1
        if self.gate is not None and self.calls == self.gate_at:
            assert self.gate.wait(30), "the second run never started waiting"
        value = self.resolver.gold(task.template, task.params, anchor=T, vintage=self._planned)
        read = {c: self._planned[c] for c in task.template.classes}
        return ScriptedAnswer(task.task_id, value, str(value), read)


@pytest.fixture(scope="module")
def world() -> tuple[GoldResolver, list[Task], dict[str, dt.date]]:
    config = load_config(days=30)
    records = [{"seq": i, "at": e.at.isoformat(), "kind": e.kind, "entity_type": e.entity_type,
                "entity_id": e.entity_id, "payload": e.payload} for i, e in enumerate(simulate(config))]
    resolver = GoldResolver(records)
    tasks = list(generate_task_set(records, world_id=config.world_id, anchor=T, n=12, resolver=resolver).tasks)
    return resolver, tasks, served_vintage(load_registry(), T_PRIME, T, Off())


def _spec(tasks: list[Task]) -> RunSpec:
    scenario = Scenario("default-s42-test00", "grounding_no_freshness_tiers", "off", T_PRIME, T)
    return RunSpec(scenario, "cafe", task_set_hash(tasks))


# ---------------------------------------------------------------------------------------------------
# The run folder's lock
# ---------------------------------------------------------------------------------------------------


def test_a_second_run_of_one_key_waits_and_reuses_instead_of_interleaving(world, tmp_path: Path) -> None:
    resolver, tasks, planned = world
    store, spec = ResultsStore(tmp_path), _spec(tasks)
    second_waits = threading.Event()
    first_arm = GatedArm(resolver, planned, gate=second_waits)
    second_arm = GatedArm(resolver, planned)
    out: dict[str, Any] = {}

    def run(name: str, arm: GatedArm, on_wait: Any = None) -> None:
        out[name] = evaluate(arm, tasks, resolver, store, spec, code="git-test", on_wait=on_wait)

    first = threading.Thread(target=run, args=("first", first_arm))
    first.start()
    deadline = time.monotonic() + 30
    while first_arm.calls < first_arm.gate_at and time.monotonic() < deadline:
        time.sleep(0.01)  # the first run holds the folder and is in the middle of its tasks
    run_dir = store.run_dir(spec.key("git-test"))
    assert (run_dir / PARTIAL_FILE).exists() and not (run_dir / SUMMARY_FILE).exists()
    second = threading.Thread(target=run, args=("second", second_arm, second_waits.set))
    second.start()
    first.join(60)
    second.join(60)
    assert second_waits.is_set(), "the second run did not wait for the first"
    assert second_arm.calls == 0  # it reused the finished folder: nothing asked twice, nothing interleaved
    assert out["first"] == out["second"]
    lines = (run_dir / TASKS_FILE).read_text().splitlines()
    assert len(lines) == len(tasks) == first_arm.calls
    assert not (run_dir / PARTIAL_FILE).exists()


def test_a_run_that_raised_leaves_the_folder_to_the_next_one(world, tmp_path: Path) -> None:
    resolver, tasks, planned = world
    store, spec = ResultsStore(tmp_path), _spec(tasks)

    class Interrupted(GatedArm):
        def answer(self, task: Task) -> ScriptedAnswer:
            if self.calls == 5:
                raise KeyboardInterrupt("stopped")
            return super().answer(task)

    with pytest.raises(KeyboardInterrupt):
        evaluate(Interrupted(resolver, planned), tasks, resolver, store, spec, code="git-test")
    assert not is_locked(store.run_dir(spec.key("git-test")) / ".lock")
    resumed = GatedArm(resolver, planned)
    evaluate(resumed, tasks, resolver, store, spec, code="git-test", on_wait=lambda: pytest.fail("no one holds it"))
    assert resumed.calls == len(tasks) - 5


# ---------------------------------------------------------------------------------------------------
# Atomic writes and file locks
# ---------------------------------------------------------------------------------------------------


def test_concurrent_atomic_writes_of_one_path_never_show_half_a_file(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    texts = [f"{n}:" + "x" * 200_000 + "\n" for n in range(4)]
    seen: set[str] = set()
    stop = threading.Event()

    def write(text: str) -> None:
        for _ in range(25):
            atomic_write_text(target, text)

    def read() -> None:
        while not stop.is_set():
            if target.exists():
                seen.add(target.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(t,)) for t in texts]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert seen and seen <= set(texts)  # every read was one whole text
    assert target.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary file left behind


def test_a_held_lock_makes_the_next_holder_wait_and_times_out_in_one_line(tmp_path: Path) -> None:
    lock = tmp_path / "locks" / "day.lock"
    waited: list[str] = []
    with file_lock(lock):
        assert is_locked(lock)
        with pytest.raises(LockTimeoutError, match=r"another process has held the build of day 3 for 0 s"), \
                file_lock(lock, timeout=0.2, what="the build of day 3", on_wait=lambda: waited.append("x")):
            pass
    assert waited == ["x"]  # told once that it waits
    assert not is_locked(lock)
    with file_lock(lock, timeout=0.2, on_wait=lambda: pytest.fail("the lock is free")):
        pass


def test_the_lock_of_a_killed_holder_is_released(tmp_path: Path) -> None:
    lock = tmp_path / "held.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"fh = open({str(lock)!r}, 'a'); fcntl.flock(fh, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert is_locked(lock)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        with file_lock(lock, timeout=5):
            pass
    finally:
        if holder.poll() is None:
            holder.kill()


# ---------------------------------------------------------------------------------------------------
# Builds that rely on them
# ---------------------------------------------------------------------------------------------------


def test_two_writers_of_one_document_day_write_it_once(tmp_path: Path) -> None:
    from contracts.facts import contract_facts_as_of
    from contracts.render import render_contract
    from contracts.store import read_day, write_day

    config = load_config(days=10)
    generate_ledger(config, tmp_path / "ledger")
    records = load_ledger(tmp_path / "ledger").records
    day = dt.date(2024, 1, 5)
    docs = [render_contract(f) for f in contract_facts_as_of(records, day)]
    target = tmp_path / "contracts" / day.isoformat()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            write_day(target, config.world_id, day, docs)
        except BaseException as e:
            errors.append(e)

    writers = [threading.Thread(target=write) for _ in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert errors == []
    stored = read_day(target)
    assert stored.verify() == [] and len(stored.manifest.documents) == len(docs)
    inode = target.stat().st_ino
    write_day(target, config.world_id, day, docs)  # identical: left in place, never swapped under a reader
    assert target.stat().st_ino == inode


def test_two_generators_of_one_ledger_each_write_their_own_file(tmp_path: Path) -> None:
    config = load_config(days=10)
    out = tmp_path / "ledger"
    errors: list[BaseException] = []

    def generate() -> None:
        try:
            generate_ledger(config, out)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=generate) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    loaded = load_ledger(out)  # verifies the hash chain and the manifest
    assert loaded.verified and loaded.manifest is not None and loaded.manifest.count == len(loaded.records)
    assert sorted(p.name for p in out.iterdir()) == ["ledger.jsonl", "manifest.json"]


def test_a_state_folder_created_by_two_processes_at_once_gets_one_id(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    paths = StatePaths.resolve(tmp_path / "state")
    paths.ensure()
    first = paths.state_id
    # The second creator looked before the first wrote (both saw no id): it must keep the first one's id,
    # which the first may already have recorded (the embedded Postgres' owner file).
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: False if self.name == ".state-id" else real_exists(self))
    paths.ensure()
    monkeypatch.undo()
    assert paths.state_id == first
    assert sorted(p.name for p in paths.root.iterdir()) == [".state-id", "state-format"]  # no temporary left


def test_other_process_alive_tells_a_live_writer_from_a_leftover() -> None:
    """What the dbt run folders and the contract documents' leftovers are judged by: this process is not
    "another writer", a running child is, and a child that has exited is not."""
    assert not other_process_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert other_process_alive(child.pid)
    finally:
        child.kill()
        child.wait(10)
    assert not other_process_alive(child.pid)
