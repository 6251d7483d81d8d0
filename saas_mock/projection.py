"""The SaaS API's own in-memory projection of each tenant, read from the tenant's truth schema.

The SaaS vendor's database is the world's truth schema `<world>_truth` in Postgres (docs/rules.md,
"Arm isolation": the SaaS mock is one of its readers). For a request about world `w` as of day `d` the API
serves `fold_ledger(events of w, d)`, turned into the views its endpoints answer from (`TenantView`).

Caching (per process): a tenant's events are read once per ledger head; a view is built once per
(world, head, day) and kept in an LRU of `max_views`. The head (one small query) is re-read at most every
`revalidate_s` seconds, so a world that was removed or re-loaded is noticed without a query per request.

Utilization (the `/products/{product}/utilization` endpoint) over a trailing window of `window_days` days
ending on the as-of day, both ends inclusive:
- `seats`: the product's licenses that exist on the day; `assigned_seats`: those held by an active user
  (`fold.assigned_licenses`); `unassigned_seats`: those with no holder;
- `active_seats`: assigned seats with consumption on the license inside the window; `idle_seats` the rest;
  `utilization_rate` = active / assigned seats (0.0 without assigned seats), rounded to 4 places;
- `active_users`, `sessions`, `session_minutes`, `api_calls`: over all consumption of the product inside
  the window (any license).
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from churn_assets.errors import UserFacingError
from churn_assets.world import gc_pause
from churn_assets.world.fold import assigned_licenses, fold_ledger, tickets_as_of
from churn_assets.world.state import ConsumptionRecord, WorldState

TICKET_STATUSES = ("open", "in_progress", "resolved")


class TenantNotFound(UserFacingError):
    """No truth schema (or an empty one) for this world: the vendor has no such tenant."""


class SourceUnavailable(UserFacingError):
    """The vendor's database does not answer."""


@dataclass(frozen=True)
class TenantHead:
    """What identifies a tenant's content, and its calendar (both ends inclusive)."""

    world_id: str
    format_version: int
    event_count: int
    head_hash: str
    first_day: dt.date
    last_day: dt.date

    @property
    def version(self) -> tuple[int, str]:
        return (self.event_count, self.head_hash)


class TruthSource(Protocol):
    """Where tenants' ledgers come from (the real one is `PostgresTruthSource`)."""

    def head(self, world_id: str) -> TenantHead | None: ...

    def records(self, world_id: str) -> list[dict[str, Any]]: ...


# ---------------------------------------------------------------------------------------------------
# The truth schema in Postgres
# ---------------------------------------------------------------------------------------------------


def truth_schema(world_id: str) -> str:
    """`default-s42-3f9a1c` -> `default_s42_3f9a1c_truth` (docs/rules.md, "Per-world namespaces")."""
    return world_id.replace("-", "_") + "_truth"


def _calendar(config: Mapping[str, Any] | None, first: str | None, last: str | None) -> tuple[dt.date, dt.date]:
    calendar = (config or {}).get("calendar") if isinstance(config, Mapping) else None
    if isinstance(calendar, Mapping) and "start" in calendar and "days" in calendar:
        start = dt.date.fromisoformat(str(calendar["start"]))
        return start, start + dt.timedelta(days=int(calendar["days"]) - 1)
    if first is None or last is None:
        raise TenantNotFound("the tenant's ledger is empty")
    return dt.date.fromisoformat(first), dt.date.fromisoformat(last)


class PostgresTruthSource:
    """Reads `<world>_truth.ledger` (the manifest row) and `<world>_truth.events` (one row per event).

    One connection, used under a lock and re-opened after a failure: reads are rare (a head every few
    seconds per tenant, the events once per ledger head).
    """

    def __init__(self, url: str | Callable[[], str], connect_timeout_s: int = 5) -> None:
        # A callable is asked again on every reconnect: an embedded Postgres may come back elsewhere.
        self._url = url
        self.connect_timeout_s = connect_timeout_s
        self._conn: Any = None
        self._lock = threading.Lock()

    def _run(self, fn: Callable[[Any], Any]) -> Any:
        import psycopg

        with self._lock:
            for attempt in range(2):
                try:
                    if self._conn is None or self._conn.closed:
                        url = self._url() if callable(self._url) else self._url
                        self._conn = psycopg.connect(url, autocommit=True,
                                                     connect_timeout=self.connect_timeout_s)
                    return fn(self._conn)
                except (psycopg.OperationalError, psycopg.InterfaceError, UserFacingError) as e:
                    # A restarted server drops our connection: reconnect once before giving up.
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = None
                    if attempt == 1:
                        raise SourceUnavailable(f"the SaaS vendor database does not answer: {e}") from None
        raise AssertionError("unreachable")

    def head(self, world_id: str) -> TenantHead | None:
        from psycopg import sql

        schema = truth_schema(world_id)

        def query(conn: Any) -> TenantHead | None:
            # to_regclass parses a qualified name: psycopg quotes it, and it is sent as a value.
            ledger = sql.Identifier(schema, "ledger")
            exists = conn.execute("SELECT to_regclass(%s)", (ledger.as_string(conn),)).fetchone()
            if exists is None or exists[0] is None:
                return None
            row = conn.execute(sql.SQL(
                "SELECT world_id, format_version, event_count, head_hash, first_day::text, last_day::text, "
                "world_config FROM {} LIMIT 1").format(ledger)).fetchone()
            if row is None or not row[2]:
                return None
            start, end = _calendar(row[6], row[4], row[5])
            return TenantHead(row[0], int(row[1]), int(row[2]), row[3] or "", start, end)

        return self._run(query)

    def records(self, world_id: str) -> list[dict[str, Any]]:
        from psycopg import sql

        schema = truth_schema(world_id)

        def query(conn: Any) -> list[dict[str, Any]]:
            cur = conn.execute(sql.SQL(
                "SELECT seq, at::text, kind, entity_type, entity_id, payload FROM {} ORDER BY seq"
            ).format(sql.Identifier(schema, "events")))
            names = ("seq", "at", "kind", "entity_type", "entity_id", "payload")
            return [dict(zip(names, row, strict=True)) for row in cur]

        return self._run(query)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# ---------------------------------------------------------------------------------------------------
# One tenant as of one day
# ---------------------------------------------------------------------------------------------------


def _iso(day: dt.date | None) -> str | None:
    return None if day is None else day.isoformat()


@dataclass
class _LicenseUse:
    license_id: str
    holder_user_id: str | None
    assigned_to_active: bool
    days: list[dt.date]  # consumption days on this license (<= the view's day), ascending
    records: list[ConsumptionRecord]


class TenantView:
    """Everything the API answers for one tenant as of one day (built once, then read-only).

    Window-dependent utilization is computed on request and memoized per (product, window).
    """

    def __init__(self, world_id: str, head: TenantHead, day: dt.date, state: WorldState) -> None:
        self.world_id = world_id
        self.head = head
        self.day = day
        self.users = self._users(state, day)
        self.entitlements = self._entitlements(state, day)
        self.tickets = self._tickets(state, day)
        self.prices = self._prices(state, day)
        self.products = {p["product_id"] for p in self.prices}
        self._licenses_by_product, self._consumption_by_product = self._utilization_index(state, day)
        self._utilization: dict[tuple[str, int], dict[str, Any]] = {}
        self._lock = threading.Lock()

    # -- builders ---------------------------------------------------------------------------------

    @staticmethod
    def _users(state: WorldState, d: dt.date) -> dict[str, dict[str, Any]]:
        out = {}
        for user in state.user_status.users.values():
            if user.hired_on > d:
                continue
            off = user.offboarded_on if user.offboarded_on is not None and user.offboarded_on <= d else None
            out[user.user_id] = {
                "status": "active" if off is None else "offboarded",
                "hired_on": _iso(user.hired_on),
                "offboarded_on": _iso(off),
                "cost_center_id": state.cost_center_membership.cost_center_on(user.user_id, d),
            }
        return out

    @staticmethod
    def _entitlements(state: WorldState, d: dt.date) -> dict[str, list[dict[str, Any]]]:
        licenses, products = state.assignments.licenses, state.prices.products
        out: dict[str, list[dict[str, Any]]] = {}
        for license_id, user_id in sorted(assigned_licenses(state, d).items()):
            lic = licenses[license_id]
            since = next(h.valid_from for h in reversed(lic.holdings)
                         if h.valid_from <= d and (h.valid_to is None or d < h.valid_to))
            product = products.get(lic.product_id)
            out.setdefault(user_id, []).append({
                "product_id": lic.product_id,
                "product_name": product.name if product is not None else None,
                "license_id": license_id,
                "since": _iso(since),
            })
        for items in out.values():
            items.sort(key=lambda e: (e["product_id"], e["license_id"]))
        return out

    @staticmethod
    def _tickets(state: WorldState, d: dt.date) -> list[dict[str, Any]]:
        return tickets_as_of(state, d)

    @staticmethod
    def _prices(state: WorldState, d: dt.date) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for product in state.prices.products.values():
            if product.listed_on > d:
                continue
            point = next(p for p in reversed(product.price_history) if p.valid_from <= d)
            out.append({
                "product_id": product.product_id,
                "name": product.name,
                "vendor_id": product.vendor_id,
                "license_model": product.license_model,
                "list_price_usd": float(point.list_price_usd),
                "currency": "USD",
                "price_valid_from": _iso(point.valid_from),
            })
        out.sort(key=lambda p: p["product_id"])
        return out

    @staticmethod
    def _utilization_index(state: WorldState, d: dt.date
                           ) -> tuple[dict[str, list[_LicenseUse]], dict[str, list[ConsumptionRecord]]]:
        assigned = assigned_licenses(state, d)
        by_license = state.utilization.by_license
        licenses: dict[str, list[_LicenseUse]] = {}
        for lic in sorted(state.assignments.licenses.values(), key=lambda x: x.license_id):
            if lic.purchased_on > d:
                continue
            records = [r for r in by_license.get(lic.license_id, ()) if r.day <= d]
            licenses.setdefault(lic.product_id, []).append(_LicenseUse(
                lic.license_id, lic.holder_on(d), lic.license_id in assigned, [r.day for r in records], records))
        consumption: dict[str, list[ConsumptionRecord]] = {}
        for r in state.consumption.records:  # ledger order: days ascend
            if r.day <= d:
                consumption.setdefault(r.product_id, []).append(r)
        return licenses, consumption

    # -- reads ------------------------------------------------------------------------------------

    def user(self, user_id: str) -> dict[str, Any] | None:
        return self.users.get(user_id)

    def filter_tickets(self, status: str | None, product_id: str | None) -> list[dict[str, Any]]:
        return [t for t in self.tickets
                if (status is None or t["status"] == status) and (product_id is None or t["product_id"] == product_id)]

    def utilization(self, product_id: str, window_days: int) -> dict[str, Any] | None:
        if product_id not in self.products:
            return None
        key = (product_id, window_days)
        cached = self._utilization.get(key)
        if cached is not None:
            return cached
        start = self.day - dt.timedelta(days=window_days - 1)
        seats = self._licenses_by_product.get(product_id, [])
        per_license = []
        active_seats = assigned_seats = unassigned = 0
        for use in seats:
            lo = bisect.bisect_left(use.days, start)
            window = use.records[lo:]
            used = bool(window)
            if use.assigned_to_active:
                assigned_seats += 1
                active_seats += used
            if use.holder_user_id is None:
                unassigned += 1
            per_license.append({
                "license_id": use.license_id,
                "holder_user_id": use.holder_user_id,
                "assigned_to_active_user": use.assigned_to_active,
                "active_days": len({r.day for r in window}),
                "sessions": sum(r.sessions or 0 for r in window),
                "session_minutes": sum(r.session_minutes for r in window),
                "api_calls": sum(r.api_calls for r in window),
                "last_used_on": _iso(use.days[-1]) if use.days else None,
            })
        records = self._consumption_by_product.get(product_id, [])
        lo = bisect.bisect_left([r.day for r in records], start)
        window_records = records[lo:]
        result = {
            "product_id": product_id,
            "window_days": window_days,
            "window_start": _iso(start),
            "window_end": _iso(self.day),
            "seats": len(seats),
            "assigned_seats": assigned_seats,
            "unassigned_seats": unassigned,
            "active_seats": active_seats,
            "idle_seats": assigned_seats - active_seats,
            "utilization_rate": round(active_seats / assigned_seats, 4) if assigned_seats else 0.0,
            "active_users": len({r.user_id for r in window_records}),
            "sessions": sum(r.sessions or 0 for r in window_records),
            "session_minutes": sum(r.session_minutes for r in window_records),
            "api_calls": sum(r.api_calls for r in window_records),
            "licenses": per_license,
        }
        with self._lock:
            self._utilization[key] = result
        return result


def build_view(world_id: str, head: TenantHead, records: Sequence[Mapping[str, Any]], day: dt.date) -> TenantView:
    state = fold_ledger(records, day, format_version=head.format_version)
    return TenantView(world_id, head, day, state)


# ---------------------------------------------------------------------------------------------------
# The cache
# ---------------------------------------------------------------------------------------------------


def long_lived_objects() -> contextlib.AbstractContextManager[None]:
    """Build objects that stay (a tenant's records, a view) with the cyclic GC paused, then freeze them.

    The server answers on one event loop while views are built in threads. A full collection holds the GIL
    for as long as it walks every tracked object: with a 10x world's records and views (about 2 GB) `/health`
    missed its 3 s and `churnbench paper` refused the server as unresponsive, and these walks are what can hold
    the loop that long (0.66 s each over the 10x records alone, measured in a test process; decision 196).
    Frozen objects are never walked again; reference counting still frees them (records and
    views hold no cycles) when a view leaves the LRU or a tenant's head moves. Threads build at once (one per
    tenant): the pause counts its holders, and the last one freezes and resumes (`churn_assets.world.gc_pause`).
    """
    return gc_pause.cyclic_gc_paused(freeze=True)


@dataclass
class _Tenant:
    head: TenantHead | None
    checked_at: float
    records: list[dict[str, Any]] | None = None
    records_version: tuple[int, str] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class ProjectionCache:
    """Views per (world, day), built from the truth source on first use and kept in an LRU."""

    def __init__(self, source: TruthSource, *, max_views: int = 64, revalidate_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.max_views = max_views
        self.revalidate_s = revalidate_s
        self.clock = clock
        self._tenants: dict[str, _Tenant] = {}
        self._views: OrderedDict[tuple[str, tuple[int, str], dt.date], TenantView] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0

    def peek(self, world_id: str, day: dt.date) -> TenantView | None:
        """The view if it is cached and its head was checked recently; None when `get` must do work.
        Cheap and non-blocking: the async request path calls it before going to a thread."""
        tenant = self._tenants.get(world_id)
        if tenant is None or tenant.head is None or self.clock() - tenant.checked_at > self.revalidate_s:
            return None
        view = self._views.get((world_id, tenant.head.version, day))
        return view

    def head(self, world_id: str) -> TenantHead:
        """The tenant's current head (re-read when older than `revalidate_s`); TenantNotFound if none."""
        now = self.clock()
        with self._lock:
            tenant = self._tenants.get(world_id)
            fresh = tenant is not None and now - tenant.checked_at <= self.revalidate_s
        if not fresh:
            head = self.source.head(world_id)
            with self._lock:
                tenant = self._tenants.get(world_id)
                if tenant is None or tenant.head != head:
                    tenant = self._tenants[world_id] = _Tenant(head, now)
                    self._drop_views(world_id, keep=head.version if head else None)
                else:
                    tenant.checked_at = now
        assert tenant is not None
        if tenant.head is None:
            raise TenantNotFound(f"no tenant {world_id}")
        return tenant.head

    def get(self, world_id: str, day: dt.date) -> TenantView:
        """The view of `world_id` as of `day`, building it (once, under a per-tenant lock) when missing."""
        head = self.head(world_id)
        key = (world_id, head.version, day)
        with self._lock:
            view = self._views.get(key)
            if view is not None:
                self._views.move_to_end(key)
                return view
            tenant = self._tenants[world_id]
        with tenant.lock:  # one builder per tenant: concurrent first requests wait for it
            with self._lock:
                view = self._views.get(key)
            if view is not None:
                return view
            with long_lived_objects():
                if tenant.records is None or tenant.records_version != head.version:
                    tenant.records = self.source.records(world_id)
                    tenant.records_version = head.version
                view = build_view(world_id, head, tenant.records, day)
            self.builds += 1
            with self._lock:
                self._views[key] = view
                while len(self._views) > self.max_views:
                    self._views.popitem(last=False)
            return view

    def _drop_views(self, world_id: str, keep: tuple[int, str] | None) -> None:
        for key in [k for k in self._views if k[0] == world_id and k[1] != keep]:
            del self._views[key]
