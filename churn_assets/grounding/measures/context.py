"""What a measure runs in: today, the arm's tools, and the classes its registry entry says it reads.

A measure reads only through `Served.fetch`, which refuses a view of a class the measure did not declare
(`UndeclaredRead`: a bug in the measure, caught by the coverage tests), so the registry's `reads:` is what the
code reads. `implements` binds a function to its registry name; `IMPLEMENTATIONS` is the only table of them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from churn_assets.grounding.rows import Request, StructuredTools
from churn_assets.tasks.answers import Value
from churn_assets.tasks.windows import Window
from churn_assets.world.calendar import Day


class Unknown(Exception):
    """A class the computation cannot do without was not served: the answer is unknown."""


class UndeclaredRead(AssertionError):
    """A measure asked for a class its registry entry does not list under `reads:`."""


class Served:
    """One measure call's view of the data: today (the anchor T) and the arm's tools, limited to `reads`."""

    def __init__(self, today: Day, tools: StructuredTools, reads: frozenset[str], note: str) -> None:
        self.today = today
        self.tools = tools
        self.reads = reads
        self.note = note
        self.rows_read = 0  # rows the router returned to this call, over every fetch

    def fetch(self, *requests: Request) -> list[list[Any] | None]:
        """The rows of each request, None for a class not served. Each list holds the row type of its request's
        kind (`LicenseRow`s for "licenses", ...), which the request value does not carry to the type checker."""
        undeclared = sorted({r.entity_class for r in requests} - self.reads)
        if undeclared:
            raise UndeclaredRead(f"measure {self.note} read {', '.join(undeclared)}, which its registry entry "
                                 "does not list under reads")
        got = self.tools.retrieve(list(requests), note=self.note)
        self.rows_read += sum(len(rows) for rows in got if rows is not None)
        return got

    @staticmethod
    def need(rows: list[Any] | None) -> list[Any]:
        if rows is None:
            raise Unknown
        return rows

    def window(self, days: int) -> Window:
        """The question's window: the last `days` days, ending today whatever day the data was served from."""
        return Window.ending_at(self.today, days)


Measure = Callable[..., Value]
IMPLEMENTATIONS: dict[str, Measure] = {}


def implements(name: str) -> Callable[[Measure], Measure]:
    """Register `fn` as the implementation of the registry's measure `name` (once)."""
    def register(fn: Measure) -> Measure:
        if name in IMPLEMENTATIONS:
            raise AssertionError(f"measure {name} implemented twice")
        IMPLEMENTATIONS[name] = fn
        return fn
    return register


def as_day(value: Any) -> Day:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))
