"""The differential: Python gold (`tasks/gold.py` over the fold) against the SQL gold, task by task, under
several vintage maps. Used by `bench/differential_gold.py` and its CI test; the target is zero disagreements.

The maps are chosen to exercise what the two implementations could get wrong differently: every class at T
(gold at T), the paper's tiered map at T' = T - 29 (hot classes a day old, warm ones five, cold ones 29: a
user the served `user_status` knows may be unknown to the served `cost_center_membership`), every cached class
at T - 29 (the `off` policy), and two staggered maps giving each class, live ones included, a day of its own
(so windows over stale live data are cut short and every cross-class reference meets a different day), once
with `assignments` newer than `user_status` and once older (only then does a license have an inactive holder:
the world frees an offboarded user's licenses on the day they leave).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from churn_assets.evaluation.independent.gold import SqlGold
from churn_assets.freshness.planning import served_vintage
from churn_assets.freshness.policies import Off, Tiered
from churn_assets.grounding.registry import load_registry
from churn_assets.tasks.answers import Value
from churn_assets.tasks.generator import candidates, world_pools
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task
from churn_assets.tasks.templates import TEMPLATES
from churn_assets.world.events import ENTITY_CLASSES

Day = dt.date
VintageMap = dict[str, Day]

GAP = 29  # the paper's D+28 window: T' = T - 29
# Staggered maps: class -> days before T (distinct, so no two classes share a day); the second map reverses them.
STAGGER: dict[str, int] = dict(zip(ENTITY_CLASSES, (1, 4, 9, 2, 17, 29, 3, 6, 12), strict=True))


def _clip(day: Day, first_day: Day) -> Day:
    return max(day, first_day)


def vintage_maps(anchor: Day, first_day: Day) -> dict[str, VintageMap]:
    """The differential's maps for a world whose calendar starts on `first_day`, asked at `anchor`."""
    registry = load_registry()
    t_prime = _clip(anchor - dt.timedelta(days=GAP), first_day)
    return {
        "every class at T": dict.fromkeys(ENTITY_CLASSES, anchor),
        f"tiered, T'={t_prime}": served_vintage(registry, t_prime, anchor, Tiered()),
        f"cached classes at {t_prime}": served_vintage(registry, t_prime, anchor, Off()),
        "staggered": {c: _clip(anchor - dt.timedelta(days=k), first_day) for c, k in STAGGER.items()},
        "staggered, reversed": {c: _clip(anchor - dt.timedelta(days=k), first_day)
                                for c, k in zip(STAGGER, reversed(STAGGER.values()), strict=True)},
    }


@dataclass(frozen=True)
class Disagreement:
    world_id: str
    vintage: str
    task_id: str
    template_id: str
    params: Mapping[str, Any]
    python: Value
    sql: Value

    def __str__(self) -> str:
        return (f"{self.world_id} [{self.vintage}] task {self.task_id} ({self.template_id} {dict(self.params)}): "
                f"python gold {self.python!r}, sql gold {self.sql!r}")


@dataclass
class MapFigures:
    tasks: int = 0
    disagreements: int = 0
    moved: int = 0  # tasks whose gold under this map differs from gold at T (the map is not trivial)
    none: int = 0  # tasks without an answer under this map (an entity the served data does not know)


@dataclass
class WorldDifferential:
    world_id: str
    anchor: Day
    tasks: int
    maps: dict[str, MapFigures] = field(default_factory=dict)
    disagreements: list[Disagreement] = field(default_factory=list)
    by_template: Counter[str] = field(default_factory=Counter)  # disagreements per template
    python_seconds: float = 0.0
    sql_seconds: float = 0.0
    sql_queries: int = 0


def compare(world_id: str, python: GoldResolver | Callable[..., Value], sql_gold: SqlGold, tasks: Sequence[Task],
            maps: Mapping[str, VintageMap], anchor: Day) -> WorldDifferential:
    """Every task under every map by both implementations; disagreements by the template's answer type."""
    gold = python.gold if isinstance(python, GoldResolver) else python
    out = WorldDifferential(world_id, anchor, len(tasks))
    queries_before = sql_gold.queries
    uniform = dict.fromkeys(ENTITY_CLASSES, anchor)
    at_t = {task.task_id: gold(task.template, task.params, anchor=anchor, vintage=uniform) for task in tasks}
    for name, vintage in maps.items():
        figures = out.maps.setdefault(name, MapFigures())
        for task in tasks:
            t = task.template
            started = time.perf_counter()
            py = gold(t, task.params, anchor=anchor, vintage=vintage)
            between = time.perf_counter()
            sq = sql_gold.gold(t, task.params, anchor=anchor, vintage=vintage)
            out.python_seconds += between - started
            out.sql_seconds += time.perf_counter() - between
            figures.tasks += 1
            figures.none += py is None
            figures.moved += not t.answer.equal(py, at_t[task.task_id])
            if not t.answer.equal(py, sq):
                figures.disagreements += 1
                out.by_template[t.template_id] += 1
                out.disagreements.append(Disagreement(world_id, name, task.task_id, t.template_id, task.params,
                                                      py, sq))
    out.sql_queries = sql_gold.queries - queries_before
    return out


def sweep_tasks(resolver: GoldResolver, world_id: str, anchor: Day, first_day: Day, per_template: int
                ) -> list[Task]:
    """Beyond a task set: every parameter combination of every template in the world at T (the generator's
    candidates), thinned evenly to at most `per_template` each. A task set never asks a tied "top", caps zero
    answers and rarely picks a contract signed after T'; the sweep asks them all, so the two golds also meet
    on the answers a task set avoids (None for an entity a stale class does not know yet, zero counts)."""
    state = resolver.state(dict.fromkeys(ENTITY_CLASSES, anchor), anchor)
    world = world_pools(state, anchor, first_day)
    out: list[Task] = []
    for t in TEMPLATES:
        combos = candidates(t, world)
        if len(combos) > per_template:  # evenly, first and last included (the latest-created entities last)
            last = len(combos) - 1
            combos = [combos[round(i * last / max(per_template - 1, 1))] for i in range(per_template)]
        out += [Task(f"sweep-{t.template_id}-{i:04d}", world_id, anchor.isoformat(), t.template_id, params,
                     t.render(params)) for i, params in enumerate(combos)]
    return out
