"""The fold: the world state as of a day, a one-pass day-by-day walker, and vintage-map states.

A ledger record changes the facts of the entity classes its kind names (`events.EventKind.classes`;
consumption also feeds the derived `utilization` index). Each format translates a record into calls of
the sub-states' operations (`state.py`): format 2 here, format 1 in `v1.py`. All three entry points run
the same operations, so they agree by construction; the tests check it anyway:

- `fold_ledger(records, day)`: every class as of `day` (all events with `at <= day`).
- `fold_vintage(records, vintage)`: each class as of its own day, so gold can be computed against what an
  answer was served. Class `c` of the result equals class `c` of `fold_ledger(records, vintage[c])`.
- `walk_ledger(records)`: one pass, yielding `(day, state)` after each calendar day: O(events), not
  O(days x events).

The query helpers at the bottom apply the rule for references across classes (docs/rules.md, "Absent references"): an
entity a class does not know at its served day resolves as absent (a license held by a user the served `user_status`
does not know is not an active user's license).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from churn_assets.world import gc_pause, v1
from churn_assets.world.calendar import Day
from churn_assets.world.events import V1_EVENT_KINDS
from churn_assets.world.state import (
    STATE_CLASSES,
    Assignments,
    Consumption,
    ConsumptionRecord,
    Contract,
    ContractTerm,
    ContractTerms,
    CostCenterMembership,
    FoldError,
    License,
    PricePoint,
    Prices,
    Product,
    StatusChange,
    Ticket,
    Tickets,
    UserStatus,
    Utilization,
    VendorDims,
    WorldState,
)

Record = Mapping[str, Any]
Applier = Callable[[Any, Record, Day], None]
Operations = Mapping[str, tuple[tuple[str, Applier], ...]]

# ---------------------------------------------------------------------------------------------------
# format 2: each kind -> the operations it performs, per entity class
# ---------------------------------------------------------------------------------------------------


def _vendor_registered(s: VendorDims, r: Record, day: Day) -> None:
    p = r["payload"]
    s.register(r["entity_id"], day, p["name"], p["tier"])


def _vendor_changed(s: VendorDims, r: Record, day: Day) -> None:
    p = r["payload"]
    s.change(r["entity_id"], day, p["name"], p["tier"], p["change"])


def _cost_center_created(s: CostCenterMembership, r: Record, day: Day) -> None:
    p = r["payload"]
    s.create_cost_center(r["entity_id"], day, p["name"], p["business_unit"])


def _product_listed(s: Prices, r: Record, day: Day) -> None:
    p = r["payload"]
    s.list_product(Product(r["entity_id"], day, [PricePoint(day, p["list_price_usd"], "listed")],
                           name=p["name"], vendor_id=p["vendor_id"], license_model=p["license_model"],
                           api_access=p["api_access"]))


def _price_changed(s: Prices, r: Record, day: Day) -> None:
    p = r["payload"]
    s.change_price(r["entity_id"], p["list_price_usd"], day, p["reason"])


def _user_hired(s: UserStatus, r: Record, day: Day) -> None:
    s.hire(r["entity_id"], day)


def _user_joined(s: CostCenterMembership, r: Record, day: Day) -> None:
    s.join(r["entity_id"], r["payload"]["cost_center_id"], day)


def _user_offboarded(s: UserStatus, r: Record, day: Day) -> None:
    s.offboard(r["entity_id"], day, r["payload"]["reason"])


def _user_moved(s: CostCenterMembership, r: Record, day: Day) -> None:
    p = r["payload"]
    s.move(r["entity_id"], p["to_cost_center_id"], day, p["from_cost_center_id"])


def _license_purchased(s: Assignments, r: Record, day: Day) -> None:
    p = r["payload"]
    s.purchase(License(r["entity_id"], p["product_id"], day, p["unit_price_usd"], p["contract_id"]))


def _license_assigned(s: Assignments, r: Record, day: Day) -> None:
    s.assign(r["entity_id"], r["payload"]["user_id"], day)


def _license_unassigned(s: Assignments, r: Record, day: Day) -> None:
    p = r["payload"]
    s.unassign(r["entity_id"], p["user_id"], day, p["reason"])


def _license_reassigned(s: Assignments, r: Record, day: Day) -> None:
    p = r["payload"]
    s.reassign(r["entity_id"], p["from_user_id"], p["to_user_id"], day)


def _contract_signed(s: ContractTerms, r: Record, day: Day) -> None:
    p = r["payload"]
    term = ContractTerm(day, "signed", p["term_months"], _as_day(p["effective_on"]),
                        _as_day(p["expires_on"]), p["annual_value_usd"], p["committed_seats"])
    s.sign(Contract(r["entity_id"], p["vendor_id"], _as_day(p["signed_on"]), [term],
                    auto_renew=p["auto_renew"], renewal_notice_days=p["renewal_notice_days"]))


def _contract_renewed(s: ContractTerms, r: Record, day: Day) -> None:
    p = r["payload"]
    s.renew(r["entity_id"], ContractTerm(day, "renewed", p["term_months"], _as_day(p["effective_on"]),
                                         _as_day(p["expires_on"]), p["annual_value_usd"],
                                         p["committed_seats"]))


def _contract_expired(s: ContractTerms, r: Record, day: Day) -> None:
    s.expire(r["entity_id"], _as_day(r["payload"]["expired_on"]))


_LAST_CONSUMPTION: tuple[Record | None, ConsumptionRecord | None] = (None, None)


def _consumption_record(r: Record, day: Day) -> ConsumptionRecord:
    """The record's usage tuple, one per ledger record for both classes that keep it (`consumption` and the
    `utilization` index apply the same record one after the other): a large world's folds hold millions."""
    global _LAST_CONSUMPTION
    last_record, last = _LAST_CONSUMPTION
    if last_record is r and last is not None and last.day == day:
        return last
    p = r["payload"]
    made = ConsumptionRecord(day, p["user_id"], p["product_id"], r["entity_id"], p["sessions"],
                             p["session_minutes"], p["api_calls"])
    _LAST_CONSUMPTION = (r, made)  # one assignment: another thread folding meanwhile sees either pair whole
    return made


def _logs(record_of: Callable[[Record, Day], ConsumptionRecord]) -> Applier:
    """`consumption_logged` on the consumption log, reading the usage tuple with `record_of` (each format's)."""
    def apply(s: Consumption, r: Record, day: Day) -> None:
        s.log(record_of(r, day))
    return apply


def _indexes(record_of: Callable[[Record, Day], ConsumptionRecord]) -> Applier:
    """`consumption_logged` on the utilization index (the same tuple: `_consumption_record`'s cache)."""
    def apply(s: Utilization, r: Record, day: Day) -> None:
        s.record(record_of(r, day))
    return apply


_consumption_logged, _consumption_indexed = _logs(_consumption_record), _indexes(_consumption_record)


def _ticket_opened(s: Tickets, r: Record, day: Day) -> None:
    p = r["payload"]
    s.open(Ticket(r["entity_id"], p["user_id"], p["product_id"], p["priority"], day,
                  [StatusChange(day, p["status"])]))


def _ticket_status_changed(s: Tickets, r: Record, day: Day) -> None:
    p = r["payload"]
    s.change_status(r["entity_id"], day, p["status"], p["previous_status"])


V2_OPERATIONS: Operations = {
    "vendor_registered": (("vendor_dims", _vendor_registered),),
    "vendor_changed": (("vendor_dims", _vendor_changed),),
    "cost_center_created": (("cost_center_membership", _cost_center_created),),
    "product_listed": (("prices", _product_listed),),
    "price_changed": (("prices", _price_changed),),
    "user_hired": (("user_status", _user_hired), ("cost_center_membership", _user_joined)),
    "user_offboarded": (("user_status", _user_offboarded),),
    "user_moved_cost_center": (("cost_center_membership", _user_moved),),
    "license_purchased": (("assignments", _license_purchased),),
    "license_assigned": (("assignments", _license_assigned),),
    "license_unassigned": (("assignments", _license_unassigned),),
    "license_reassigned": (("assignments", _license_reassigned),),
    "contract_signed": (("contract_terms", _contract_signed),),
    "contract_renewed": (("contract_terms", _contract_renewed),),
    "contract_expired": (("contract_terms", _contract_expired),),
    "consumption_logged": (("consumption", _consumption_logged), ("utilization", _consumption_indexed)),
    "ticket_opened": (("tickets", _ticket_opened),),
    "ticket_status_changed": (("tickets", _ticket_status_changed),),
    "ticket_resolved": (("tickets", _ticket_status_changed),),
}


def _read_otherwise(appliers: Mapping[Applier, Applier], kinds: Iterable[str]) -> Operations:
    """Format 2's table for `kinds`: the same operations on the same classes, each applier replaced by its entry
    in `appliers` (kept where it has none: the payloads read alike)."""
    return {kind: tuple((cls, appliers.get(a, a)) for cls, a in V2_OPERATIONS[kind]) for kind in kinds}


# Format 1 (`v1`, the reference's ledger): format 2's table for the kinds it has, read by v1's appliers.
V1_OPERATIONS: Operations = _read_otherwise({
    _price_changed: v1.price_changed, _contract_signed: v1.contract_signed, _contract_renewed: v1.contract_renewed,
    _user_offboarded: v1.user_offboarded, _user_moved: v1.user_moved, _license_purchased: v1.license_purchased,
    _license_assigned: v1.license_assigned, _license_unassigned: v1.license_unassigned,
    _license_reassigned: v1.license_reassigned, _consumption_logged: _logs(v1.consumption_record),
    _consumption_indexed: _indexes(v1.consumption_record)}, V1_EVENT_KINDS)


def operations_for(format_version: int) -> Operations:
    if format_version == 2:
        return V2_OPERATIONS
    if format_version == 1:
        return V1_OPERATIONS
    raise FoldError(f"no fold for ledger format {format_version}")


# ---------------------------------------------------------------------------------------------------
# folding
# ---------------------------------------------------------------------------------------------------


def _as_day(value: Day | str) -> Day:
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise FoldError(f"not an ISO day: {value!r}") from None


def uniform_vintage(day: Day | str) -> dict[str, Day]:
    """The vintage map that serves every class as of one day (gold at T)."""
    return dict.fromkeys(STATE_CLASSES, _as_day(day))


class _Folder:
    """Applies records to a state in ledger order; shared by the fold, the vintage fold and the walker."""

    def __init__(self, state: WorldState, format_version: int) -> None:
        self.ops = operations_for(format_version)
        self.format_version = format_version
        self.subs = {c: getattr(state, c) for c in STATE_CLASSES}
        self.prev_at = ""
        self.prev_day = dt.date.min

    def day_of(self, rec: Record) -> Day:
        at = rec["at"]
        if at != self.prev_at:
            if at < self.prev_at:
                raise FoldError(f"seq {rec.get('seq')}: day {at} goes backwards after {self.prev_at} "
                                "(records must be in ledger order)")
            self.prev_at, self.prev_day = at, _as_day(at)
        return self.prev_day

    def steps(self, rec: Record) -> tuple[tuple[str, Applier], ...]:
        steps = self.ops.get(rec["kind"])
        if steps is None:
            raise FoldError(f"seq {rec.get('seq')}: unknown event kind {rec['kind']!r} "
                            f"for ledger format {self.format_version}")
        return steps

    def apply(self, entity_class: str, apply: Applier, rec: Record, day: Day) -> None:
        try:
            apply(self.subs[entity_class], rec, day)
        except FoldError as e:
            raise FoldError(f"seq {rec.get('seq')} ({rec['kind']} {rec['entity_id']} on {rec['at']}): "
                            f"{e}") from None


def fold_vintage(
    records: Iterable[Record],
    vintage: Mapping[str, Day | str],
    *,
    format_version: int = 2,
    classes: Collection[str] | None = None,
) -> WorldState:
    """A state whose every class holds that class's facts as of `vintage[class]`.

    `vintage` must name every entity class. Records must be in ledger order. `classes`: fold only
    these classes (the others stay empty; a caller that already holds them, such as `GoldResolver`, supplies them).
    """
    missing = [c for c in STATE_CLASSES if c not in vintage]
    unknown = [c for c in vintage if c not in STATE_CLASSES]
    if missing or unknown:
        raise FoldError("vintage map: " + "; ".join(p for p in (
            f"missing {', '.join(missing)}" if missing else "",
            f"unknown {', '.join(unknown)}" if unknown else "") if p))
    days = {c: _as_day(vintage[c]) for c in STATE_CLASSES}
    # ISO strings compare like days and save a date per record in the hot loop.
    wanted = STATE_CLASSES if classes is None else [c for c in STATE_CLASSES if c in classes]
    cutoffs = {c: days[c].isoformat() if c in wanted else "" for c in STATE_CLASSES}  # "": before every day
    last = max(cutoffs.values())
    state = WorldState(vintage=days)
    folder = _Folder(state, format_version)
    with gc_pause.cyclic_gc_paused():  # the state holds no cycle (see gc_pause)
        for rec in records:
            at = rec["at"]
            if at > last:
                break  # ledger order: nothing later can be inside any class's day
            day = folder.day_of(rec)
            applied = False
            for entity_class, apply in folder.steps(rec):
                if at <= cutoffs[entity_class]:
                    folder.apply(entity_class, apply, rec, day)
                    applied = True
            if applied:
                state.events_applied += 1
    return state


def fold_ledger(records: Iterable[Record], day: Day | str, *, format_version: int = 2) -> WorldState:
    """The world as of `day`: every event with `at <= day` applied, every class at `day`."""
    return fold_vintage(records, uniform_vintage(day), format_version=format_version)


def walk_ledger(
    records: Iterable[Record],
    *,
    format_version: int = 2,
    end: Day | str | None = None,
) -> Iterator[tuple[Day, WorldState]]:
    """Yield `(day, state)` after each calendar day, from the first record's day to `end` (default: the
    last record's day); days without events are yielded too.

    One pass over the records. The state yielded is the walker's own, updated in place: it is valid
    until the next step. Take what you need from it (or `copy.deepcopy` it) before advancing.
    """
    end_day = _as_day(end) if end is not None else None
    state = WorldState(vintage={})
    folder = _Folder(state, format_version)
    current: Day | None = None
    current_at = ""
    # The collector is paused while records are applied (the state holds no cycle, see gc_pause), not while
    # the caller holds a day's state.
    gc_pause.pause()
    try:
        for rec in records:
            at = rec["at"]
            if at != current_at:
                day = folder.day_of(rec)
                if current is not None:
                    gc_pause.resume()
                    try:
                        yield from _close_days(state, current, day - _ONE_DAY, end_day)
                    finally:
                        gc_pause.pause()
                if end_day is not None and day > end_day:
                    return
                current, current_at = day, at
            assert current is not None
            for entity_class, apply in folder.steps(rec):
                folder.apply(entity_class, apply, rec, current)
            state.events_applied += 1
    finally:
        gc_pause.resume()
    if current is not None:
        yield from _close_days(state, current, end_day or current, end_day)


_ONE_DAY = dt.timedelta(days=1)


def _close_days(state: WorldState, first: Day, last: Day, end: Day | None) -> Iterator[tuple[Day, WorldState]]:
    """Yield the state for `first`..`last` (no events in between), stopping after `end`."""
    day = first
    while day <= last and (end is None or day <= end):
        state.vintage = uniform_vintage(day)
        yield day, state
        day += _ONE_DAY


# ---------------------------------------------------------------------------------------------------
# queries: each class read from its own sub-state; unknown references resolve as absent
# ---------------------------------------------------------------------------------------------------
#
# `day` is the anchor. Facts still open in a sub-state hold on every later day, so an anchor at or
# after a class's served day reads that class's facts as served; `None` reads the current facts.


def _anchor(day: Day | str | None) -> Day:
    return dt.date.max if day is None else _as_day(day)


def existing_users(state: WorldState, day: Day | str | None = None) -> set[str]:
    """Users hired on or before `day` (active or not), as `user_status` knows them."""
    d = _anchor(day)
    return {u for u, rec in state.user_status.users.items() if rec.hired_on <= d}


def active_users(state: WorldState, day: Day | str | None = None) -> set[str]:
    d = _anchor(day)
    return {u for u, rec in state.user_status.users.items() if rec.active_on(d)}


def existing_licenses(state: WorldState, day: Day | str | None = None) -> set[str]:
    d = _anchor(day)
    return {lid for lid, lic in state.assignments.licenses.items() if lic.purchased_on <= d}


def license_holders(state: WorldState, day: Day | str | None = None) -> dict[str, str]:
    """License -> holder per `assignments` alone (whatever `user_status` says of the holder)."""
    d = _anchor(day)
    holders = {}
    for lid, lic in state.assignments.licenses.items():
        holder = lic.holder_on(d)
        if holder is not None:
            holders[lid] = holder
    return holders


def assigned_licenses(state: WorldState, day: Day | str | None = None) -> dict[str, str]:
    """License -> holder, for licenses whose holder is an active user known to the served `user_status`."""
    d = _anchor(day)
    users = state.user_status
    return {lid: u for lid, u in license_holders(state, d).items() if users.is_active_on(u, d)}


def licenses_held_by_inactive_users(state: WorldState, day: Day | str | None = None) -> dict[str, str]:
    """License -> holder, for holders that are offboarded or unknown to the served `user_status`."""
    d = _anchor(day)
    users = state.user_status
    return {lid: u for lid, u in license_holders(state, d).items() if not users.is_active_on(u, d)}


def unassigned_licenses(state: WorldState, day: Day | str | None = None) -> set[str]:
    """Licenses that exist on `day` and have no holder."""
    d = _anchor(day)
    return {lid for lid, lic in state.assignments.licenses.items()
            if lic.purchased_on <= d and lic.holder_on(d) is None}


def active_users_by_cost_center(state: WorldState, day: Day | str | None = None) -> dict[str, set[str]]:
    """Cost center -> its active users (users the membership class does not know are left out)."""
    d = _anchor(day)
    out: dict[str, set[str]] = {}
    for u in active_users(state, d):
        cc = state.cost_center_membership.cost_center_on(u, d)
        if cc is not None:
            out.setdefault(cc, set()).add(u)
    return out


def list_price_of(state: WorldState, product_id: str, day: Day | str | None = None) -> float | None:
    product = state.prices.products.get(product_id)
    return None if product is None else product.list_price_on(_anchor(day))


@dataclass(frozen=True)
class Spend:
    """Monthly license spend on one day (docs/rules.md, "Spend"); amounts in USD, rounded to cents."""

    day: Day
    by_cost_center: dict[str, float]
    unallocated: float
    unpriced_licenses: tuple[str, ...] = ()  # products the served `prices` does not know: no amount

    @property
    def allocated(self) -> float:
        return round(sum(self.by_cost_center.values()), 2)

    @property
    def total(self) -> float:
        return round(self.allocated + self.unallocated, 2)


def monthly_spend_by_cost_center(state: WorldState, day: Day | str) -> Spend:
    """The single Spend definition (docs/rules.md, "Spend").

    A cost center's spend on `day` = the sum, over licenses assigned on `day` to active users whose cost
    center on `day` is that cost center, of the product's list price on `day`. Every other license that
    exists on `day` (unassigned, held by an inactive or unknown user, or by a user without a known cost
    center) counts in `unallocated`. The license's purchase price and license model play no part.
    """
    d = _as_day(day)
    users, membership, prices = state.user_status, state.cost_center_membership, state.prices
    by_cc: dict[str, float] = {}
    unallocated = 0.0
    unpriced: list[str] = []
    for lid, lic in state.assignments.licenses.items():
        if lic.purchased_on > d:
            continue
        product = prices.products.get(lic.product_id)
        price = product.list_price_on(d) if product is not None else None
        if price is None:
            unpriced.append(lid)
            continue
        holder = lic.holder_on(d)
        cc = None
        if holder is not None and users.is_active_on(holder, d):
            cc = membership.cost_center_on(holder, d)
        if cc is None:
            unallocated += price
        else:
            by_cc[cc] = by_cc.get(cc, 0.0) + price
    return Spend(d, {cc: round(v, 2) for cc, v in sorted(by_cc.items())}, round(unallocated, 2),
                 tuple(unpriced))


def contracts_by_status(state: WorldState, anchor: Day | str) -> dict[str, list[str]]:
    """Status -> contract ids; statuses come from the served term dates at the anchor."""
    a = _as_day(anchor)
    out: dict[str, list[str]] = {"pending": [], "active": [], "expired": []}
    for cid, contract in state.contract_terms.contracts.items():
        if contract.terms[0].recorded_on <= a:  # known from the day the ledger recorded it
            out[contract.status_on(a)].append(cid)
    return out


def open_tickets(state: WorldState, day: Day | str | None = None) -> set[str]:
    """Tickets opened by `day` and not resolved on it (status open or in_progress)."""
    d = _anchor(day)
    out = set()
    for tid, ticket in state.tickets.tickets.items():
        status = ticket.status_on(d)
        if status is not None and status != "resolved":
            out.add(tid)
    return out


def tickets_as_of(state: WorldState, day: Day | str) -> list[dict[str, Any]]:
    """Every ticket opened by `day` as it stood that day, in ticket order: the one shape the operational
    store and the SaaS API both serve (plain strings, ISO days)."""
    d = _anchor(day)
    out: list[dict[str, Any]] = []
    for ticket in state.tickets.tickets.values():
        if ticket.opened_on > d:
            continue
        seen = [change for change in ticket.history if change.day <= d]
        status = seen[-1].status
        out.append({
            "ticket_id": ticket.ticket_id,
            "user_id": ticket.user_id,
            "product_id": ticket.product_id,
            "priority": ticket.priority,
            "status": status,
            "opened_on": ticket.opened_on.isoformat(),
            "updated_on": seen[-1].day.isoformat(),
            "resolved_on": seen[-1].day.isoformat() if status == "resolved" else None,
        })
    out.sort(key=lambda t: t["ticket_id"])
    return out
