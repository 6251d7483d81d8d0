"""Question windows ("in the last N days"): they end at the question's anchor T under every vintage.

Shared by gold and by the agents (which may not import gold), so both read a window the same way.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """The `days` days ending at the anchor: first .. last, both included."""

    first: dt.date
    last: dt.date

    @classmethod
    def ending_at(cls, anchor: dt.date, days: int) -> Window:
        return cls(anchor - dt.timedelta(days=int(days) - 1), anchor)

    def __contains__(self, day: object) -> bool:
        return isinstance(day, dt.date) and self.first <= day <= self.last
