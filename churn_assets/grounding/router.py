"""The router: rule-based and auditable. It takes a scenario's served-vintage map and serves exactly those
partitions; it never plans refreshes and never picks "the newest partition that exists".

Rules (`route_for`, pure; `docs/arms.md` prints the table):

- **grounding** (`RoutingMode.REGISTRY`): a staged class is read from its staged cache at its served day:
  `<world>_staging.<table> WHERE refresh_day = <served day>` (route `staged_sql`), `contract_terms` from the
  `vector_index` partition of its served day (route `vector_lookup`). A live class is read at T from its
  registry source: `consumption` from the warehouse as-of view (`live_warehouse`), `utilization` and
  `tickets` from the SaaS API (`saas_origin`). A retrieval that reads staged and live classes together is
  a `federated_join`.
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

Every retrieval returns rows (`rows.py`) and one `TraceEntry` (`traces.py`): route, stores, tables, for each
entity class its data time (the served refresh day for staged data, T for a live read), rows, cost units,
latency. The router reads Postgres through the read-only arm role (`fabric/roles.py`); besides, it refuses
any relation outside the world's `_analytics` and `_staging` schemas before sending a query (`check_relation`),
so `_truth` and `_raw` are refused twice.
"""

from __future__ import annotations

import datetime as dt
import enum
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError
from churn_assets.fabric.postgres import ident, schema_name
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.rows import (
    VIEW_CLASS,
    ConsumptionRow,
    ContractRow,
    CostCenterRow,
    HoldingRow,
    LicenseRow,
    MembershipRow,
    PriceRow,
    ProductRow,
    Request,
    Row,
    TermRow,
    TicketRow,
    UsageRow,
    UserRow,
    VendorRow,
    seen_on,
)
from churn_assets.grounding.traces import (
    DOCUMENTS,
    LIVE_WAREHOUSE,
    OPERATIONAL,
    SAAS_ORIGIN,
    STAGED_SQL,
    VECTOR_LOOKUP,
    Read,
    TraceEntry,
    route_of,
)

if TYPE_CHECKING:
    import psycopg

Day = dt.date


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


def route_for(view: str, registry: Registry, mode: RoutingMode, served: Mapping[str, Day], t: Day) -> Route:
    """The route of one view under a mode and a served-vintage map (the auditable rule table)."""
    cls = registry[VIEW_CLASS[view]]
    if mode is RoutingMode.HIERARCHICAL and cls.staged_index:
        return Route(VECTOR_LOOKUP, "vector_index", cls.staged_index, _staged_day(cls.name, served, t), "staging")
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
    day = _staged_day(cls.name, served, t)
    if cls.staged_index:
        return Route(VECTOR_LOOKUP, "vector_index", cls.staged_index, day, "staging")
    if view in STAGED_GAPS:
        return Route(STAGED_SQL, "warehouse", STAGED_GAPS[view], day, "analytics")
    assert cls.staged_table is not None
    return Route(STAGED_SQL, "staging", cls.staged_table, day, "staging")


def _staged_day(name: str, served: Mapping[str, Day], t: Day) -> Day:
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


# ---------------------------------------------------------------------------------------------------
# reading the stores
# ---------------------------------------------------------------------------------------------------


def _d(value: Any) -> Day | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value)[:10])


def _f(value: Any) -> float:
    return float(value)


@dataclass
class Sources:
    """The connections a router reads through (all optional: a mode uses only some)."""

    world_id: str
    pg: psycopg.Connection[Any] | None = None  # the read-only arm role
    mongo: Any = None  # pymongo client
    saas: Any = None  # churn_assets.fabric.saas_client.SaasClient
    documents_root: Path | None = None  # <state>/worlds/<world>/contracts


class Router:
    """Serves `Request`s for one scenario (world, T, served-vintage map, mode); every call is traced."""

    def __init__(self, registry: Registry, sources: Sources, *, t: Day, served: Mapping[str, Day],
                 mode: RoutingMode) -> None:
        self.registry = registry
        self.sources = sources
        self.world_id = sources.world_id
        self.t = t
        self.served = dict(served)
        self.mode = mode
        self._contracts_cache: dict[tuple[str, Day, str | None], list[ContractRow]] = {}

    # -- the public call -----------------------------------------------------------------------------

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
            rows, read = self._read(request, route)
            out.append(rows)
            reads.append(read)
            kinds.append(route.kind)
        entry = TraceEntry(route_of(reads, kinds), tuple(reads), (time.perf_counter() - started) * 1000.0,
                           note=f"{note}: {'; '.join(r.describe() for r in requests)}" if note else
                           "; ".join(r.describe() for r in requests))
        return out, entry

    def _read(self, request: Request, route: Route) -> tuple[list[Row], Read]:
        cls = request.entity_class
        if route.store in ("warehouse", "staging"):
            rows, table, accesses = self._sql(request, route)
        elif route.store == "vector_index":
            rows, table, accesses = self._vector_contracts(request, route)
        elif route.store == "operational":
            rows, table, accesses = self._mongo(request, route)
        elif route.store == "saas":
            rows, table, accesses = self._saas(request, route)
        elif route.store == "documents":
            rows, table, accesses = self._documents(request, route)
        else:
            raise RouterError(f"no reader for store {route.store}")
        return rows, Read(route.store, table, cls, route.day, len(rows), accesses)

    # -- Postgres (staged tables and as-of views) ----------------------------------------------------

    def _pg(self) -> psycopg.Connection[Any]:
        if self.sources.pg is None:
            raise RouterError("this router has no warehouse connection")
        return self.sources.pg

    def select(self, layer: str, relation: str, columns: Sequence[str], day: Day, *,
               where: Sequence[tuple[str, Any]] = (), extra: str = "", params: Sequence[Any] = ()
               ) -> list[tuple[Any, ...]]:
        """Rows of one relation as of `day`: `refresh_day = day` for a staged table, `as_of_day = day` for an
        as-of view. `where` adds `column = value` filters; `extra` a fixed SQL condition with `params`."""
        from psycopg import sql

        schema = schema_name(self.world_id, layer)
        check_relation(self.world_id, schema, relation)
        day_column = "refresh_day" if layer == "staging" else "as_of_day"
        conditions = [sql.SQL("{} = %s").format(ident(day_column))]
        values: list[Any] = [day]
        for column, value in where:
            conditions.append(sql.SQL("{} = %s").format(ident(column)))
            values.append(value)
        if extra:
            conditions.append(sql.SQL(extra))  # a constant of this module, never user text
            values.extend(params)
        query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
            sql.SQL(", ").join(ident(c) for c in columns), ident(schema, relation), sql.SQL(" AND ").join(conditions))
        try:
            return self._pg().execute(query, values).fetchall()
        except Exception as e:
            if type(e).__name__ == "InsufficientPrivilege":
                raise RouteRefused(f"refused by the database: {schema}.{relation} ({e})") from None
            raise RouterError(f"reading {schema}.{relation} as of {day}: {type(e).__name__}: {e}") from None

    def require_partition(self, table: str, day: Day) -> None:
        """A staged read of a day nobody materialized is an error, not an empty answer."""
        from psycopg import sql

        schema = schema_name(self.world_id, "staging")
        try:
            row = self._pg().execute(sql.SQL("SELECT 1 FROM {} WHERE staged_table = %s AND refresh_day = %s").format(
                ident(schema, "staged_partitions")), (table, day)).fetchone()
        except Exception as e:
            raise RouterError(f"cannot check staged partition {schema}.{table} @ {day}: "
                              f"{type(e).__name__}: {e}") from None
        if row is None:
            raise RouterError(f"staged partition {schema}.{table} @ {day} was never materialized (the scenario "
                              "materializer builds it)")

    def _sql(self, request: Request, route: Route) -> tuple[list[Row], str, int]:
        assert route.layer is not None
        view, day = request.view, route.day
        staged = route.layer == "staging"
        if staged:
            self.require_partition(route.relation, day)
        table = f"{schema_name(self.world_id, route.layer)}.{route.relation}"
        reader = _SQL_READERS[(view, staged)]
        rows = reader(self, request, route)
        # Nothing after the data day can be in a row, whatever the store holds (defence in depth).
        return rows, table, 1

    # -- Mongo -----------------------------------------------------------------------------------------

    def _mongo(self, request: Request, route: Route) -> tuple[list[Row], str, int]:
        from churn_assets.fabric.mongo import require_complete

        if self.sources.mongo is None:
            raise RouterError("this router has no operational store connection")
        db = require_complete(self.sources.mongo, self.world_id, route.day)
        day = route.day
        if request.view == "users":
            docs = db["users"].find({}, {"user_id": 1, "hired_on": 1, "offboarded_on": 1})
            rows: list[Row] = [UserRow(d["user_id"], _d(d["hired_on"]), seen_on(_d(d.get("offboarded_on")), day))
                               for d in docs]
        elif request.view == "licenses":
            query: dict[str, Any] = {}
            if request.product is not None:
                query["product_id"] = request.product
            if request.contract is not None:
                query["contract_id"] = request.contract
            docs = db["licenses"].find(query, {"license_id": 1, "product_id": 1, "purchased_on": 1,
                                               "contract_id": 1, "unit_price_usd": 1})
            rows = [LicenseRow(d["license_id"], d["product_id"], _d(d["purchased_on"]), d.get("contract_id"),
                               _f(d["unit_price_usd"])) for d in docs]
        else:
            raise RouterError(f"the operational store has no view {request.view}")
        return rows, f"{db.name}.{route.relation}", 1

    # -- SaaS ------------------------------------------------------------------------------------------

    def _saas(self, request: Request, route: Route) -> tuple[list[Row], str, int]:
        from churn_assets.fabric.saas_client import SaasNotFound

        client = self.sources.saas
        if client is None:
            raise RouterError("this router has no SaaS client")
        as_of = route.day.isoformat()
        before = client.stats
        rows: list[Row] = []
        if request.view == "usage":
            assert request.window_days is not None
            products = request.products if request.products is not None else (
                (request.product,) if request.product is not None else ())
            for product in products:
                try:
                    body = client.utilization(self.world_id, product, as_of=as_of, window_days=request.window_days)
                except SaasNotFound:
                    continue  # a product the vendor does not know today has no usage
                rows.extend(UsageRow(lic["license_id"], product, request.window_days, int(lic["active_days"]),
                                     int(lic["api_calls"])) for lic in body["licenses"])
            endpoint = f"GET /v1/tenants/{self.world_id}/products/{{product}}/utilization"
        elif request.view == "tickets":
            for t in client.tickets(self.world_id, as_of=as_of, product=request.product):
                rows.append(TicketRow(t["ticket_id"], t["user_id"], t["product_id"], t["priority"],
                                      _d(t["opened_on"]), t["status"]))  # type: ignore[arg-type]
            endpoint = f"GET /v1/tenants/{self.world_id}/tickets"
        else:
            raise RouterError(f"the SaaS API has no view {request.view}")
        calls = (client.stats - before).calls
        return rows, endpoint, max(1, calls)

    # -- documents and the vector index (contract terms) --------------------------------------------------

    def _documents(self, request: Request, route: Route) -> tuple[list[Row], str, int]:
        from contracts.parse import parse_contract_markdown
        from contracts.store import DocumentStoreError, day_dir, read_day

        root = self.sources.documents_root
        if root is None:
            raise RouterError("this router has no documents folder")
        folder = day_dir(root, route.day)
        try:
            stored = read_day(folder)
        except DocumentStoreError as e:
            raise RouterError(f"{e} (materialize contract_documents for {route.day})") from None
        ids = [request.contract] if request.contract is not None else stored.contract_ids
        rows: list[Row] = []
        for cid in ids:
            if cid not in stored.contract_ids:
                continue
            facts = parse_contract_markdown(stored.markdown(cid))
            rows.append(ContractRow(facts.contract_id, facts.vendor_id, facts.renewal_notice_days,
                                    tuple(TermRow(t.recorded_on, t.effective_on, t.expires_on, t.annual_value_usd,
                                                  t.committed_seats) for t in facts.terms)))
        return rows, str(folder), len(ids)

    def _vector_contracts(self, request: Request, route: Route) -> tuple[list[Row], str, int]:
        """Contract terms from the `vector_index` partition of the served day: the chunks of each contract's
        summary and term history (Schedule B), looked up by contract id (a metadata filter on the index; the
        similarity search serves the RAG arms), then read back as tables."""
        from psycopg import sql

        key = (self.world_id, route.day, request.contract)
        schema = schema_name(self.world_id, "staging")
        table = f"{schema}.vector_index_chunks"
        if key in self._contracts_cache:
            rows = self._contracts_cache[key]
            return list(rows), table, 1
        conn = self._pg()
        for relation in ("vector_index_chunks", "embeddings", "vector_index_builds"):
            check_relation(self.world_id, schema, relation)
        build = conn.execute(sql.SQL("SELECT model FROM {} WHERE day = %s").format(
            ident(schema, "vector_index_builds")), (route.day,)).fetchone()
        if build is None:
            raise RouterError(f"vector_index of world {self.world_id} has no build for {route.day} (the scenario "
                              "materializer builds the served day)")
        found = conn.execute(sql.SQL(
            "SELECT m.contract_id, m.chunk_no, m.section, e.content FROM {} m JOIN {} e "
            "ON e.content_hash = m.content_hash AND e.model = %s "
            "WHERE m.day = %s AND m.section = ANY(%s) AND (%s::text IS NULL OR m.contract_id = %s) "
            "ORDER BY m.contract_id, m.chunk_no").format(ident(schema, "vector_index_chunks"),
                                                         ident(schema, "embeddings")),
            (build[0], route.day, list(CONTRACT_SECTIONS), request.contract, request.contract)).fetchall()
        by_contract: dict[str, list[tuple[str, str]]] = {}
        for cid, _no, section, content in found:
            by_contract.setdefault(cid, []).append((section, content))
        rows = [contract_from_chunks(cid, chunks) for cid, chunks in sorted(by_contract.items())]
        self._contracts_cache[key] = rows
        return list(rows), table, 1


# ---------------------------------------------------------------------------------------------------
# contract chunks -> rows
# ---------------------------------------------------------------------------------------------------

SUMMARY_SECTION = "Contract summary"
HISTORY_SECTION = "Schedule B: Term history"
CONTRACT_SECTIONS = (SUMMARY_SECTION, HISTORY_SECTION)


def contract_from_chunks(contract_id: str, chunks: Sequence[tuple[str, str]]) -> ContractRow:
    """A contract's row from its summary and term-history chunks (sections as `chunks.py` names them; a
    long section comes as several pieces, each repeating the table header)."""
    from contracts.parse import NOT_STATED, parse_summary, split_row

    summary: dict[str, str] = {}
    terms: dict[int, TermRow] = {}
    for section, text in chunks:
        if section == SUMMARY_SECTION:
            summary.update(parse_summary(text))
            continue
        for line in text.splitlines():
            if not line.strip().startswith("|"):
                continue
            cells = split_row(line)
            if len(cells) != 8 or not cells[0].isdigit():
                continue  # the header and separator rows
            terms[int(cells[0])] = TermRow(
                recorded_on=dt.date.fromisoformat(cells[2]), effective_on=dt.date.fromisoformat(cells[3]),
                expires_on=dt.date.fromisoformat(cells[4]),
                annual_value_usd=None if cells[6] == NOT_STATED else float(cells[6].replace(",", "")),
                committed_seats=None if cells[7] == NOT_STATED else int(cells[7]))
    notice = summary.get("Renewal notice", NOT_STATED)
    vendor = summary.get("Vendor ID", NOT_STATED)
    return ContractRow(contract_id, None if vendor == NOT_STATED else vendor,
                       None if notice == NOT_STATED else int(notice.removesuffix(" days")),
                       tuple(terms[n] for n in sorted(terms)))


# ---------------------------------------------------------------------------------------------------
# SQL readers: (view, staged?) -> rows
# ---------------------------------------------------------------------------------------------------

SqlReader = Callable[[Router, Request, Route], list[Row]]


def _users_staged(r: Router, q: Request, route: Route) -> list[Row]:
    # dim_user has one row per version; hire and offboard days are the user's (the cost center on it is
    # another class's fact and is not read here).
    rows = r.select("staging", route.relation, ("user_id", "hired_on", "offboarded_on"), route.day)
    out: dict[str, UserRow] = {}
    for uid, hired, off in rows:
        out[uid] = UserRow(uid, _d(hired), seen_on(_d(off), route.day))  # type: ignore[arg-type]
    return list(out.values())


def _memberships(r: Router, q: Request, route: Route) -> list[Row]:
    layer = "staging" if route.layer == "staging" else "analytics"
    rows = r.select(layer, route.relation, ("user_id", "cost_center_id", "valid_from", "valid_to"), route.day)
    return [MembershipRow(u, cc, _d(a), seen_on(_d(b), route.day)) for u, cc, a, b in rows]  # type: ignore[arg-type]


def _cost_centers_staged(r: Router, q: Request, route: Route) -> list[Row]:
    rows = r.select("staging", route.relation, ("cost_center_id", "business_unit"), route.day)
    return [CostCenterRow(cc, bu) for cc, bu in sorted(set(rows))]


def _cost_centers_live(r: Router, q: Request, route: Route) -> list[Row]:
    rows = r.select("analytics", route.relation, ("cost_center_id", "business_unit"), route.day)
    return [CostCenterRow(cc, bu) for cc, bu in rows]


def _holdings(r: Router, q: Request, route: Route) -> list[Row]:
    layer = "staging" if route.layer == "staging" else "analytics"
    where = [("product_id", q.product)] if q.product is not None else []
    rows = r.select(layer, route.relation, ("license_id", "product_id", "user_id", "valid_from", "valid_to",
                                            "ended_by"), route.day, where=where)
    out: list[Row] = []
    for lid, pid, uid, a, b, ended in rows:
        end = seen_on(_d(b), route.day)
        out.append(HoldingRow(lid, pid, uid, _d(a), end, ended if end is not None else None))  # type: ignore[arg-type]
    return out


def _licenses_as_of(r: Router, q: Request, route: Route) -> list[Row]:
    where = [(c, v) for c, v in (("product_id", q.product), ("contract_id", q.contract)) if v is not None]
    rows = r.select("analytics", route.relation, ("license_id", "product_id", "purchased_on", "contract_id",
                                                  "unit_price_usd"), route.day, where=where)
    return [LicenseRow(lid, pid, _d(p), cid, _f(price)) for lid, pid, p, cid, price in rows]  # type: ignore[arg-type]


def _products_as_of(r: Router, q: Request, route: Route) -> list[Row]:
    rows = r.select("analytics", route.relation, ("product_id", "vendor_id", "listed_on"), route.day)
    return [ProductRow(pid, vid, _d(listed)) for pid, vid, listed in rows]  # type: ignore[arg-type]


def _prices(r: Router, q: Request, route: Route) -> list[Row]:
    layer = "staging" if route.layer == "staging" else "analytics"
    where = [("product_id", q.product)] if q.product is not None else []
    rows = r.select(layer, route.relation, ("product_id", "list_price_usd", "valid_from", "valid_to"), route.day,
                    where=where)
    return [PriceRow(pid, _f(p), _d(a), seen_on(_d(b), route.day)) for pid, p, a, b in rows]  # type: ignore[arg-type]


def _vendors(r: Router, q: Request, route: Route) -> list[Row]:
    layer = "staging" if route.layer == "staging" else "analytics"
    where = [("vendor_id", q.vendor)] if q.vendor is not None else []
    rows = r.select(layer, route.relation, ("vendor_id", "vendor_name", "vendor_tier", "valid_from", "valid_to"),
                    route.day, where=where)
    return [VendorRow(v, n, t, _d(a), seen_on(_d(b), route.day)) for v, n, t, a, b in rows]  # type: ignore[arg-type]


def _consumption(r: Router, q: Request, route: Route) -> list[Row]:
    where = [("product_id", q.product)] if q.product is not None else []
    rows = r.select("analytics", route.relation, ("consumed_on", "user_id", "product_id", "license_id",
                                                  "session_minutes", "api_calls"), route.day, where=where,
                    extra="consumed_on BETWEEN %s AND %s", params=(q.first, q.last))
    return [ConsumptionRow(_d(d), u, p, lic, int(m), int(a)) for d, u, p, lic, m, a in rows]  # type: ignore[arg-type]


_SQL_READERS: dict[tuple[str, bool], SqlReader] = {
    ("users", True): _users_staged,
    ("memberships", True): _memberships,
    ("memberships", False): _memberships,
    ("cost_centers", True): _cost_centers_staged,
    ("cost_centers", False): _cost_centers_live,
    ("holdings", True): _holdings,
    ("holdings", False): _holdings,
    ("licenses", False): _licenses_as_of,
    ("products", False): _products_as_of,
    ("prices", True): _prices,
    ("prices", False): _prices,
    ("vendors", True): _vendors,
    ("vendors", False): _vendors,
    ("consumption", False): _consumption,
}
