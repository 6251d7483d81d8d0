"""Schedules on the simulated clock: the staleness rule and the two ways refresh days are laid out.

- `is_stale(d, last, k)`: the staleness rule of ARCHITECTURE.md section 10: stale when the cache's age
  exceeds its TTL (`d - last > k`, not `>=`); a refresh on d happens before answers on d, so the served age
  is at most k and the refresh period is k + 1 days.
- `ttl_schedule(T', T, k)`: the days in (T', T] on which a cache built on T' is refreshed under TTL k.
- `spread(T', T, n)`: n refresh days spread evenly over (T', T], the last on T (budget policies).
"""

from __future__ import annotations

import datetime as dt
import math

from churn_assets.world.calendar import Day


def is_stale(day: Day, last_refresh: Day, ttl_days: int) -> bool:
    """The staleness rule (section 10): stale when the cache's age exceeds its TTL (> k, not >= k)."""
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


def spread(t_prime: Day, t: Day, n: int) -> list[Day]:
    """n refresh days spread evenly over (T', T], the last on T (at most one a day)."""
    span = (t - t_prime).days
    n = min(n, span)
    return sorted({t_prime + dt.timedelta(days=math.ceil(i * span / n)) for i in range(1, n + 1)}) if n else []
