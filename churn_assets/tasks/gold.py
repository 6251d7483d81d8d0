"""Gold answers, computed from the ledger fold only (the ledger is the only truth).

`gold(records, template, params, anchor=T, vintage={class: day})`: the answer to a task asked at the
anchor T against a world whose every entity class holds its facts as of `vintage[class]` (docs/rules.md,
"Gold"). Gold at T is the uniform vintage (every class at T); the gold of what an arm served is its
vintage map. Three rules make a stale answer a matter of data, never of the question:

- windows ("in the last N days") end at the anchor under every vintage;
- states derived from dates (a contract's status, months remaining) are computed at the anchor from the
  served vintage's dates;
- a reference to an entity a class does not know at its served day resolves as absent (the fold's query
  helpers apply it), as agents do.

Arms never import this module (an import scan enforces it); they read `templates.py` and `parser.py`.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.memo import Memo, memo
from churn_assets.tasks.answers import Value, last_day, round_half_up, top_of
from churn_assets.tasks.shared_aggregates import in_scope, shared, shared_aggregates
from churn_assets.tasks.templates import Template, template
from churn_assets.tasks.windows import Window
from churn_assets.world.calendar import Day, as_day, whole_months
from churn_assets.world.fold import (
    Spend,
    active_users_by_cost_center,
    assigned_licenses,
    fold_vintage,
    license_holders,
    list_price_of,
    monthly_spend_by_cost_center,
    open_tickets,
    unassigned_licenses,
    uniform_vintage,
)
from churn_assets.world.packed import records_key
from churn_assets.world.state import STATE_CLASSES, ConsumptionRecord, Contract, WorldState

Params = Mapping[str, Any]
GoldFn = Callable[[WorldState, Params, Day], Value]


class GoldError(UserFacingError, ValueError):
    """A gold request that cannot be answered as asked (a vintage after the anchor, an unknown template)."""


# ---------------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------------


def _window(params: Params, anchor: Day) -> Window:
    return Window.ending_at(anchor, params["days"])


def _money(value: float) -> float:
    return round_half_up(value, 2)


class _DailyConsumption:
    """The `consumption` class's records summed per day and product (API calls, session minutes, users), kept
    on the sub-state and brought up to date from the records it has not seen: the sub-state only ever appends
    (the fold logs records in day order), so `seen` records are summed and never change. A window's total is
    then a sum over its days instead of a scan of its records; the amounts are integers, so the sums are the
    same as a scan's, in any order. Gold over many tasks (a task set; the exposure predictor's day-by-day walk,
    in which every class but consumption shares today's sub-state) asks the same windows again and again."""

    __slots__ = ("api_calls", "minutes", "seen", "users")

    def __init__(self) -> None:
        self.seen = 0
        self.api_calls: dict[Day, dict[str, int]] = {}
        self.minutes: dict[Day, dict[str, int]] = {}
        self.users: dict[Day, dict[str, set[str]]] = {}

    def update(self, records: Sequence[ConsumptionRecord]) -> None:
        for r in records[self.seen:]:
            p = r.product_id
            api = self.api_calls.setdefault(r.day, {})
            api[p] = api.get(p, 0) + r.api_calls
            minutes = self.minutes.setdefault(r.day, {})
            minutes[p] = minutes.get(p, 0) + r.session_minutes
            self.users.setdefault(r.day, {}).setdefault(p, set()).add(r.user_id)
        self.seen = len(records)

    def days(self, window: Window) -> Iterable[Day]:
        d = window.first
        while d <= window.last:
            yield d
            d += dt.timedelta(days=1)


_DAILY = "_gold_daily_consumption"  # attribute of a `Consumption` sub-state holding its `_DailyConsumption`


def _daily(state: WorldState) -> _DailyConsumption:
    sub = state.consumption
    daily = sub.__dict__.get(_DAILY)
    if daily is None or daily.seen > len(sub.records):  # (a sub-state never shrinks; be safe if one did)
        daily = sub.__dict__[_DAILY] = _DailyConsumption()
    if daily.seen < len(sub.records):
        daily.update(sub.records)
    return daily


def _window_sum(state: WorldState, window: Window, product: str, field: str) -> int:
    daily = _daily(state)
    per_day = getattr(daily, field)
    return sum(per_day.get(d, {}).get(product, 0) for d in daily.days(window))


def _license_usage(state: WorldState, license_id: str, window: Window) -> list[ConsumptionRecord]:
    """The `utilization` class's consumption records of one license inside the window."""
    out = []
    for r in reversed(state.utilization.by_license.get(license_id, ())):
        if r.day < window.first:
            break
        if r.day <= window.last:
            out.append(r)
    return out


# The whole-world aggregates gold starts from, shared by the tasks of one state inside a `shared_aggregates`
# scope (`shared_aggregates.py`); each names the sub-states it reads.


def _spend(s: WorldState, day: Day) -> Spend:
    return shared("spend", (s.assignments, s.user_status, s.cost_center_membership, s.prices), day,
                  lambda: monthly_spend_by_cost_center(s, day))


def _holders(s: WorldState, day: Day) -> dict[str, str]:
    return shared("holders", (s.assignments,), day, lambda: license_holders(s, day))


def _active_by_cost_center(s: WorldState, day: Day) -> dict[str, set[str]]:
    return shared("active_by_cc", (s.user_status, s.cost_center_membership), day,
                  lambda: active_users_by_cost_center(s, day))


def _used_in(s: WorldState, w: Window) -> frozenset[str]:
    """Licenses with at least one `utilization` record inside the window."""
    return shared("used", (s.utilization,), (w.first, w.last),
                  lambda: frozenset(lid for lid in s.utilization.by_license if _license_usage(s, lid, w)))


def _held_by_active(state: WorldState, anchor: Day, product: str | None = None) -> dict[str, str]:
    """License -> holder for licenses held by active users today, optionally of one product."""
    held = shared("held_by_active", (state.assignments, state.user_status), anchor,
                  lambda: assigned_licenses(state, anchor))
    if product is None:
        return held
    licenses = state.assignments.licenses
    return shared("held_by_active_of", (state.assignments, state.user_status), (anchor, product),
                  lambda: {lid: u for lid, u in held.items() if licenses[lid].product_id == product})


def _known_contract(state: WorldState, contract_id: str, anchor: Day) -> Contract | None:
    c = state.contract_terms.contracts.get(contract_id)
    return c if c is not None and c.terms[0].recorded_on <= anchor else None


def _active_contracts(state: WorldState, anchor: Day) -> list[Contract]:
    return [c for c in state.contract_terms.contracts.values()
            if c.terms[0].recorded_on <= anchor and c.status_on(anchor) == "active"]


def _last_day(contract: Contract) -> Day:
    day = last_day(t.expires_on for t in contract.terms)
    assert day is not None, "a contract of the fold has at least one term"
    return day




# ---------------------------------------------------------------------------------------------------
# task_tier 1
# ---------------------------------------------------------------------------------------------------


def _list_price(s: WorldState, p: Params, a: Day) -> Value:
    return list_price_of(s, p["product"], a)


def _price_changes(s: WorldState, p: Params, a: Day) -> Value:
    w = _window(p, a)
    # The first point of a product's history is its listing, not a change.
    return sum(1 for prod in s.prices.products.values() for pt in prod.price_history[1:] if pt.valid_from in w)


def _purchases(s: WorldState, p: Params, a: Day) -> Value:
    w = _window(p, a)
    return sum(1 for lic in s.assignments.licenses.values() if lic.purchased_on in w)


def _holdings_ended(s: WorldState, w: Window, ended_by: str, product: str | None = None) -> int:
    return sum(1 for lic in s.assignments.licenses.values() if product is None or lic.product_id == product
               for h in lic.holdings if h.ended_by == ended_by and h.valid_to in w)


def _reclamations(s: WorldState, p: Params, a: Day) -> Value:
    return _holdings_ended(s, _window(p, a), "reclaimed_idle")


def _freed_by_offboarding(s: WorldState, p: Params, a: Day) -> Value:
    return _holdings_ended(s, _window(p, a), "offboarded")


def _unassigned(s: WorldState, p: Params, a: Day) -> Value:
    return len(unassigned_licenses(s, a))


def _offboardings(s: WorldState, p: Params, a: Day) -> Value:
    w = _window(p, a)
    return sum(1 for u in s.user_status.users.values() if u.offboarded_on in w)


def _hires(s: WorldState, p: Params, a: Day) -> Value:
    w = _window(p, a)
    return sum(1 for u in s.user_status.users.values() if u.hired_on in w)


def _open_tickets_of(s: WorldState, a: Day) -> list[Any]:
    return [s.tickets.tickets[t] for t in open_tickets(s, a)]


def _open_tickets_product(s: WorldState, p: Params, a: Day) -> Value:
    return sum(1 for t in _open_tickets_of(s, a) if t.product_id == p["product"])


def _open_tickets_priority(s: WorldState, p: Params, a: Day) -> Value:
    return sum(1 for t in _open_tickets_of(s, a) if t.priority == p["priority"])


def _tickets_opened(s: WorldState, p: Params, a: Day) -> Value:
    w = _window(p, a)
    return sum(1 for t in s.tickets.tickets.values() if t.opened_on in w)


def _vendor_version(s: WorldState, vendor_id: str | None, a: Day) -> Any:
    vendor = s.vendor_dims.vendors.get(vendor_id) if vendor_id is not None else None
    return vendor.version_on(a) if vendor is not None else None


def _vendor_name(s: WorldState, p: Params, a: Day) -> Value:
    v = _vendor_version(s, p["vendor"], a)
    return None if v is None else v.name


def _vendor_tier(s: WorldState, p: Params, a: Day) -> Value:
    v = _vendor_version(s, p["vendor"], a)
    return None if v is None else v.tier


def _reassignments_product(s: WorldState, p: Params, a: Day) -> Value:
    return _holdings_ended(s, _window(p, a), "reassigned", p["product"])


def _held_licenses_change(s: WorldState, p: Params, a: Day) -> Value:
    return len(_holders(s, as_day(p["day2"]))) - len(_holders(s, as_day(p["day1"])))


def _api_calls_product(s: WorldState, p: Params, a: Day) -> Value:
    return _window_sum(s, _window(p, a), p["product"], "api_calls")


def _distinct_users_product(s: WorldState, p: Params, a: Day) -> Value:
    daily = _daily(s)
    users: set[str] = set()
    for d in daily.days(_window(p, a)):
        users |= daily.users.get(d, {}).get(p["product"], set())
    return len(users)


def _session_minutes_product(s: WorldState, p: Params, a: Day) -> Value:
    return _window_sum(s, _window(p, a), p["product"], "minutes")


def _top_product_minutes(s: WorldState, p: Params, a: Day) -> Value:
    daily = _daily(s)
    minutes: dict[str, int] = {}
    for d in daily.days(_window(p, a)):
        for product, m in daily.minutes.get(d, {}).items():
            minutes[product] = minutes.get(product, 0) + m
    return top_of(minutes)


# ---------------------------------------------------------------------------------------------------
# task_tier 2
# ---------------------------------------------------------------------------------------------------


def _cc_spend(s: WorldState, cost_center: str, day: Day) -> float:
    return _spend(s, day).by_cost_center.get(cost_center, 0.0)


def _cost_center_spend(s: WorldState, p: Params, a: Day) -> Value:
    return _cc_spend(s, p["cost_center"], a)


def _total_spend(s: WorldState, p: Params, a: Day) -> Value:
    return _spend(s, a).total


def _vendor_spend(s: WorldState, p: Params, a: Day) -> Value:
    total = 0.0
    for lic in s.assignments.licenses.values():
        product = s.prices.products.get(lic.product_id)
        if lic.purchased_on <= a and product is not None and product.vendor_id == p["vendor"]:
            price = product.list_price_on(a)
            total += price if price is not None else 0.0
    return _money(total)


def _top_cost_center(s: WorldState, p: Params, a: Day) -> Value:
    return top_of(_spend(s, a).by_cost_center)


def _top_cost_center_in_unit(s: WorldState, p: Params, a: Day) -> Value:
    # Every cost center of the unit competes, one without allocated licenses at $0.00 (as
    # `t2_cost_center_spend` answers it): the SQL gold found a unit whose only cost center had none (decision 96).
    centers = s.cost_center_membership.cost_centers
    spend = _spend(s, a).by_cost_center
    return top_of({cc: spend.get(cc, 0.0) for cc, center in centers.items()
                   if center.business_unit == p["business_unit"]})


def _cost_centers_above(s: WorldState, p: Params, a: Day) -> Value:
    spend = _spend(s, a).by_cost_center
    return sorted(cc for cc, v in spend.items() if v > p["threshold"])


def _spend_change_cost_center(s: WorldState, p: Params, a: Day) -> Value:
    cc = p["cost_center"]
    return _money(_cc_spend(s, cc, as_day(p["day2"])) - _cc_spend(s, cc, as_day(p["day1"])))


def _unallocated_spend(s: WorldState, p: Params, a: Day) -> Value:
    return _spend(s, a).unallocated


def _idle(s: WorldState, held: Mapping[str, str], w: Window) -> list[str]:
    if not in_scope():  # one state, one task: scan only the licenses asked about
        return [lid for lid in held if not _license_usage(s, lid, w)]
    used = _used_in(s, w)
    return [lid for lid in held if lid not in used]


def _idle_licenses_cost_center(s: WorldState, p: Params, a: Day) -> Value:
    membership = s.cost_center_membership
    held = {lid: u for lid, u in _held_by_active(s, a).items()
            if membership.cost_center_on(u, a) == p["cost_center"]}
    return len(_idle(s, held, _window(p, a)))


def _idle_license_cost(s: WorldState, p: Params, a: Day) -> Value:
    total = 0.0
    for lid in _idle(s, _held_by_active(s, a), _window(p, a)):
        price = list_price_of(s, s.assignments.licenses[lid].product_id, a)
        total += price if price is not None else 0.0  # a product the served prices do not know: absent
    return _money(total)


def _unused_licenses_product(s: WorldState, p: Params, a: Day) -> Value:
    return len(_idle(s, _held_by_active(s, a, p["product"]), _window(p, a)))


def _zero_api_licenses_product(s: WorldState, p: Params, a: Day) -> Value:
    w = _window(p, a)
    return sum(1 for lid in _held_by_active(s, a, p["product"])
               if sum(r.api_calls for r in _license_usage(s, lid, w)) == 0)


def _active_in(s: WorldState, cost_center: str, day: Day) -> int:
    return len(_active_by_cost_center(s, day).get(cost_center, ()))


def _active_users_cost_center(s: WorldState, p: Params, a: Day) -> Value:
    return _active_in(s, p["cost_center"], a)


def _active_users_change_cost_center(s: WorldState, p: Params, a: Day) -> Value:
    cc = p["cost_center"]
    return _active_in(s, cc, as_day(p["day2"])) - _active_in(s, cc, as_day(p["day1"]))


def _tickets_opened_cost_center(s: WorldState, p: Params, a: Day) -> Value:
    w, membership = _window(p, a), s.cost_center_membership
    return sum(1 for t in s.tickets.tickets.values()
               if t.opened_on in w and membership.cost_center_on(t.user_id, a) == p["cost_center"])


def _tickets_opened_vendor(s: WorldState, p: Params, a: Day) -> Value:
    w, products = _window(p, a), s.prices.products
    return sum(1 for t in s.tickets.tickets.values()
               if t.opened_on in w and t.product_id in products and products[t.product_id].vendor_id == p["vendor"])


def _seat_utilization(s: WorldState, p: Params, a: Day) -> Value:
    held = _held_by_active(s, a, p["product"])
    if not held:
        return None  # no seat held: the fraction is undefined
    used = len(held) - len(_idle(s, held, _window(p, a)))
    return round_half_up(used / len(held), 2)


def _license_holders_product(s: WorldState, p: Params, a: Day) -> Value:
    return len(_held_by_active(s, a, p["product"]))


# ---------------------------------------------------------------------------------------------------
# task_tier 3
# ---------------------------------------------------------------------------------------------------


def _contract(fn: Callable[[WorldState, Contract, Params, Day], Value]) -> GoldFn:
    """Contract questions: an unknown contract (not yet recorded in the served terms) has no answer."""
    def run(s: WorldState, p: Params, a: Day) -> Value:
        c = _known_contract(s, p["contract"], a)
        return None if c is None else fn(s, c, p, a)
    return run


def _contract_annual_value(s: WorldState, c: Contract, p: Params, a: Day) -> Value:
    return c.terms[-1].annual_value_usd


def _vendor_contract_value(s: WorldState, p: Params, a: Day) -> Value:
    return _money(sum(c.terms[-1].annual_value_usd or 0.0 for c in _active_contracts(s, a)
                      if c.vendor_id == p["vendor"]))


def _committed_seat_gap(s: WorldState, c: Contract, p: Params, a: Day) -> Value:
    committed = c.terms[-1].committed_seats
    if committed is None:
        return None
    licenses = s.assignments.licenses
    held = sum(1 for lid in _held_by_active(s, a) if licenses[lid].contract_id == c.contract_id)
    return committed - held


def _notice_deadline(s: WorldState, c: Contract, p: Params, a: Day) -> Value:
    if c.renewal_notice_days is None:
        return None
    return (c.terms[-1].expires_on - dt.timedelta(days=c.renewal_notice_days)).isoformat()


def _committed_seats(s: WorldState, c: Contract, p: Params, a: Day) -> Value:
    return c.terms[-1].committed_seats


def _contract_status(s: WorldState, c: Contract, p: Params, a: Day) -> Value:
    return c.status_on(a)


def _months_remaining(s: WorldState, c: Contract, p: Params, a: Day) -> Value:
    return whole_months(a, _last_day(c))


def _contract_vendor_name(s: WorldState, c: Contract, p: Params, a: Day) -> Value:
    v = _vendor_version(s, c.vendor_id, a)
    return None if v is None else v.name


def _contracts_expiring(s: WorldState, p: Params, a: Day) -> Value:
    horizon = a + dt.timedelta(days=int(p["days"]))
    return sorted(c.contract_id for c in _active_contracts(s, a) if _last_day(c) <= horizon)


def _contracts_by_vendor_tier(s: WorldState, p: Params, a: Day) -> Value:
    out = []
    for c in _active_contracts(s, a):
        v = _vendor_version(s, c.vendor_id, a)
        if v is not None and v.tier == p["tier"]:
            out.append(c.contract_id)
    return sorted(out)


GOLD: dict[str, GoldFn] = {
    "t1_list_price": _list_price,
    "t1_price_changes": _price_changes,
    "t1_purchases": _purchases,
    "t1_reclamations": _reclamations,
    "t1_freed_by_offboarding": _freed_by_offboarding,
    "t1_unassigned_licenses": _unassigned,
    "t1_offboardings": _offboardings,
    "t1_hires": _hires,
    "t1_open_tickets_product": _open_tickets_product,
    "t1_open_tickets_priority": _open_tickets_priority,
    "t1_tickets_opened": _tickets_opened,
    "t1_vendor_name": _vendor_name,
    "t1_vendor_tier": _vendor_tier,
    "t1_reassignments_product": _reassignments_product,
    "t1_held_licenses_change": _held_licenses_change,
    "t1_api_calls_product": _api_calls_product,
    "t1_distinct_users_product": _distinct_users_product,
    "t1_session_minutes_product": _session_minutes_product,
    "t1_top_product_minutes": _top_product_minutes,
    "t2_cost_center_spend": _cost_center_spend,
    "t2_total_spend": _total_spend,
    "t2_vendor_spend": _vendor_spend,
    "t2_top_cost_center": _top_cost_center,
    "t2_top_cost_center_in_unit": _top_cost_center_in_unit,
    "t2_cost_centers_above": _cost_centers_above,
    "t2_spend_change_cost_center": _spend_change_cost_center,
    "t2_unallocated_spend": _unallocated_spend,
    "t2_idle_licenses_cost_center": _idle_licenses_cost_center,
    "t2_idle_license_cost": _idle_license_cost,
    "t2_unused_licenses_product": _unused_licenses_product,
    "t2_zero_api_licenses_product": _zero_api_licenses_product,
    "t2_active_users_cost_center": _active_users_cost_center,
    "t2_active_users_change_cost_center": _active_users_change_cost_center,
    "t2_tickets_opened_cost_center": _tickets_opened_cost_center,
    "t2_tickets_opened_vendor": _tickets_opened_vendor,
    "t2_seat_utilization": _seat_utilization,
    "t2_license_holders_product": _license_holders_product,
    "t3_contract_annual_value": _contract(_contract_annual_value),
    "t3_vendor_contract_value": _vendor_contract_value,
    "t3_committed_seat_gap": _contract(_committed_seat_gap),
    "t3_notice_deadline": _contract(_notice_deadline),
    "t3_committed_seats": _contract(_committed_seats),
    "t3_contract_status": _contract(_contract_status),
    "t3_months_remaining": _contract(_months_remaining),
    "t3_contract_vendor_name": _contract(_contract_vendor_name),
    "t3_contracts_expiring": _contracts_expiring,
    "t3_contracts_by_vendor_tier": _contracts_by_vendor_tier,
}


# ---------------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------------


def _template(t: Template | str) -> Template:
    return template(t) if isinstance(t, str) else t


def check_vintage(vintage: Mapping[str, Day | str], anchor: Day) -> dict[str, Day]:
    """A complete vintage map with no day after the anchor (served data cannot come from after T)."""
    missing = [c for c in STATE_CLASSES if c not in vintage]
    if missing:
        raise GoldError(f"vintage map is missing {', '.join(missing)}")
    days = {c: as_day(vintage[c]) for c in STATE_CLASSES}
    late = [f"{c}={d}" for c, d in days.items() if d > anchor]
    if late:
        raise GoldError(f"vintage map serves data after the anchor {anchor}: {', '.join(late)}")
    return days


def complete_vintage(read: Mapping[str, Day | str], anchor: Day | str) -> dict[str, Day]:
    """A vintage map from the data times of the classes an answer read; classes it did not read take the
    anchor (gold reads only its template's classes, so they cannot matter)."""
    a = as_day(anchor)
    return {c: as_day(read[c]) if c in read else a for c in STATE_CLASSES}


def gold_from_state(state: WorldState, t: Template | str, params: Params, anchor: Day | str) -> Value:
    """The answer of one task from a folded state (the state's vintage is whatever it was folded at)."""
    tmpl = _template(t)
    fn = GOLD.get(tmpl.template_id)
    if fn is None:
        raise GoldError(f"template {tmpl.template_id} has no gold computation")
    return tmpl.answer.normalize(fn(state, params, as_day(anchor)))


class GoldResolver:
    """Gold for many tasks over one ledger: each vintage map is folded once and reused.

    A class's sub-state depends only on its own day (`fold_vintage`), so a vintage map's state is assembled from
    the (class, day) sub-states folded for earlier maps, and only the classes at a day not yet seen are folded:
    cells of one T that differ in a few stale classes share the others (the consumption classes, the costliest
    to fold, are served at T by every policy). Its states are never changed once made (and their
    `events_applied` is not counted: 0).
    """

    def __init__(self, records: Sequence[Mapping[str, Any]], *, format_version: int = 2) -> None:
        self.records = records
        self.format_version = format_version
        self._states: dict[tuple[tuple[str, Day], ...], WorldState] = {}
        self._subs: dict[tuple[str, Day], Any] = {}  # (class, day) -> that class's sub-state
        self._golds: dict[tuple[Any, ...], Value] = {}
        self._aggregates: dict[tuple[Any, ...], Any] = {}  # its states never change once folded: kept for good
        self._lock = threading.RLock()  # a shared resolver (`shared_resolver`) may be asked from two threads

    @property
    def substates(self) -> int:
        """How many (class, day) sub-states it holds (what its memory grows with)."""
        return len(self._subs)

    @property
    def vintage_maps(self) -> int:
        """How many vintage maps it has assembled states for (each keeps its gold values)."""
        return len(self._states)

    def state(self, vintage: Mapping[str, Day | str], anchor: Day | str) -> WorldState:
        with self._lock:
            return self._state(vintage, anchor)

    def _state(self, vintage: Mapping[str, Day | str], anchor: Day | str) -> WorldState:
        days = check_vintage(vintage, as_day(anchor))
        key = tuple(sorted(days.items()))
        if key not in self._states:
            missing = [c for c in STATE_CLASSES if (c, days[c]) not in self._subs]
            if missing:
                folded = fold_vintage(self.records, days, format_version=self.format_version, classes=missing)
                for c in missing:
                    self._subs[(c, days[c])] = getattr(folded, c)
            self._states[key] = WorldState(vintage=days, **{c: self._subs[(c, days[c])] for c in STATE_CLASSES})
        return self._states[key]

    def gold(self, t: Template | str, params: Params, *, anchor: Day | str,
             vintage: Mapping[str, Day | str] | None = None) -> Value:
        """Gold of one task, kept per (vintage, template, params, anchor): an evaluation asks the same gold
        at T and under the served vintage for its exposure and again for its scores, and an exposure-only
        sweep asks gold at T once per cell of the same T."""
        a = as_day(anchor)
        days = check_vintage(vintage or uniform_vintage(a), a)
        tmpl = _template(t)
        key = (tuple(sorted(days.items())), tmpl.template_id, json.dumps(params, sort_keys=True, default=str), a)
        with self._lock:
            if key not in self._golds:
                with shared_aggregates(self._aggregates):
                    self._golds[key] = gold_from_state(self._state(days, a), tmpl, params, a)
            value = self._golds[key]
        return copy.deepcopy(value) if isinstance(value, list | dict | set) else value


SHARED: Memo[GoldResolver] = memo("gold.shared_resolver", 2)  # ledgers, as `load_world_ledger` keeps two
# A shared resolver holding this many sub-states (or this many times as many vintage maps) is replaced by an
# empty one. A paper's nine cells need 26
# (every class at T, the cached classes at T' and at their refresh days: counted on its results); a sweep's
# worker evaluating dozens of cells of other days would otherwise keep every state it ever folded.
SHARED_MAX_SUBSTATES = 48


def shared_resolver(records: Sequence[Mapping[str, Any]], *, format_version: int = 2) -> GoldResolver:
    """This process's resolver for the ledger records `records` (by `records_key`), for evaluations that run in
    it one after another: a paper's cells in one worker ask gold at T of the same tasks, and fold the classes
    served at T alike, so each is computed once per worker instead of once per cell. Values are the same as a
    new resolver's (its states never change once folded, and `gold` returns copies)."""
    key = (records_key(records), format_version)
    kept = SHARED.get(key)
    if kept is not None and kept.substates < SHARED_MAX_SUBSTATES and kept.vintage_maps < 4 * SHARED_MAX_SUBSTATES:
        return kept
    return SHARED.put(key, GoldResolver(records, format_version=format_version))


def gold(records: Sequence[Mapping[str, Any]], t: Template | str, params: Params, *, anchor: Day | str,
         vintage: Mapping[str, Day | str] | None = None, format_version: int = 2) -> Value:
    """Gold of one task (folds the ledger; use `GoldResolver` for many tasks)."""
    return GoldResolver(records, format_version=format_version).gold(t, params, anchor=anchor, vintage=vintage)
