"""Refuse first, touch nothing (issue 37, item 3): each refused command, through the real CLI on the session's state
folder, is one line and leaves the state folder's files, the Dagster partitions and the locks exactly as they were.
A malformed date is refused before any service or the Dagster instance is opened: the test records how long that
took (the idle figure is written in docs/guarantees.md; the bound asserted here only catches a refusal that opened
the services, which takes tens of seconds)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from churn_assets.orchestration.dead_runs import DeadRun
from churn_assets.orchestration.materialize import Session
from churn_assets.orchestration.partitions import (
    REGRESSION_PARTITIONS_NAME,
    SCENARIO_PARTITIONS_NAME,
    SWEEP_PARTITIONS_NAME,
    WORLD_DAY_PARTITIONS_NAME,
    WORLD_PARTITIONS_NAME,
)

from .conftest import T_PRIME, Cli, T

pytestmark = pytest.mark.integration

GHOST = "nosuch-s1-abcdef"
DEAD_RUN_NOTICE = re.compile(r"^churnbench: (Dagster run|results catalog run) .*: its process( \(pid \d+\))? is gone; "
                             r"recorded (failed|complete)$")
# Files that change on their own while commands run (logs, the servers' data, the Dagster instance's storage):
# what a refusal must not leave behind are the folder's own records, listed by everything else.
VOLATILE = ("logs", "services", "dagster", "mongo", "pg")


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] not in VOLATILE}


def _partitions(session: Session) -> dict[str, list[str]]:
    return {name: sorted(session.instance.get_dynamic_partitions(name))
            for name in (WORLD_PARTITIONS_NAME, WORLD_DAY_PARTITIONS_NAME, SCENARIO_PARTITIONS_NAME,
                         SWEEP_PARTITIONS_NAME, REGRESSION_PARTITIONS_NAME)}


def _refusals(world: str) -> dict[str, list[str]]:
    run = ["run", "--world", world, "--arm", "grounding"]
    return {
        "unknown world": ["run", "--world", GHOST, "--arm", "grounding", "--t-prime", T_PRIME, "--t", T],
        "malformed world id": ["run", "--world", "not a world", "--arm", "grounding", "--t-prime", T_PRIME, "--t", T],
        "malformed date": [*run, "--t-prime", T_PRIME, "--t", "2024-13-45"],
        "T outside the calendar": [*run, "--t-prime", T_PRIME, "--t", "2025-06-01"],
        "T' after T": [*run, "--t-prime", T, "--t", T_PRIME],
        "a policy that does not parse": [*run, "--t-prime", T_PRIME, "--t", T, "--policy", "ttl:prices=soon"],
        "a policy on a policy-free arm": ["run", "--world", world, "--arm", "naive", "--t-prime", T_PRIME, "--t", T,
                                          "--policy", "off"],
        "a sweep of an unknown world": ["sweep", "--preset", "smoke", "--world", GHOST],
        "worlds rm of an unknown world": ["worlds", "rm", GHOST],
    }


def test_a_refused_command_is_one_line_and_leaves_nothing_behind(session: Session, small_world: str, cli: Cli,
                                                                 state_dir: Path) -> None:
    for where in ("dagster", "catalog"):  # the notices filtered below are the reaper's lines as it writes them
        assert DEAD_RUN_NOTICE.search("churnbench: " + DeadRun(where, "r1 key", "failed", 7).line())
    files, partitions = _files(state_dir), _partitions(session)
    assert small_world in partitions[WORLD_PARTITIONS_NAME]
    seconds: dict[str, float] = {}
    for what, args in _refusals(small_world).items():
        started = time.perf_counter()
        done = cli(*args, timeout=300)
        seconds[what] = time.perf_counter() - started
        # A command that opens the state folder first records the runs of other tests it finds dead, one notice
        # each (`orchestration/dead_runs.py`): they are not part of the refusal.
        lines = [x for x in done.stderr.strip().splitlines() if not DEAD_RUN_NOTICE.search(x)]
        assert done.returncode in (1, 2), f"{what}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        assert len(lines) == 1 and lines[0].startswith("churnbench") and "error" in lines[0], (what, done.stderr)
        assert _files(state_dir) == files, f"{what} left files behind: {sorted(_files(state_dir) - files)}"
        assert _partitions(session) == partitions, f"{what} changed the Dagster partitions"
    print("refusal seconds:", {k: round(v, 2) for k, v in seconds.items()})
    # A refusal that opened the services and the Dagster instance takes 30-70 s under load; one before them, a few.
    assert seconds["malformed date"] < 30, seconds
