"""Schedules on the simulated clock: the staleness rule and the two ways refresh days are laid out.

- `is_stale(d, last, k)`: docs/rules.md, "Staleness rule": stale when the cache's age
  exceeds its TTL (`d - last > k`, not `>=`); a refresh on d happens before answers on d, so the served age
  is at most k and the refresh period is k + 1 days.
- `ttl_schedule(T', T, k)`: the days in (T', T] on which a cache built on T' is refreshed under TTL k.
- `periodic(T', T, period)`: the days in (T', T] of refreshes every `period` days (a real number) from T'
  (budget policies: a refresh due between two days is made on the later one).

Every schedule here is a function of T' and the period (or TTL) alone: T only cuts it off, so the refresh days
up to any day D are the same whatever later T the plan runs to (a schedule is fixed when the cache is built; it
cannot know when a question will be asked).
"""

from __future__ import annotations

import datetime as dt
import math

from churn_assets.world.calendar import Day


def is_stale(day: Day, last_refresh: Day, ttl_days: int) -> bool:
    """docs/rules.md, "Staleness rule": stale when the cache's age exceeds its TTL (> k, not >= k)."""
    return (day - last_refresh).days > ttl_days


def ttl_schedule(t_prime: Day, t: Day, ttl: int) -> list[Day]:
    """Refresh days in (T', T] of a cache built on T' under TTL `ttl` (refreshed on each day it is stale)."""
    days, last = [], t_prime
    d = t_prime + dt.timedelta(days=1)
    while d <= t:
        if is_stale(d, last, ttl):
            days.append(d)
            last = d
        d += dt.timedelta(days=1)
    return days


def periodic(t_prime: Day, t: Day, period: float | None) -> list[Day]:
    """Refresh days in (T', T] of a cache built on T' and refreshed every `period` days (None: never): the j-th
    refresh is due at j * period days after T' and is made on the first day not before it (at most one a day).
    A tolerance of 1e-9 day keeps a period computed in floating point (30 / (8 / 6)) on the day it means."""
    if period is None:
        return []
    if period <= 0:
        raise ValueError(f"a refresh period must be > 0 days (got {period})")
    span = (t - t_prime).days
    days: set[Day] = set()
    j = 1
    while (offset := max(1, math.ceil(j * period - 1e-9))) <= span:
        days.add(t_prime + dt.timedelta(days=offset))
        j += 1
    return sorted(days)
