"""A scenario is read once (issue 46, item 7): one cached `churnbench run`, from the command line to the scored
read it reuses, reads the scenario's file once, parses its key once in the process and takes the world's use lock
once for its one evaluation.

The counts come from the real functions, each wrapped by a counter that calls it (nothing is stubbed): the file
is counted where it is opened (`Path.open`, which `read_text` and `read_bytes` go through), the key where
`parse_scenario_key` is called, the lock where `StateLocks.hold` takes `<world>/in-use`. A function
imported by name into a module is wrapped there too, so a reader added later is counted wherever it imports it
from.

The run is the naive arm on a 30-day world of its own with 5 tasks (no vector index or staged cache to build);
the first `churnbench run` evaluates it, the second reuses its result and is the one counted.
"""

from __future__ import annotations

import datetime as dt
import sys
import traceback
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from click.testing import CliRunner
from few_tasks import use_task_count

import churn_assets.freshness.scenario
from churn_assets.cli import main
from churn_assets.orchestration.materialize import Session, materialize
from churn_assets.orchestration.world_registry import add_world
from churn_assets.state_locks import StateLocks
from churn_assets.world.config import load_config

pytestmark = pytest.mark.integration

T, T_PRIME = dt.date(2024, 1, 12), dt.date(2024, 1, 11)


def _wrap_everywhere(monkeypatch: pytest.MonkeyPatch, module: Any, name: str,
                     make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace `module.name` by `make(real)` there and in every loaded module of the project that imported it by
    name (undone with `monkeypatch`)."""
    real = getattr(module, name)
    wrapper = make(real)
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith(("churn_assets", "tests")) and \
                getattr(loaded, name, None) is real:
            monkeypatch.setattr(loaded, name, wrapper)


Calls = defaultdict[str, list[str]]  # what was counted -> where each count came from


def _caller() -> str:
    """The project's frames of the stack, innermost first: where a count came from, for a failure's message."""
    frames = [f for f in traceback.extract_stack()[:-2] if "/churn_assets/" in f.filename]
    return " < ".join(f"{Path(f.filename).stem}.{f.name}:{f.lineno}" for f in reversed(frames[-4:]))


def _count_reads(monkeypatch: pytest.MonkeyPatch, counts: Calls, scenarios_dir: Path) -> None:
    real_open = Path.open

    def counted_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.parent == scenarios_dir and "w" not in (args[0] if args else kwargs.get("mode", "r")):
            counts["scenario file reads"].append(_caller())
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counted_open)


def _count_parses(monkeypatch: pytest.MonkeyPatch, counts: Calls) -> None:
    def make(real: Callable[..., Any]) -> Callable[..., Any]:
        def counted(key: str) -> Any:
            counts["key parses"].append(_caller())
            return real(key)
        return counted

    _wrap_everywhere(monkeypatch, churn_assets.freshness.scenario, "parse_scenario_key", make)


def _count_world_locks(monkeypatch: pytest.MonkeyPatch, counts: Calls, use_lock: str) -> None:
    real = StateLocks.hold

    def counted(self: StateLocks, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == use_lock:
            counts["world lock acquisitions"].append(_caller())
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(StateLocks, "hold", counted)


def test_a_cached_run_reads_its_scenario_once(session: Session, session_defs: dg.Definitions,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    use_task_count(monkeypatch, 5)
    config = load_config(days=30, name="readonce")
    add_world(session.paths, session.instance, config)
    materialize(session, session_defs, ["ledger"], [config.world_id])
    args = ["run", "--world", config.world_id, "--arm", "naive", "--t-prime", T_PRIME.isoformat(),
            "--t", T.isoformat()]
    first = CliRunner().invoke(main, args, catch_exceptions=False)
    assert first.exit_code == 0, first.output

    counts: Calls = defaultdict(list)
    _count_reads(monkeypatch, counts, session.paths.root / "scenarios")
    _count_parses(monkeypatch, counts)
    _count_world_locks(monkeypatch, counts, session.paths.world_use_lock(config.world_id))
    cached = CliRunner().invoke(main, args, catch_exceptions=False)
    assert cached.exit_code == 0, cached.output
    assert "finished before with this identity" in cached.output  # the run reused its result
    assert cached.output.splitlines()[-2:-1] == first.output.splitlines()[-2:-1]  # the same figures line
    where = "\n".join(f"{what}: {len(calls)}\n  " + "\n  ".join(calls) for what, calls in counts.items())
    assert {what: len(calls) for what, calls in counts.items()} == {
        "scenario file reads": 1, "key parses": 1, "world lock acquisitions": 1}, where
