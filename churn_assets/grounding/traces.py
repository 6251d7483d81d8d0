"""Retrieval traces: what every read of an arm touched, and the data time of each entity class it read.

docs/rules.md, "Attributed reads": each fact an arm reads is traced with the store/table it came from and that
table's data time (its refresh day for a staged copy, T for a live read, the build day for the RAG
corpus). An answer's served vintage is derived from its traces (`served_vintage`), never from the class
a question was mapped to.

One `TraceEntry` per retrieval (one call of the router, possibly several tables); each table read inside
it is a `Read`. Cost units are a fixed, documented price list (`COST_UNITS`), so that arms can be compared
on work done without depending on the machine: a base cost per store access plus a small cost per row.
Latency is wall-clock and lives beside results, never inside anything hashed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from churn_assets.errors import DataIntegrityError as DataIntegrityError  # re-exported: readers raise it from here
from churn_assets.world.calendar import Day

# Routes (docs/arms.md, "The router"): how the router reached the data of one retrieval.
STAGED_SQL = "staged_sql"  # <world>_staging tables, at the served refresh day
FEDERATED_JOIN = "federated_join"  # rows from more than one store in one retrieval (e.g. staged + live)
LIVE_WAREHOUSE = "live_warehouse"  # dbt as-of views at T
OPERATIONAL = "operational"  # the Mongo partition of day T
SAAS_ORIGIN = "saas_origin"  # the SaaS API at T
DOCUMENTS = "documents"  # contract documents of day T on disk
VECTOR_LOOKUP = "vector_lookup"  # vector_index chunks at the served day (contract terms)
RAG_LOOKUP = "rag_lookup"  # the RAG corpus built at T' (outside the registry)
ROUTES = (STAGED_SQL, FEDERATED_JOIN, LIVE_WAREHOUSE, OPERATIONAL, SAAS_ORIGIN, DOCUMENTS, VECTOR_LOOKUP, RAG_LOOKUP)
# Not a route to data: the hierarchical arm's coordinator leaves one entry per retrieval it splits among its
# workers (which it asked, what it merged). It has no reads, so no data time, no rows and no cost units.
COORDINATOR = "coordinator"

# The stores a read can touch, with their price list: units per access of a store, plus `PER_ROW` per row
# returned. A SaaS call is the dearest (an HTTP round trip to a rate-limited vendor), a live warehouse query
# over SCD2 history costs more than a read of one staged partition, a document read parses a whole file.
# A new data source starts here (docs/architecture.md, "How to add ...": a data source).
COST_UNITS: dict[str, float] = {
    "staging": 1.0,
    "warehouse": 2.0,
    "operational": 1.0,
    "saas": 5.0,
    "documents": 1.0,
    "vector_index": 2.0,
    "rag_index": 3.0,  # an embedding of the query plus a similarity search
}
PER_ROW = 0.001
STORES: tuple[str, ...] = tuple(COST_UNITS)
# Stores that hold churnbench's own copies (staged caches, the index, the RAG corpus); the others are sources
# an entity class can be read from (the registry's `source.store`).
CACHE_STORES: tuple[str, ...] = ("staging", "vector_index", "rag_index")
SOURCE_STORES: tuple[str, ...] = tuple(s for s in STORES if s not in CACHE_STORES)


def cost_of(store: str, accesses: int, rows: int) -> float:
    return round(COST_UNITS[store] * accesses + PER_ROW * rows, 3)


@dataclass(frozen=True)
class Read:
    """One table (or collection, endpoint, document set) read inside a retrieval.

    `data_time` is the day *observed in the data read* (a staged partition's refresh day, an operational
    database's `_meta` day, the SaaS API's `as_of` echo, a document manifest's or chunk's day), and
    `observed_hash` the content hash of what was read, checked against the hash the store recorded when it was
    built (the readers do both). `planned_day` is the day the plan asked for; the router refuses a read whose
    observed day differs from it, so a completed run's data times are observations that agree with the plan.
    """

    store: str
    table: str  # qualified: `<schema>.<table>`, `<database>.<collection>`, `GET /v1/...`, a folder
    entity_class: str | None  # None: a store outside the registry (the RAG corpus)
    data_time: Day  # observed in the data
    rows: int
    accesses: int = 1  # queries, API calls (pages included) or files read
    observed_hash: str = ""  # content hash of what was read ("" where the store holds nothing to hash)
    planned_day: Day | None = None

    @property
    def cost_units(self) -> float:
        return cost_of(self.store, self.accesses, self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "table": self.table, "entity_class": self.entity_class,
                "observed_day": self.data_time.isoformat(), "observed_hash": self.observed_hash,
                "planned_day": None if self.planned_day is None else self.planned_day.isoformat(),
                "rows": self.rows, "accesses": self.accesses}


@dataclass(frozen=True)
class TraceEntry:
    """One retrieval: its route, what it read, the data time per entity class, rows, cost and latency."""

    route: str
    reads: tuple[Read, ...]
    latency_ms: float = 0.0
    note: str = ""  # what was asked, for a reader of the trace ("licenses of prd_0003", ...)

    @property
    def stores(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.store for r in self.reads))

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.table for r in self.reads))

    @property
    def data_times(self) -> dict[str, Day]:
        """Entity class -> data time of what this retrieval read of it. A class read twice at two days
        would be a router bug (it serves exactly one partition per class): refused loudly."""
        out: dict[str, Day] = {}
        for r in self.reads:
            if r.entity_class is None:
                continue
            seen = out.setdefault(r.entity_class, r.data_time)
            if seen != r.data_time:
                raise ValueError(f"class {r.entity_class} read at two data times ({seen}, {r.data_time}) "
                                 "in one retrieval")
        return out

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.reads)

    @property
    def cost_units(self) -> float:
        return round(sum(r.cost_units for r in self.reads), 3)

    def to_json(self, *, with_latency: bool = True) -> dict[str, Any]:
        """Plain values; `with_latency=False` for anything hashed or compared across runs (latency is
        wall-clock: it lives in a sidecar, never in a result's identity)."""
        out = {
            "route": self.route,
            "stores": list(self.stores),
            "tables": list(self.tables),
            "data_times": {c: d.isoformat() for c, d in sorted(self.data_times.items())},
            "rows": self.rows,
            "cost_units": self.cost_units,
            "latency_ms": round(self.latency_ms, 1),
            "note": self.note,
            "reads": [r.to_json() for r in self.reads],
        }
        if not with_latency:
            del out["latency_ms"]
        return out


def route_of(reads: Iterable[Read], routes: Iterable[str]) -> str:
    """The route of a retrieval from the routes of its reads: one route when they share it, else a
    federated join (rows from several stores joined by the router)."""
    kinds = list(dict.fromkeys(routes))
    if not kinds:
        raise ValueError("a retrieval reads at least one table")
    return kinds[0] if len(kinds) == 1 else FEDERATED_JOIN


def served_vintage(traces: Iterable[TraceEntry]) -> dict[str, Day]:
    """Entity class -> the data time served, over every retrieval of an answer (the vintage its served
    gold uses). Refuses traces that read one class at two data times."""
    out: dict[str, Day] = {}
    for entry in traces:
        for cls, day in entry.data_times.items():
            seen = out.setdefault(cls, day)
            if seen != day:
                raise ValueError(f"class {cls} was served at two data times ({seen}, {day})")
    return out


def disagreements(traces: Iterable[TraceEntry], planned: Mapping[str, Day]) -> list[str]:
    """Readable differences between the data times traces show and an arm's planned vintage map
    (empty when they agree): a class read at another day, or a class the plan does not name."""
    problems = []
    for entry in traces:
        for cls, day in entry.data_times.items():
            want = planned.get(cls)
            if want is None:
                problems.append(f"{entry.route}: read class {cls}, which the planned vintage does not name")
            elif want != day:
                problems.append(f"{entry.route} {', '.join(entry.tables)}: class {cls} at {day}, planned {want}")
    return problems


