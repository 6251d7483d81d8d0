"""Shared aggregates and shared sub-states change no gold: every shortcut is compared with the plain path.

`GoldResolver` assembles a vintage map's state from (class, day) sub-states folded for earlier maps and keeps
the aggregates its states share; `AnswerChangeRates.measure` shares a day's aggregates between the tasks of
that day. Here each is compared with gold computed the plain way (a full `fold_vintage` per map, no scope) on a
60-day default-config world.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from typing import Any

import pytest

from churn_assets.evaluation import exposure
from churn_assets.evaluation.exposure import AnswerChangeRates
from churn_assets.freshness.planning import served_vintage
from churn_assets.freshness.policies import Off, Tiered
from churn_assets.grounding.registry import load_registry
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver, gold_from_state
from churn_assets.tasks.shared_aggregates import in_scope, shared, shared_aggregates
from churn_assets.tasks.task_set import Task
from churn_assets.world.config import load_config
from churn_assets.world.events import EVENT_KINDS, round_payload
from churn_assets.world.fold import fold_vintage, uniform_vintage
from churn_assets.world.simulator import simulate
from churn_assets.world.state import STATE_CLASSES, WorldState

START = dt.date(2024, 1, 1)
T = START + dt.timedelta(days=59)


@pytest.fixture(scope="module")
def world() -> tuple[list[dict[str, Any]], list[Task]]:
    config = load_config(seed=42, days=60)
    records = [{"seq": i, "at": e.at.isoformat(), "kind": e.kind, "entity_type": e.entity_type,
                "entity_id": e.entity_id, "payload": round_payload(EVENT_KINDS[e.kind], e.payload)}
               for i, e in enumerate(simulate(config))]
    tasks = generate_task_set(records, world_id="w60", anchor=T).tasks
    return records, tasks


def _vintages() -> list[dict[str, dt.date]]:
    registry = load_registry()
    maps = [uniform_vintage(T)]
    for gap in (3, 11, 29):
        for policy in (Tiered(), Off()):
            maps.append(served_vintage(registry, T - dt.timedelta(days=gap), T, policy))
    return maps


def test_the_resolver_gives_the_plain_gold_under_every_vintage(world: tuple[list[dict[str, Any]], list[Task]]) -> None:
    records, tasks = world
    resolver = GoldResolver(records)
    compared = 0
    for vintage in _vintages():
        plain_state = fold_vintage(records, vintage)
        for task in tasks:
            plain = gold_from_state(plain_state, task.template, task.params, T)
            assert resolver.gold(task.template, task.params, anchor=T, vintage=vintage) == plain, task.task_id
            compared += 1
    assert compared == len(tasks) * 7
    # The stale maps share their fresh classes with the gold at T: fewer folds than maps x classes.
    assert len(resolver._subs) < 7 * len(STATE_CLASSES)


def test_a_partial_fold_holds_exactly_its_classes(world: tuple[list[dict[str, Any]], list[Task]]) -> None:
    records, _ = world
    vintage = _vintages()[-1]
    full = fold_vintage(records, vintage)
    part = fold_vintage(records, vintage, classes=["assignments", "consumption"])
    for c in STATE_CLASSES:
        expected = getattr(full, c) if c in ("assignments", "consumption") else getattr(WorldState(vintage={}), c)
        assert dataclasses.asdict(getattr(part, c)) == dataclasses.asdict(expected), c


def test_rates_with_shared_aggregates_equal_the_plain_measurement(world: tuple[list[dict[str, Any]], list[Task]],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    records, tasks = world
    shared_run = AnswerChangeRates.measure(records, tasks, start=START, until=T - dt.timedelta(days=1))
    monkeypatch.setattr(exposure, "shared_aggregates", contextlib.nullcontext)
    plain_run = AnswerChangeRates.measure(records, tasks, start=START, until=T - dt.timedelta(days=1))
    assert shared_run.changed == plain_run.changed
    assert sum(len(days) for days in plain_run.changed.values()) > 50  # the comparison saw answers move


def test_a_scope_keeps_per_sub_state_and_ends_with_its_block() -> None:
    calls: list[str] = []
    a, b = object(), object()

    def compute(name: str) -> str:
        calls.append(name)
        return name

    assert not in_scope()
    shared("x", (a,), 1, lambda: compute("outside"))
    shared("x", (a,), 1, lambda: compute("outside"))
    assert calls == ["outside", "outside"]  # no scope: nothing kept
    with shared_aggregates():
        assert in_scope()
        assert shared("x", (a,), 1, lambda: compute("a1")) == "a1"
        assert shared("x", (a,), 1, lambda: compute("again")) == "a1"  # kept
        assert shared("x", (b,), 1, lambda: compute("b1")) == "b1"  # another sub-state
        assert shared("x", (a,), 2, lambda: compute("a2")) == "a2"  # other arguments
        with shared_aggregates():  # a nested scope starts empty and ends with its block
            assert shared("x", (a,), 1, lambda: compute("inner")) == "inner"
        assert shared("x", (a,), 1, lambda: compute("again")) == "a1"
    assert not in_scope()
    assert calls == ["outside", "outside", "a1", "b1", "a2", "inner"]
