"""Refresh planning on the simulated clock: refresh days per class and the served-vintage map.

The cache is built on T' (every cached class is as of T'); the planner walks d = T'+1 ... T and decides
which classes refresh on d. A refresh on d happens before answers on d, so the served vintage of a
class is its last refresh day <= T. Live classes are always served as of T. The router takes the
served-vintage map as input; it never plans refreshes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from churn_assets.freshness.policies import Policy
from churn_assets.grounding.registry import Registry
from churn_assets.world.calendar import Day
from churn_assets.world.events import EVENT_KINDS, V1_EVENT_KINDS


def measured_change_rates(
    records: Iterable[Mapping[str, Any]], start: Day, t_prime: Day, classes: Iterable[str]
) -> dict[str, float]:
    """Events per day that change each class, measured on (start, T'] only (never peeking past T').

    Day 0 (`start`) builds the world (every vendor, product, user and license is created then); it is
    not drift, and counting it would inflate every class's rate several-fold.
    """
    counts: Counter[str] = Counter()
    first, last = start.isoformat(), t_prime.isoformat()
    for r in records:
        if r["at"] > last:
            break
        if r["at"] == first:
            continue
        kind = EVENT_KINDS.get(r["kind"]) or V1_EVENT_KINDS.get(r["kind"])
        if kind is not None:
            counts.update(kind.classes)
    days = max(1, (t_prime - start).days)
    return {c: counts.get(c, 0) / days for c in classes}


def refresh_days(
    registry: Registry,
    t_prime: Day,
    t: Day,
    policy: Policy,
    *,
    rates: Mapping[str, float] | None = None,
    calendar_days: int = 180,
) -> dict[str, list[Day]]:
    """For every cached class: the days its cache is built or refreshed, T' first, all within [T', T].
    T' <= T is the scenario's to guarantee (`freshness.scenario.check_days`)."""
    return policy.refresh_days(registry, t_prime, t, rates, calendar_days)


def served_vintage(
    registry: Registry,
    t_prime: Day,
    t: Day,
    policy: Policy,
    *,
    rates: Mapping[str, float] | None = None,
    calendar_days: int = 180,
) -> dict[str, Day]:
    """The data day served at T for every class: last refresh <= T for cached classes, T for live ones."""
    plan = refresh_days(registry, t_prime, t, policy, rates=rates, calendar_days=calendar_days)
    return vintage_of(registry, plan, t)


def vintage_of(registry: Registry, plan: Mapping[str, list[Day]], t: Day) -> dict[str, Day]:
    """The served-vintage map of a refresh plan: each cached class at its last refresh, live classes at T."""
    vintage = {name: days[-1] for name, days in plan.items()}
    vintage.update({c.name: t for c in registry.live_classes})
    return {name: vintage[name] for name in registry.classes}

