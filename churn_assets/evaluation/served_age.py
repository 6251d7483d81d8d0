"""Served age at T per cached class, from the days a run's reads observed (the Validity issue's observed days, not
the plan): what the `served_age_within_ttl` checks on `eval_run` report.

A read entry of a trace (`traces[].reads[]`) names the entity class it read and the day found in the data read
(`observed_day`). The served age of a class at T is T minus the oldest day observed for it; the tier was honoured
when that age is at most the class's effective TTL (the staleness rule: served age <= TTL).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from churn_assets.world.calendar import Day


def observed_days(rows: Iterable[Mapping[str, Any]]) -> dict[str, set[Day]]:
    """Entity class -> every day observed by the reads of a run's result rows (`tasks.jsonl`)."""
    seen: dict[str, set[Day]] = defaultdict(set)
    for row in rows:
        for trace in row.get("traces") or []:
            for read in trace.get("reads") or []:
                day, entity_class = read.get("observed_day"), read.get("entity_class")
                if day and entity_class:
                    seen[str(entity_class)].add(dt.date.fromisoformat(str(day)))
    return dict(seen)


@dataclass(frozen=True)
class ServedAge:
    entity_class: str
    ttl_days: int
    days: tuple[Day, ...]  # observed, oldest first (empty: no answer read the class)
    t: Day

    @property
    def max_age(self) -> int | None:
        return (self.t - self.days[0]).days if self.days else None

    @property
    def within_ttl(self) -> bool:
        return self.max_age is None or self.max_age <= self.ttl_days

    def describe(self) -> str:
        if not self.days:
            return f"{self.entity_class}: no answer read it (TTL {self.ttl_days})"
        shown = ", ".join(d.isoformat() for d in self.days)
        verdict = "within" if self.within_ttl else "BEYOND"
        return (f"{self.entity_class}: served age at T={self.t} is {self.max_age} day(s) (observed {shown}), "
                f"{verdict} its TTL of {self.ttl_days}")


def served_age(entity_class: str, ttl_days: int, t: Day, days: Iterable[Day]) -> ServedAge:
    return ServedAge(entity_class, ttl_days, tuple(sorted(set(days))), t)
