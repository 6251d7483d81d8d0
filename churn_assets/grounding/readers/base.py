"""What every store reader is: a function from (context, request, route) to rows, the table read, the number
of store accesses (queries, API calls with their pages, files), and what it observed in the data: the day the
data is as of and the content hash of what it read, checked against the hash the store recorded when it was
built (a mismatch raises `traces.DataIntegrityError`). The router picks the reader by the route's store,
refuses an observed day other than the planned one, and turns the result into a traced `Read`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from churn_assets.fabric.sources import Sources
from churn_assets.grounding.routes import Route
from churn_assets.grounding.rows import Request, Row
from churn_assets.world.calendar import Day


class ReadContext(Protocol):
    """What a reader may use: the world, the open sources, and a per-router cache of parsed reads."""

    @property
    def world_id(self) -> str: ...

    @property
    def sources(self) -> Sources: ...

    @property
    def cache(self) -> dict[Any, Any]: ...


class Found(NamedTuple):
    rows: list[Row]
    table: str  # qualified: `<schema>.<table>`, `<database>.<collection>`, `GET /v1/...`, a folder
    accesses: int
    observed_day: Day  # the day found in the data read
    observed_hash: str = ""  # content hash of what was read, checked by the reader ("" when nothing to hash)


Reader = Callable[[ReadContext, Request, Route], Found]


def as_day(value: Any) -> Day | None:
    """A store's date value (a date, a datetime, an ISO string or None) as a day."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value)[:10])


def as_day_required(value: Any) -> Day:
    day = as_day(value)
    if day is None:
        raise ValueError("a required date is missing")
    return day
