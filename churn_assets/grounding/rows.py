"""The retrieval vocabulary shared by the router and the agents: what can be asked, and the rows that come back.

A `Request` asks for one *view* of one entity class (docs/rules.md, "Which class owns which fact"), with
optional filters the router pushes down to the store. Every view returns rows of one plain dataclass,
the same whichever store served it (staged table, as-of view, Mongo, SaaS API, documents, vector index):
that is what lets one deterministic agent run on every arm, and lets a unit test feed it rows built by hand.

Rows describe the class *as served*: the facts of its data day, history included. Intervals are
day-granular and half-open, `[valid_from, valid_to)`, with `valid_to` None while a fact still held on
the data day (a later end is not known yet). A date after the data day never appears in a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from churn_assets.world.calendar import Day

# The longest window or horizon, in days, a request or a measure call may ask (ten years): bounds what an agent
# may pass (the JSON grammar's integers, a measure's `days`), so no window runs past the calendar's dates.
MAX_DAYS = 3660

# view -> the entity class that owns its facts
VIEW_CLASS: dict[str, str] = {
    "users": "user_status",  # users, hire and offboard days
    "memberships": "cost_center_membership",  # a user's cost-center intervals
    "cost_centers": "cost_center_membership",  # cost centers and business units
    "licenses": "assignments",  # purchases: product, contract, purchase day and price
    "holdings": "assignments",  # holder intervals of licenses
    "products": "prices",  # products: vendor and listing day
    "prices": "prices",  # list-price intervals
    "vendors": "vendor_dims",  # vendor name and tier intervals
    "contracts": "contract_terms",  # contracts and their term history (the documents)
    "consumption": "consumption",  # consumption events in a day range
    "usage": "utilization",  # per-license usage over a trailing window ending at T
    "tickets": "tickets",  # tickets and their status at T
}
VIEWS: tuple[str, ...] = tuple(VIEW_CLASS)


@dataclass(frozen=True)
class Request:
    """One view of one class, with filters. `first`/`last` bound consumption days (both inclusive);
    `window_days` and `products` say which usage windows and products a usage request covers."""

    view: str
    product: str | None = None
    contract: str | None = None
    vendor: str | None = None
    first: Day | None = None
    last: Day | None = None
    window_days: int | None = None
    products: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.view not in VIEW_CLASS:
            raise ValueError(f"unknown view {self.view!r} (known: {', '.join(VIEWS)})")
        if self.view == "consumption" and (self.first is None or self.last is None):
            raise ValueError("a consumption request needs first and last days")
        if self.view == "usage" and (self.window_days is None or self.window_days < 1):
            raise ValueError("a usage request needs window_days >= 1")

    @property
    def entity_class(self) -> str:
        return VIEW_CLASS[self.view]

    def describe(self) -> str:
        filters = [f"{k}={v}" for k, v in (("product", self.product), ("contract", self.contract),
                                           ("vendor", self.vendor), ("first", self.first), ("last", self.last),
                                           ("window_days", self.window_days)) if v is not None]
        if self.products is not None:
            filters.append(f"products={len(self.products)}")
        return self.view + (f"({', '.join(filters)})" if filters else "")


# ---------------------------------------------------------------------------------------------------
# rows, one type per view
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UserRow:
    user_id: str
    hired_on: Day
    offboarded_on: Day | None  # None: active on the data day


@dataclass(frozen=True)
class MembershipRow:
    user_id: str
    cost_center_id: str
    valid_from: Day
    valid_to: Day | None


@dataclass(frozen=True)
class CostCenterRow:
    cost_center_id: str
    business_unit: str | None


@dataclass(frozen=True)
class LicenseRow:
    license_id: str
    product_id: str
    purchased_on: Day
    contract_id: str | None
    unit_price_usd: float  # the purchase price (recorded; spend never uses it)


@dataclass(frozen=True)
class HoldingRow:
    license_id: str
    product_id: str
    user_id: str
    valid_from: Day
    valid_to: Day | None
    ended_by: str | None  # "reassigned", "offboarded", "reclaimed_idle"; None while held


@dataclass(frozen=True)
class ProductRow:
    product_id: str
    vendor_id: str | None
    listed_on: Day


@dataclass(frozen=True)
class PriceRow:
    product_id: str
    list_price_usd: float
    valid_from: Day
    valid_to: Day | None


@dataclass(frozen=True)
class VendorRow:
    vendor_id: str
    name: str
    tier: str
    valid_from: Day
    valid_to: Day | None


@dataclass(frozen=True)
class TermRow:
    recorded_on: Day
    effective_on: Day
    expires_on: Day  # last day of the term (inclusive)
    annual_value_usd: float | None
    committed_seats: int | None


@dataclass(frozen=True)
class ContractRow:
    contract_id: str
    vendor_id: str | None
    renewal_notice_days: int | None
    terms: tuple[TermRow, ...]  # in the order recorded: the last is the latest term


@dataclass(frozen=True)
class ConsumptionRow:
    day: Day
    user_id: str
    product_id: str
    license_id: str | None
    session_minutes: int
    api_calls: int


@dataclass(frozen=True)
class UsageRow:
    """One license's use over the trailing window of `window_days` days ending at T."""

    license_id: str
    product_id: str
    window_days: int
    active_days: int  # days with a consumption record on the license inside the window
    api_calls: int


@dataclass(frozen=True)
class TicketRow:
    ticket_id: str
    user_id: str
    product_id: str
    priority: str
    opened_on: Day
    status: str  # on the data day: open, in_progress or resolved


Row = (UserRow | MembershipRow | CostCenterRow | LicenseRow | HoldingRow | ProductRow | PriceRow | VendorRow
       | ContractRow | ConsumptionRow | UsageRow | TicketRow)


def holds_on(valid_from: Day, valid_to: Day | None, day: Day) -> bool:
    """The half-open interval rule: a fact holds on `day` when it started on or before it and had not ended."""
    return valid_from <= day and (valid_to is None or day < valid_to)


def seen_on(value: Day | None, day: Day) -> Day | None:
    """A date as seen on `day`: one after `day` is not known yet (None). Readers apply it to every end
    date, so no row carries a date after its data day whatever the store holds."""
    return value if value is not None and value <= day else None


class StructuredTools(Protocol):
    """What an arm offers the agent and the measures it calls: one retrieval per call, one row list per request
    (None: the arm does not serve that class)."""

    def retrieve(self, requests: Sequence[Request], note: str = "") -> list[list[Row] | None]: ...
