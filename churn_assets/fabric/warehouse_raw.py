"""The raw projection: ledger records -> the tables of `<world>_raw`, each row with a validity interval.

Pure (no database): `project_raw(records, world)` returns every table's rows; `fabric/postgres.py` loads
them. Intervals follow the fold's convention (`world/state.py`): day-granular, `valid_from` is the first
day a row holds, `valid_to` the first day it no longer holds (exclusive) and NULL while it still holds.
Any day d is read with `valid_from <= d AND (valid_to IS NULL OR d < valid_to)`, without re-projection.
Two changes of one entity on one day leave a zero-length row (`valid_from = valid_to`): it holds on no
day but keeps the change countable, as in the fold.

Contract terms never enter the warehouse (docs/rules.md, "Contract documents"). `contracts` holds contract ids only
(from the day the ledger records the contract); vendor, term, dates, value, seats and renewal terms live only in the
contract documents, and `contract_renewed` / `contract_expired` events are not projected at all.

Every row carries `source_seq`, the ledger `seq` of the event that started it (lineage back to the
truth schema). The projection checks the ledger's consistency inside each entity (a license assigned
twice, a ticket leaving a status it is not in) and refuses with a `ProjectionError` naming the event.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.fabric.postgres import Column, TableData, TableSpec

# Bump when the raw layout or its semantics change: a stored raw layer with another version is reloaded.
PROJECTION_VERSION = 1
META_TABLE = "world"

Record = Mapping[str, Any]


class ProjectionError(UserFacingError, ValueError):
    """The ledger contradicts itself; the message names the event (seq, kind, entity, day)."""


def _c(name: str, sql_type: str, nullable: bool = True) -> Column:
    return Column(name, sql_type, nullable)


def _validity() -> tuple[Column, ...]:
    return (_c("valid_from", "date", False), _c("valid_to", "date"), _c("source_seq", "bigint", False))


MONEY = "numeric(12,2)"

# In load order; `world` (the meta table) is written last by the loader.
RAW_TABLES: dict[str, TableSpec] = {spec.name: spec for spec in (
    TableSpec("vendors", (
        _c("vendor_id", "text", False), _c("vendor_name", "text", False), _c("vendor_tier", "text", False),
        _c("change", "text", False), *_validity()),
        "Vendor versions (SCD2): name and tier; `change` is registered, renamed or tier_changed.",
        primary_key=("vendor_id", "source_seq")),
    TableSpec("products", (
        _c("product_id", "text", False), _c("product_name", "text", False), _c("vendor_id", "text", False),
        _c("license_model", "text", False), _c("api_access", "boolean", False), *_validity()),
        "Products with vendor and license model, from the day they are listed. Prices are in `prices`.",
        primary_key=("product_id",)),
    TableSpec("cost_centers", (
        _c("cost_center_id", "text", False), _c("cost_center_name", "text", False),
        _c("business_unit", "text", False), *_validity()),
        "Cost centers with their business unit, from the day they are created.",
        primary_key=("cost_center_id",)),
    TableSpec("users", (
        _c("user_id", "text", False), _c("status", "text", False), _c("offboard_reason", "text"), *_validity()),
        "User status intervals: `active` from the hire, `offboarded` from the offboarding on.",
        primary_key=("user_id", "source_seq")),
    TableSpec("cost_center_memberships", (
        _c("user_id", "text", False), _c("cost_center_id", "text", False), *_validity()),
        "Which cost center a user belongs to, as intervals (joined at hire, moved later).",
        primary_key=("user_id", "source_seq")),
    TableSpec("licenses", (
        _c("license_id", "text", False), _c("product_id", "text", False), _c("contract_id", "text"),
        _c("unit_price_usd", MONEY, False), _c("purchased_on", "date", False), *_validity()),
        "License purchases (one seat each): product, contract id and purchase price.",
        primary_key=("license_id",)),
    TableSpec("assignments", (
        _c("license_id", "text", False), _c("user_id", "text", False), _c("product_id", "text", False),
        _c("ended_by", "text"), *_validity()),
        "Who holds a license, as intervals; `ended_by` is reassigned, offboarded or reclaimed_idle.",
        primary_key=("license_id", "source_seq"), indexes=(("user_id",),)),
    TableSpec("prices", (
        _c("product_id", "text", False), _c("list_price_usd", MONEY, False), _c("reason", "text"),
        *_validity()),
        "Product list prices (monthly, per seat) as intervals.",
        primary_key=("product_id", "source_seq")),
    TableSpec("tickets", (
        _c("ticket_id", "text", False), _c("user_id", "text", False), _c("product_id", "text", False),
        _c("priority", "text", False), _c("status", "text", False), _c("opened_on", "date", False),
        *_validity()),
        "Support ticket status intervals (open, in_progress, resolved).",
        primary_key=("ticket_id", "source_seq")),
    TableSpec("consumption", (
        _c("consumption_id", "bigint", False), _c("consumed_on", "date", False), _c("license_id", "text", False),
        _c("user_id", "text", False), _c("product_id", "text", False), _c("sessions", "integer", False),
        _c("session_minutes", "integer", False), _c("api_calls", "integer", False), *_validity()),
        "Consumption facts, one per logged event (`consumption_id` = its ledger seq); known from their day on.",
        primary_key=("consumption_id",), indexes=(("consumed_on",), ("license_id",))),
    TableSpec("contracts", (_c("contract_id", "text", False), *_validity()),
        "Contract ids only, from the day the ledger records the contract. Terms live in the documents.",
        primary_key=("contract_id",)),
    TableSpec(META_TABLE, (
        _c("world_id", "text", False), _c("calendar_start", "date", False), _c("calendar_end", "date", False),
        _c("dates_through", "date", False), _c("first_day", "date"), _c("last_day", "date"),
        _c("event_count", "bigint", False), _c("head_hash", "text"), _c("format_version", "integer", False),
        _c("projection_version", "integer", False), _c("load_key", "text", False)),
        "One row: the world, its calendar, the ledger head this layer was projected from, and the load key."),
)}

# Payload fields of contract events that must never reach the warehouse (see the module docstring).
CONTRACT_TERM_FIELDS = frozenset({
    "vendor_id", "term_months", "signed_on", "effective_on", "expires_on", "annual_value_usd",
    "committed_seats", "auto_renew", "renewal_notice_days", "previous_expires_on", "expired_on",
})


@dataclass(frozen=True)
class WorldInfo:
    """What the `world` row records besides the ledger itself."""

    world_id: str
    calendar_start: dt.date
    calendar_end: dt.date  # last day of the world's calendar (inclusive)
    dates_through: dt.date | None = None  # dim_date runs to this day (default: calendar_end)
    head_hash: str | None = None
    format_version: int = 2

    def load_key(self) -> str:
        """Identifies the content: the same key means the raw layer already holds exactly this."""
        through = (self.dates_through or self.calendar_end).isoformat()
        return (f"v{PROJECTION_VERSION}:{self.head_hash}:{self.calendar_start}:{self.calendar_end}:{through}")


@dataclass
class RawProjection:
    world: WorldInfo
    tables: dict[str, list[tuple[Any, ...]]]

    def table_data(self) -> list[TableData]:
        return [TableData(RAW_TABLES[name], rows) for name, rows in self.tables.items()]

    @property
    def row_counts(self) -> dict[str, int]:
        return {name: len(rows) for name, rows in self.tables.items()}


class _Open:
    """Rows whose interval is still open, by entity: a row is a list, closed by setting its valid_to."""

    def __init__(self, table: list[list[Any]]) -> None:
        self.table = table
        self.current: dict[str, list[Any]] = {}

    def open(self, key: str, row: list[Any]) -> None:
        self.table.append(row)
        self.current[key] = row

    def close(self, key: str, day: dt.date, valid_to_index: int) -> list[Any]:
        row = self.current.pop(key)
        row[valid_to_index] = day
        return row


class _Failure:
    """Builds the error for one record (kept out of the hot loop's closures)."""

    __slots__ = ("rec",)

    def __init__(self, rec: Record) -> None:
        self.rec = rec

    def __call__(self, problem: str) -> ProjectionError:
        r = self.rec
        return ProjectionError(f"seq {r['seq']} ({r['kind']} {r['entity_id']} on {r['at']}): {problem}")


def project_raw(records: Iterable[Record], world: WorldInfo) -> RawProjection:
    """Project format-2 ledger records (in ledger order) onto the raw tables."""
    if world.format_version != 2:
        raise ProjectionError(f"world {world.world_id}: the warehouse projects format-2 ledgers only (this one "
                              f"is format {world.format_version}); re-generate the world with churnbench")
    vendors: list[list[Any]] = []
    products: list[list[Any]] = []
    cost_centers: list[list[Any]] = []
    users: list[list[Any]] = []
    memberships: list[list[Any]] = []
    licenses: list[list[Any]] = []
    assignments: list[list[Any]] = []
    prices: list[list[Any]] = []
    tickets: list[list[Any]] = []
    consumption: list[tuple[Any, ...]] = []
    contracts: list[list[Any]] = []

    # valid_to sits at index -2 of every row (before source_seq), except consumption (never closed).
    vt = -2
    open_vendor = _Open(vendors)
    open_user = _Open(users)
    open_membership = _Open(memberships)
    open_holding = _Open(assignments)
    open_price = _Open(prices)
    open_ticket = _Open(tickets)
    license_product: dict[str, str] = {}
    seen_products: set[str] = set()
    seen_cost_centers: set[str] = set()
    seen_contracts: set[str] = set()

    days: dict[str, dt.date] = {}
    first_at = last_at = None
    count = 0
    row: list[Any] | None  # the open or closed row each branch below works on
    for rec in records:
        count += 1
        at = rec["at"]
        day = days.get(at)
        if day is None:
            if last_at is not None and at < last_at:
                raise ProjectionError(f"seq {rec.get('seq')}: day {at} goes backwards after {last_at}")
            day = days[at] = dt.date.fromisoformat(at)
            first_at = first_at or at
            last_at = at
        kind, eid, p, seq = rec["kind"], rec["entity_id"], rec["payload"], rec["seq"]
        fail = _Failure(rec)
        if kind == "consumption_logged":  # the bulk of every ledger: first, and without a closure
            consumption.append((seq, day, eid, p["user_id"], p["product_id"], p["sessions"], p["session_minutes"],
                                p["api_calls"], day, None, seq))
        elif kind == "license_assigned":
            if eid not in license_product:
                raise fail("license was never purchased")
            if eid in open_holding.current:
                raise fail(f"license is already held by {open_holding.current[eid][1]}")
            open_holding.open(eid, [eid, p["user_id"], license_product[eid], None, day, None, seq])
        elif kind in ("license_unassigned", "license_reassigned"):
            holder = p["user_id"] if kind == "license_unassigned" else p["from_user_id"]
            held = open_holding.current.get(eid)
            if held is None or held[1] != holder:
                raise fail(f"license is taken from {holder} but held by {held[1] if held else 'nobody'}")
            row = open_holding.close(eid, day, vt)
            row[3] = p["reason"] if kind == "license_unassigned" else "reassigned"
            if kind == "license_reassigned":
                open_holding.open(eid, [eid, p["to_user_id"], license_product[eid], None, day, None, seq])
        elif kind == "user_hired":
            if eid in open_user.current:
                raise fail("user is hired twice")
            open_user.open(eid, [eid, "active", None, day, None, seq])
            open_membership.open(eid, [eid, p["cost_center_id"], day, None, seq])
        elif kind == "user_offboarded":
            row = open_user.current.get(eid)
            if row is None or row[1] != "active":
                raise fail("user is offboarded but is not active")
            open_user.close(eid, day, vt)
            open_user.open(eid, [eid, "offboarded", p["reason"], day, None, seq])
        elif kind == "user_moved_cost_center":
            row = open_membership.current.get(eid)
            if row is None or row[1] != p["from_cost_center_id"]:
                raise fail(f"user moves from {p['from_cost_center_id']} but is in {row[1] if row else 'none'}")
            open_membership.close(eid, day, vt)
            open_membership.open(eid, [eid, p["to_cost_center_id"], day, None, seq])
        elif kind == "license_purchased":
            if eid in license_product:
                raise fail("license is purchased twice")
            license_product[eid] = p["product_id"]
            licenses.append([eid, p["product_id"], p["contract_id"], p["unit_price_usd"], day, day, None, seq])
        elif kind == "ticket_opened":
            if eid in open_ticket.current:
                raise fail("ticket is opened twice")
            open_ticket.open(eid, [eid, p["user_id"], p["product_id"], p["priority"], p["status"], day, day,
                                   None, seq])
        elif kind in ("ticket_status_changed", "ticket_resolved"):
            row = open_ticket.current.get(eid)
            if row is None or row[4] != p["previous_status"]:
                raise fail(f"ticket leaves status {p['previous_status']} but is {row[4] if row else 'unknown'}")
            open_ticket.close(eid, day, vt)
            open_ticket.open(eid, [*row[:4], p["status"], row[5], day, None, seq])
        elif kind == "price_changed":
            if eid not in open_price.current:
                raise fail("price change for a product that was never listed")
            open_price.close(eid, day, vt)
            open_price.open(eid, [eid, p["list_price_usd"], p["reason"], day, None, seq])
        elif kind == "product_listed":
            if eid in seen_products:
                raise fail("product is listed twice")
            seen_products.add(eid)
            products.append([eid, p["name"], p["vendor_id"], p["license_model"], p["api_access"], day, None, seq])
            open_price.open(eid, [eid, p["list_price_usd"], "listed", day, None, seq])
        elif kind == "vendor_registered":
            if eid in open_vendor.current:
                raise fail("vendor is registered twice")
            open_vendor.open(eid, [eid, p["name"], p["tier"], "registered", day, None, seq])
        elif kind == "vendor_changed":
            if eid not in open_vendor.current:
                raise fail("vendor changes but was never registered")
            open_vendor.close(eid, day, vt)
            open_vendor.open(eid, [eid, p["name"], p["tier"], p["change"], day, None, seq])
        elif kind == "cost_center_created":
            if eid in seen_cost_centers:
                raise fail("cost center is created twice")
            seen_cost_centers.add(eid)
            cost_centers.append([eid, p["name"], p["business_unit"], day, None, seq])
        elif kind == "contract_signed":
            if eid in seen_contracts:
                raise fail("contract is signed twice")
            seen_contracts.add(eid)
            contracts.append([eid, day, None, seq])  # the id only: terms live in the documents
        elif kind in ("contract_renewed", "contract_expired"):
            pass  # contract terms are the documents'
        else:
            raise fail("unknown event kind for ledger format 2")

    meta = (world.world_id, world.calendar_start, world.calendar_end, world.dates_through or world.calendar_end,
            days.get(first_at) if first_at else None, days.get(last_at) if last_at else None, count,
            world.head_hash, world.format_version, PROJECTION_VERSION, world.load_key())
    tables: dict[str, list[tuple[Any, ...]]] = {
        "vendors": [tuple(r) for r in vendors],
        "products": [tuple(r) for r in products],
        "cost_centers": [tuple(r) for r in cost_centers],
        "users": [tuple(r) for r in users],
        "cost_center_memberships": [tuple(r) for r in memberships],
        "licenses": [tuple(r) for r in licenses],
        "assignments": [tuple(r) for r in assignments],
        "prices": [tuple(r) for r in prices],
        "tickets": [tuple(r) for r in tickets],
        "consumption": consumption,
        "contracts": [tuple(r) for r in contracts],
        META_TABLE: [meta],
    }
    for name, rows in tables.items():
        width = len(RAW_TABLES[name].columns)
        if rows and len(rows[0]) != width:  # a programming error, caught by the unit tests
            raise AssertionError(f"raw table {name}: rows have {len(rows[0])} values for {width} columns")
    return RawProjection(world, tables)
