"""The world state the fold builds: one sub-state per entity class, each with its own history.

Every fact lives in the sub-state of the entity class that owns it (docs/rules.md, "Which
class owns which fact"), so a state can take each class from a different day (a vintage map). Sub-states
keep history, not just current values, because gold asks "changes in the last N days" and SCD2 tables
are projected from them.

Intervals are day-granular: `valid_from` is the first day a fact holds, `valid_to` the first day it no
longer holds (exclusive), None while it still holds. An event of day d is part of the state "as of d",
so a user offboarded on d is inactive on d. Two changes on one day leave a zero-length interval: it
never holds on any day but keeps the change countable.

The methods that change a sub-state are the fold's operations; the v1 and v2 translations call them.
They refuse what cannot happen inside one class (assigning a license that is already held, offboarding
a user twice): that is a broken ledger, not a vintage effect. References across classes (a license held
by a user the user_status class does not know) are never checked here: that is what vintage maps make
normal, and the query helpers in `fold.py` resolve them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from churn_assets.errors import UserFacingError
from churn_assets.world.calendar import Day
from churn_assets.world.events import ENTITY_CLASSES

# Classes whose facts the fold stores. `utilization` is derived from consumption and assignments; its
# sub-state is an index of consumption as of utilization's own day, so a vintage map can serve it apart.
STATE_CLASSES: tuple[str, ...] = ENTITY_CLASSES


class FoldError(UserFacingError, ValueError):
    """The ledger contradicts itself inside one entity class (a bug in whatever wrote it)."""


def _holds_on(valid_from: Day, valid_to: Day | None, day: Day) -> bool:
    return valid_from <= day and (valid_to is None or day < valid_to)


# ---------------------------------------------------------------------------------------------------
# user_status: users exist and are active; hire and offboard history
# ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class UserRecord:
    user_id: str
    hired_on: Day
    offboarded_on: Day | None = None
    offboard_reason: str | None = None

    @property
    def active(self) -> bool:
        return self.offboarded_on is None

    def active_on(self, day: Day) -> bool:
        return _holds_on(self.hired_on, self.offboarded_on, day)


@dataclass
class UserStatus:
    users: dict[str, UserRecord] = field(default_factory=dict)

    def hire(self, user_id: str, day: Day) -> None:
        if user_id in self.users:
            raise FoldError(f"user {user_id} is hired twice")
        self.users[user_id] = UserRecord(user_id, day)

    def offboard(self, user_id: str, day: Day, reason: str | None) -> None:
        user = self.users.get(user_id)
        if user is None:
            raise FoldError(f"user {user_id} is offboarded but was never hired")
        if user.offboarded_on is not None:
            raise FoldError(f"user {user_id} is offboarded twice")
        user.offboarded_on, user.offboard_reason = day, reason

    def is_active_on(self, user_id: str, day: Day) -> bool:
        """False for a user this state does not know (docs/rules.md, "Absent references")."""
        user = self.users.get(user_id)
        return user is not None and user.active_on(day)


# ---------------------------------------------------------------------------------------------------
# cost_center_membership: cost centers (reference data) and each user's cost-center intervals
# ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CostCenter:
    cost_center_id: str
    created_on: Day
    name: str | None = None  # format-1 ledgers name cost centers only by id
    business_unit: str | None = None


@dataclass(slots=True)
class Membership:
    cost_center_id: str
    valid_from: Day
    valid_to: Day | None = None


@dataclass
class CostCenterMembership:
    cost_centers: dict[str, CostCenter] = field(default_factory=dict)
    memberships: dict[str, list[Membership]] = field(default_factory=dict)  # user id -> intervals

    def create_cost_center(self, cost_center_id: str, day: Day, name: str | None,
                           business_unit: str | None) -> None:
        if cost_center_id in self.cost_centers:
            raise FoldError(f"cost center {cost_center_id} is created twice")
        self.cost_centers[cost_center_id] = CostCenter(cost_center_id, day, name, business_unit)

    def join(self, user_id: str, cost_center_id: str, day: Day) -> None:
        if user_id in self.memberships:
            raise FoldError(f"user {user_id} joins a first cost center twice")
        self.memberships[user_id] = [Membership(cost_center_id, day)]

    def move(self, user_id: str, to_cost_center_id: str, day: Day, from_cost_center_id: str | None) -> None:
        """`from_cost_center_id` is checked when the ledger states it (format 2)."""
        history = self.memberships.get(user_id)
        if history is None:
            raise FoldError(f"user {user_id} moves cost center but never joined one")
        current = history[-1]
        if from_cost_center_id is not None and current.cost_center_id != from_cost_center_id:
            raise FoldError(f"user {user_id} moves from {from_cost_center_id} but is in "
                            f"{current.cost_center_id}")
        current.valid_to = day
        history.append(Membership(to_cost_center_id, day))

    def cost_center_on(self, user_id: str, day: Day) -> str | None:
        for m in reversed(self.memberships.get(user_id, ())):
            if _holds_on(m.valid_from, m.valid_to, day):
                return m.cost_center_id
        return None


# ---------------------------------------------------------------------------------------------------
# assignments: licenses, purchases and holder intervals
# ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Holding:
    """One holder's interval on a license; `ended_by` is "reassigned" or the unassignment's reason."""

    user_id: str
    valid_from: Day
    valid_to: Day | None = None
    ended_by: str | None = None


@dataclass(slots=True)
class License:
    license_id: str
    product_id: str
    purchased_on: Day
    unit_price_usd: float
    contract_id: str | None = None
    seats: int = 1
    holdings: list[Holding] = field(default_factory=list)

    @property
    def holder(self) -> str | None:
        if self.holdings and self.holdings[-1].valid_to is None:
            return self.holdings[-1].user_id
        return None

    def holder_on(self, day: Day) -> str | None:
        for h in reversed(self.holdings):
            if _holds_on(h.valid_from, h.valid_to, day):
                return h.user_id
        return None


@dataclass
class Assignments:
    licenses: dict[str, License] = field(default_factory=dict)

    def purchase(self, lic: License) -> None:
        if lic.license_id in self.licenses:
            raise FoldError(f"license {lic.license_id} is purchased twice")
        self.licenses[lic.license_id] = lic

    def _license(self, license_id: str) -> License:
        lic = self.licenses.get(license_id)
        if lic is None:
            raise FoldError(f"license {license_id} was never purchased")
        return lic

    def assign(self, license_id: str, user_id: str, day: Day) -> None:
        lic = self._license(license_id)
        if lic.holder is not None:
            raise FoldError(f"license {license_id} is assigned to {user_id} but held by {lic.holder}")
        lic.holdings.append(Holding(user_id, day))

    def unassign(self, license_id: str, user_id: str, day: Day, reason: str) -> None:
        self._end_holding(license_id, user_id, day, reason)

    def reassign(self, license_id: str, from_user_id: str, to_user_id: str, day: Day) -> None:
        self._end_holding(license_id, from_user_id, day, "reassigned")
        self.licenses[license_id].holdings.append(Holding(to_user_id, day))

    def _end_holding(self, license_id: str, user_id: str, day: Day, ended_by: str) -> None:
        lic = self._license(license_id)
        if lic.holder != user_id:
            raise FoldError(f"license {license_id} is taken from {user_id} but held by {lic.holder}")
        last = lic.holdings[-1]
        last.valid_to, last.ended_by = day, ended_by


# ---------------------------------------------------------------------------------------------------
# prices: products (reference data) and list-price history
# ---------------------------------------------------------------------------------------------------


class PricePoint(NamedTuple):
    valid_from: Day
    list_price_usd: float
    reason: str | None


@dataclass(slots=True)
class Product:
    product_id: str
    listed_on: Day
    price_history: list[PricePoint]
    name: str | None = None  # format-1 ledgers know a product only by its prices
    vendor_id: str | None = None
    license_model: str | None = None
    api_access: bool | None = None

    @property
    def list_price_usd(self) -> float:
        return self.price_history[-1].list_price_usd

    def list_price_on(self, day: Day) -> float | None:
        for p in reversed(self.price_history):
            if p.valid_from <= day:
                return p.list_price_usd
        return None


@dataclass
class Prices:
    products: dict[str, Product] = field(default_factory=dict)

    def list_product(self, product: Product) -> None:
        if product.product_id in self.products:
            raise FoldError(f"product {product.product_id} is listed twice")
        self.products[product.product_id] = product

    def change_price(self, product_id: str, list_price_usd: float, day: Day, reason: str | None) -> None:
        product = self.products.get(product_id)
        if product is None:
            raise FoldError(f"price change for product {product_id}, which was never listed")
        product.price_history.append(PricePoint(day, list_price_usd, reason))


# ---------------------------------------------------------------------------------------------------
# contract_terms: contracts, their term history and expiries
# ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ContractTerm:
    """One term of a contract as recorded on `recorded_on` (a signing or a renewal)."""

    recorded_on: Day
    change: str  # "signed" or "renewed"
    term_months: int
    effective_on: Day
    expires_on: Day  # last day of the term (inclusive)
    annual_value_usd: float | None = None
    committed_seats: int | None = None


CONTRACT_STATUSES = ("pending", "active", "expired")


@dataclass(slots=True)
class Contract:
    contract_id: str
    vendor_id: str | None
    signed_on: Day
    terms: list[ContractTerm]
    auto_renew: bool | None = None
    renewal_notice_days: int | None = None
    expired_on: Day | None = None  # the day the ledger recorded the expiry (the status comes from dates)
    vendor_idx: int | None = None  # format-1 ledgers name a vendor by index only

    @property
    def current_term(self) -> ContractTerm:
        return self.terms[-1]

    def status_on(self, anchor: Day) -> str:
        """Derived from the term dates, never from a status field: active iff a term covers the anchor."""
        if any(t.effective_on <= anchor <= t.expires_on for t in self.terms):
            return "active"
        if anchor > max(t.expires_on for t in self.terms):
            return "expired"
        return "pending"


@dataclass
class ContractTerms:
    contracts: dict[str, Contract] = field(default_factory=dict)

    def sign(self, contract: Contract) -> None:
        if contract.contract_id in self.contracts:
            raise FoldError(f"contract {contract.contract_id} is signed twice")
        self.contracts[contract.contract_id] = contract

    def _contract(self, contract_id: str) -> Contract:
        c = self.contracts.get(contract_id)
        if c is None:
            raise FoldError(f"contract {contract_id} was never signed")
        return c

    def renew(self, contract_id: str, term: ContractTerm) -> None:
        self._contract(contract_id).terms.append(term)

    def expire(self, contract_id: str, expired_on: Day) -> None:
        c = self._contract(contract_id)
        if c.expired_on is not None:
            raise FoldError(f"contract {contract_id} expires twice")
        c.expired_on = expired_on


# ---------------------------------------------------------------------------------------------------
# vendor_dims: vendor name and tier with history
# ---------------------------------------------------------------------------------------------------


class VendorVersion(NamedTuple):
    valid_from: Day
    name: str
    tier: str
    change: str  # "registered", "renamed" or "tier_changed"


@dataclass(slots=True)
class Vendor:
    vendor_id: str
    history: list[VendorVersion]

    @property
    def name(self) -> str:
        return self.history[-1].name

    @property
    def tier(self) -> str:
        return self.history[-1].tier

    def version_on(self, day: Day) -> VendorVersion | None:
        for v in reversed(self.history):
            if v.valid_from <= day:
                return v
        return None


@dataclass
class VendorDims:
    vendors: dict[str, Vendor] = field(default_factory=dict)

    def register(self, vendor_id: str, day: Day, name: str, tier: str) -> None:
        if vendor_id in self.vendors:
            raise FoldError(f"vendor {vendor_id} is registered twice")
        self.vendors[vendor_id] = Vendor(vendor_id, [VendorVersion(day, name, tier, "registered")])

    def change(self, vendor_id: str, day: Day, name: str, tier: str, change: str) -> None:
        vendor = self.vendors.get(vendor_id)
        if vendor is None:
            raise FoldError(f"vendor {vendor_id} changes but was never registered")
        vendor.history.append(VendorVersion(day, name, tier, change))


# ---------------------------------------------------------------------------------------------------
# consumption and utilization
# ---------------------------------------------------------------------------------------------------


class ConsumptionRecord(NamedTuple):
    day: Day
    user_id: str
    product_id: str
    license_id: str | None  # format-1 ledgers log consumption per user, not per license
    sessions: int | None  # not in format 1
    session_minutes: int
    api_calls: int


@dataclass
class Consumption:
    records: list[ConsumptionRecord] = field(default_factory=list)

    def log(self, record: ConsumptionRecord) -> None:
        self.records.append(record)


@dataclass
class Utilization:
    """Consumption indexed for utilization questions, folded to utilization's own day.

    Utilization is derived (consumption over a trailing window, read against assignments); this index
    is what its staged copy would hold, so a vintage map can serve it from a day other than consumption's.
    Keyed by license (format 2) and by (user, product) (both formats; format 1 has no license ids).
    """

    by_license: dict[str, list[ConsumptionRecord]] = field(default_factory=dict)
    by_user_product: dict[tuple[str, str], list[ConsumptionRecord]] = field(default_factory=dict)

    def record(self, record: ConsumptionRecord) -> None:
        if record.license_id is not None:
            self.by_license.setdefault(record.license_id, []).append(record)
        self.by_user_product.setdefault((record.user_id, record.product_id), []).append(record)

    def last_used_on(self, *, license_id: str | None = None, user_id: str | None = None,
                     product_id: str | None = None, until: Day | None = None) -> Day | None:
        """The last day (<= `until`) with consumption on the license, or by the user on the product."""
        if license_id is not None:
            records = self.by_license.get(license_id, [])
        elif user_id is not None and product_id is not None:
            records = self.by_user_product.get((user_id, product_id), [])
        else:
            raise ValueError("last_used_on needs a license_id, or a user_id and a product_id")
        for r in reversed(records):
            if until is None or r.day <= until:
                return r.day
        return None


# ---------------------------------------------------------------------------------------------------
# tickets
# ---------------------------------------------------------------------------------------------------


class StatusChange(NamedTuple):
    day: Day
    status: str


@dataclass(slots=True)
class Ticket:
    ticket_id: str
    user_id: str
    product_id: str
    priority: str
    opened_on: Day
    history: list[StatusChange]

    @property
    def status(self) -> str:
        return self.history[-1].status

    def status_on(self, day: Day) -> str | None:
        for change in reversed(self.history):
            if change.day <= day:
                return change.status
        return None


@dataclass
class Tickets:
    tickets: dict[str, Ticket] = field(default_factory=dict)

    def open(self, ticket: Ticket) -> None:
        if ticket.ticket_id in self.tickets:
            raise FoldError(f"ticket {ticket.ticket_id} is opened twice")
        self.tickets[ticket.ticket_id] = ticket

    def change_status(self, ticket_id: str, day: Day, status: str, previous_status: str) -> None:
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            raise FoldError(f"ticket {ticket_id} changes status but was never opened")
        if ticket.status != previous_status:
            raise FoldError(f"ticket {ticket_id} leaves status {previous_status} but is {ticket.status}")
        ticket.history.append(StatusChange(day, status))


# ---------------------------------------------------------------------------------------------------
# the whole state
# ---------------------------------------------------------------------------------------------------


@dataclass
class WorldState:
    """The world after the events of each class's day: `vintage[entity_class]` is that day.

    A state folded at one day has the same day for every class; a vintage-map state may differ per class.
    `events_applied` counts the ledger records that changed at least one class.
    """

    vintage: dict[str, Day]
    user_status: UserStatus = field(default_factory=UserStatus)
    cost_center_membership: CostCenterMembership = field(default_factory=CostCenterMembership)
    assignments: Assignments = field(default_factory=Assignments)
    prices: Prices = field(default_factory=Prices)
    contract_terms: ContractTerms = field(default_factory=ContractTerms)
    vendor_dims: VendorDims = field(default_factory=VendorDims)
    consumption: Consumption = field(default_factory=Consumption)
    utilization: Utilization = field(default_factory=Utilization)
    tickets: Tickets = field(default_factory=Tickets)
    events_applied: int = 0

    def of(self, entity_class: str) -> object:
        """The sub-state of one entity class."""
        if entity_class not in STATE_CLASSES:
            raise KeyError(f"unknown entity class {entity_class!r}")
        return getattr(self, entity_class)
