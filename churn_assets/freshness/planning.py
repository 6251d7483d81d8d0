"""Refresh planning on the simulated clock: refresh days per class and the served-vintage map.

The cache is built on T' (every cached class is as of T'); the planner walks d = T'+1 ... T and decides
which classes refresh on d. A refresh on d happens before answers on d, so the served vintage of a
class is its last refresh day <= T. Live classes are always served as of T. The router takes the
served-vintage map as input; it never plans refreshes.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.freshness.policies import Budget, Off, Policy, RateMatched, Tiered
from churn_assets.grounding.registry import Registry
from churn_assets.world.events import EVENT_KINDS, V1_EVENT_KINDS

Day = dt.date


class PlanningError(UserFacingError, ValueError):
    """A scenario that cannot be planned (T before T', a rate-based policy without rates, ...)."""


def is_stale(day: Day, last_refresh: Day, ttl_days: int) -> bool:
    """The staleness rule (section 10): stale when the cache's age exceeds its TTL (> k, not >= k)."""
    return (day - last_refresh).days > ttl_days


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


def _ttl_schedule(t_prime: Day, t: Day, ttl: int) -> list[Day]:
    days, last = [], t_prime
    d = t_prime + dt.timedelta(days=1)
    while d <= t:
        if is_stale(d, last, ttl):
            days.append(d)
            last = d
        d += dt.timedelta(days=1)
    return days


def _spread(t_prime: Day, t: Day, n: int) -> list[Day]:
    """n refresh days spread evenly over (T', T], the last on T."""
    span = (t - t_prime).days
    n = min(n, span)
    return sorted({t_prime + dt.timedelta(days=math.ceil(i * span / n)) for i in range(1, n + 1)}) if n else []


def effective_ttls(
    registry: Registry, policy: Policy, rates: Mapping[str, float] | None, calendar_days: int
) -> dict[str, int | None]:
    """The TTL each cached class runs under (None when the policy is not TTL-driven)."""
    out: dict[str, int | None] = {}
    for c in registry.staged_classes:
        if isinstance(policy, Tiered):
            ttl = policy.ttl_overrides.get(c.name, c.ttl_days)
            if ttl is None or ttl < 0:
                raise PlanningError(f"policy {policy.policy_id}: TTL of {c.name} must be >= 0")
            out[c.name] = ttl
        elif isinstance(policy, RateMatched):
            lam = (rates or {}).get(c.name, 0.0)
            # A class that never changed: a TTL longer than the calendar (never refreshed).
            out[c.name] = calendar_days + 1 if lam <= 0 else max(0, math.floor(policy.changes_per_ttl / lam))
        else:
            out[c.name] = None
    unknown = set(policy.ttl_overrides) - set(out) if isinstance(policy, Tiered) else set()
    if unknown:
        raise PlanningError(f"policy {policy.policy_id}: no cached class named {', '.join(sorted(unknown))}")
    return out


def _budget_shares(registry: Registry, policy: Budget, rates: Mapping[str, float] | None) -> dict[str, int]:
    names = [c.name for c in registry.staged_classes]
    if policy.refreshes < 0:
        raise PlanningError(f"policy {policy.policy_id}: the budget must be >= 0")
    if policy.allocation == "uniform":
        weights = {n: 1.0 for n in names}
    else:
        if rates is None:
            raise PlanningError(f"policy {policy.policy_id}: proportional allocation needs measured change rates")
        weights = {n: rates.get(n, 0.0) for n in names}
    total = sum(weights.values())
    if total <= 0:
        return {n: 0 for n in names}
    # Largest-remainder rounding keeps the total equal to the budget; ties break by registry order.
    raw = {n: policy.refreshes * w / total for n, w in weights.items()}
    shares = {n: math.floor(v) for n, v in raw.items()}
    left = policy.refreshes - sum(shares.values())
    for n in sorted(names, key=lambda n: (-(raw[n] - shares[n]), names.index(n)))[:left]:
        shares[n] += 1
    return shares


def refresh_days(
    registry: Registry,
    t_prime: Day,
    t: Day,
    policy: Policy,
    *,
    rates: Mapping[str, float] | None = None,
    calendar_days: int = 180,
) -> dict[str, list[Day]]:
    """For every cached class: the days its cache is built or refreshed, T' first, all within [T', T]."""
    if t < t_prime:
        raise PlanningError(f"evaluation day T={t} is before the cache build day T'={t_prime}")
    if isinstance(policy, RateMatched) and rates is None:
        raise PlanningError(f"policy {policy.policy_id}: rate-matched TTLs need measured change rates")
    plan: dict[str, list[Day]] = {}
    if isinstance(policy, Off):
        return {c.name: [t_prime] for c in registry.staged_classes}
    if isinstance(policy, Budget):
        shares = _budget_shares(registry, policy, rates)
        return {c.name: [t_prime, *_spread(t_prime, t, shares[c.name])] for c in registry.staged_classes}
    ttls = effective_ttls(registry, policy, rates, calendar_days)
    for c in registry.staged_classes:
        ttl = ttls[c.name]
        assert ttl is not None
        plan[c.name] = [t_prime, *_ttl_schedule(t_prime, t, ttl)]
    return plan


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
    vintage = {name: days[-1] for name, days in plan.items()}
    vintage.update({c.name: t for c in registry.live_classes})
    return {name: vintage[name] for name in registry.classes}
