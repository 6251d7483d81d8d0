"""The router's rules: which store, relation and day serve each view, per routing mode (pure, auditable).

`route_for` is the rule table (`docs/arms.md` prints it):

- **grounding** (`RoutingMode.REGISTRY`): a staged class is read from its staged cache at its served day:
  `<world>_staging.<table> WHERE refresh_day = <served day>` (route `staged_sql`), `contract_terms` from the
  `vector_index` partition of its served day (route `vector_lookup`). A live class is read at T from its
  registry source (`source.store`): `consumption` from the warehouse as-of view (`live_warehouse`),
  `utilization` and `tickets` from the SaaS API (`saas_origin`). A retrieval that reads staged and live
  classes together is a `federated_join`.
- **naive** (`RoutingMode.LIVE`): every class from a live source as of T, never staging: current users and
  licenses from the Mongo partition of day T (`operational`), history from the dbt as-of views at T
  (`live_warehouse`), contracts from the documents of day T (`documents`), utilization and tickets from the
  SaaS API (`saas_origin`).
- **hierarchical** (`RoutingMode.HIERARCHICAL`): the `LIVE` rules, except that a class cached as an index
  (`contract_terms`) is read from the `vector_index` partition of its served day (`vector_lookup`; the
  hierarchical arm serves it at T'). Which worker asks for which class is the arm's table
  (`arms/hierarchical.py::WORKERS`), not the router's.

Two facts a staged table does not carry are read from the warehouse's as-of view *at the class's served
day* (so their data time is the class's served day, like the rest of the class): license purchases
(`assignments`; `staged.assignments` copies `fct_license_assignment`, which holds holder intervals only)
and the product catalogue (`prices`; `staged.prices` copies `fct_price`, which has no vendor or listing).
See `STAGED_GAPS`.

`check_relation` refuses any relation outside the world's `_analytics` as-of views and `_staging` tables
before a query is sent (the read-only arm role refuses them too).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from churn_assets.errors import UserFacingError
from churn_assets.fabric.postgres import schema_name
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.rows import VIEW_CLASS
from churn_assets.grounding.traces import (
    DOCUMENTS,
    LIVE_WAREHOUSE,
    OPERATIONAL,
    SAAS_ORIGIN,
    STAGED_SQL,
    VECTOR_LOOKUP,
)
from churn_assets.world.calendar import Day


class RouterError(UserFacingError):
    """A retrieval the router cannot serve (a missing partition, a store that does not answer)."""


class RouteRefused(RouterError):
    """A relation outside what arms may read (`_truth`, `_raw`, the SCD2 marts, another world)."""


class RoutingMode(enum.Enum):
    REGISTRY = "registry"  # grounding and its ablations: staged caches at the served vintage, live at T
    LIVE = "live"  # naive: every class live at T
    HIERARCHICAL = "hierarchical"  # hierarchical: LIVE, but a class cached as an index read from its index


# ---------------------------------------------------------------------------------------------------
# the rules (pure)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """Where one view is read: route kind, store, relation (a table, collection, endpoint or folder), the
    day the read is as of (its data time) and the SQL layer when the store is Postgres."""

    kind: str
    store: str
    relation: str
    day: Day
    layer: str | None = None  # "analytics" or "staging" for Postgres reads

    def describe(self) -> str:
        return f"{self.kind}: {self.store} {self.relation} @ {self.day.isoformat()}"


# Live (naive) sources per view. Current state where the operational store has it, history from the
# dbt as-of views (Mongo holds only the state of its day).
LIVE_SOURCES: dict[str, tuple[str, str, str]] = {  # view -> (route kind, store, relation)
    "users": (OPERATIONAL, "operational", "users"),
    "memberships": (LIVE_WAREHOUSE, "warehouse", "cost_center_membership_history_as_of"),
    "cost_centers": (LIVE_WAREHOUSE, "warehouse", "cost_centers_as_of"),
    "licenses": (OPERATIONAL, "operational", "licenses"),
    "holdings": (LIVE_WAREHOUSE, "warehouse", "assignments_history_as_of"),
    "products": (LIVE_WAREHOUSE, "warehouse", "products_as_of"),
    "prices": (LIVE_WAREHOUSE, "warehouse", "prices_history_as_of"),
    "vendors": (LIVE_WAREHOUSE, "warehouse", "vendors_history_as_of"),
    "contracts": (DOCUMENTS, "documents", "contracts"),
    "consumption": (LIVE_WAREHOUSE, "warehouse", "consumption_as_of"),
    "usage": (SAAS_ORIGIN, "saas", "/products/{product}/utilization"),
    "tickets": (SAAS_ORIGIN, "saas", "/tickets"),
}

# Views whose facts the staged table of their class does not hold: read from the warehouse as-of view at
# the class's served day (same data time as the staged partition). A gap of the staging contract
# (`grounding/staging.py` copies one mart per class); see docs/arms.md.
STAGED_GAPS: dict[str, str] = {
    "licenses": "licenses_as_of",
    "products": "products_as_of",
}

# The as-of view serving a live class of the registry (its `source.relation` is a mart; arms read the view).
LIVE_VIEW_OF_MART: dict[str, str] = {"fct_consumption": "consumption_as_of"}



def warehouse_views(registry: Registry) -> frozenset[str]:
    """Every as-of view a route can read (any mode, any served day): what an evaluation checks against the dbt
    build's recorded content hashes before it answers and after (`fabric/warehouse_content.py`)."""
    live = {LIVE_VIEW_OF_MART.get(c.source.relation, c.source.relation) for c in registry.classes.values()
            if c.is_live and c.source.store == "warehouse"}
    return frozenset({relation for _, store, relation in LIVE_SOURCES.values() if store == "warehouse"}
                     | set(STAGED_GAPS.values()) | live)


def route_for(view: str, registry: Registry, mode: RoutingMode, served: Mapping[str, Day], t: Day) -> Route:
    """The route of one view under a mode and a served-vintage map (the auditable rule table)."""
    cls = registry[VIEW_CLASS[view]]
    if mode is RoutingMode.HIERARCHICAL and cls.staged_index:
        return Route(VECTOR_LOOKUP, "vector_index", cls.staged_index, staged_day(cls.name, served, t), "staging")
    if mode in (RoutingMode.LIVE, RoutingMode.HIERARCHICAL):
        kind, store, relation = LIVE_SOURCES[view]
        return Route(kind, store, relation, t, "analytics" if store == "warehouse" else None)
    if cls.is_live:
        day = served.get(cls.name, t)
        if day != t:
            raise RouterError(f"live class {cls.name} is served at {day}, not at T={t}: a live class is read at T")
        src = cls.source
        if src.store == "warehouse":
            return Route(LIVE_WAREHOUSE, "warehouse", LIVE_VIEW_OF_MART.get(src.relation, src.relation), t, "analytics")
        if src.store == "saas":
            relation = LIVE_SOURCES[view][2] if view in ("usage", "tickets") else src.relation
            return Route(SAAS_ORIGIN, "saas", relation, t)
        raise RouterError(f"live class {cls.name}: no live route for source store {src.store}")
    day = staged_day(cls.name, served, t)
    if cls.staged_index:
        return Route(VECTOR_LOOKUP, "vector_index", cls.staged_index, day, "staging")
    if view in STAGED_GAPS:
        return Route(STAGED_SQL, "warehouse", STAGED_GAPS[view], day, "analytics")
    assert cls.staged_table is not None
    return Route(STAGED_SQL, "staging", cls.staged_table, day, "staging")


def staged_day(name: str, served: Mapping[str, Day], t: Day) -> Day:
    """The served day of a staged class: in the map, and not after T."""
    if name not in served:
        raise RouterError(f"the served-vintage map has no day for staged class {name}")
    day = served[name]
    if day > t:
        raise RouterError(f"class {name} served at {day}, after T={t}: no route reads the future")
    return day


def check_relation(world_id: str, schema: str, relation: str) -> None:
    """Refuse any relation but the world's `_staging` tables and `_analytics` as-of views (and `dim_date`):
    never `_truth`, `_raw`, the SCD2 marts (their rows run past any as-of day) or another world."""
    allowed = {schema_name(world_id, "analytics"), schema_name(world_id, "staging")}
    if schema not in allowed:
        raise RouteRefused(f"refused: {schema}.{relation} is outside what arms may read ({', '.join(sorted(allowed))})")
    if schema == schema_name(world_id, "analytics") and not (relation.endswith("_as_of") or relation == "dim_date"):
        raise RouteRefused(f"refused: {schema}.{relation} is not an as-of view (arms read marts only as of a day)")
