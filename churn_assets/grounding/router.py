"""The router: it takes a scenario's served-vintage map and serves exactly those partitions; it never plans
refreshes and never picks "the newest partition that exists".

For each `Request` it asks the rules (`routes.route_for`: which store, relation and day serve the view under
the arm's routing mode), reads through the store's reader (`readers.READERS`, chosen by the route's store),
and traces the retrieval: one `TraceEntry` per call (`traces.py`) with, for every table read, the entity
class and its data time as observed in the data read (with the content hash the reader checked), the day the
plan asked for, rows, store accesses (the cost units follow from them) and latency. A read whose observed day
is not the planned one stops the retrieval with a `DataIntegrityError`: it is never scored.

The router reads Postgres through the read-only arm role (`fabric/roles.py`); besides, every SQL reader
refuses any relation outside the world's `_analytics` as-of views and `_staging` tables before sending a
query (`routes.check_relation`), so `_truth` and `_raw` are refused twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from churn_assets.errors import add_context
from churn_assets.fabric.sources import Sources
from churn_assets.grounding.readers import READERS
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.routes import Route, RouterError, RoutingMode, route_for
from churn_assets.grounding.rows import Request, Row
from churn_assets.grounding.traces import DataIntegrityError, Read, TraceEntry, route_of
from churn_assets.world.calendar import Day


class Router:
    """Serves `Request`s for one scenario (world, T, served-vintage map, mode); every call is traced."""

    def __init__(self, registry: Registry, sources: Sources, *, t: Day, served: Mapping[str, Day],
                 mode: RoutingMode) -> None:
        self.registry = registry
        self.sources = sources
        self.t = t
        self.served = dict(served)
        self.mode = mode
        self.cache: dict[Any, Any] = {}  # readers keep parsed reads here (contracts of a day)

    @property
    def world_id(self) -> str:
        return self.sources.world_id

    def route(self, request: Request) -> Route:
        return route_for(request.view, self.registry, self.mode, self.served, self.t)

    def retrieve(self, requests: Sequence[Request], note: str = "") -> tuple[list[list[Row]], TraceEntry]:
        """Rows for each request and one trace entry for the whole retrieval."""
        started = time.perf_counter()
        out: list[list[Row]] = []
        reads: list[Read] = []
        kinds: list[str] = []
        for request in requests:
            route = self.route(request)
            reader = READERS.get(route.store)
            if reader is None:
                raise RouterError(f"no reader for store {route.store}")
            try:
                found = reader(self, request, route)
            except DataIntegrityError as e:  # name the read: which route, which request
                add_context(e, f"{route.describe()} for {request.describe()}")
                raise
            if found.observed_day != route.day:
                # The data says another day than the plan serves: no verdict may rest on it.
                raise DataIntegrityError(
                    f"{route.kind} read of {found.table} for {request.describe()}: the data read is as of "
                    f"{found.observed_day}, the scenario's plan serves {request.entity_class} as of {route.day}")
            out.append(found.rows)
            reads.append(Read(route.store, found.table, request.entity_class, found.observed_day, len(found.rows),
                              found.accesses, found.observed_hash, route.day))
            kinds.append(route.kind)
        asked = "; ".join(r.describe() for r in requests)
        entry = TraceEntry(route_of(reads, kinds), tuple(reads), (time.perf_counter() - started) * 1000.0,
                           note=f"{note}: {asked}" if note else asked)
        return out, entry
