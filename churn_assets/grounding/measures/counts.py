"""Measures over one family of facts each: prices, licenses and their holders, users, tickets, vendors,
consumption. Each is the template's semantics (docs/tasks.md) written over served rows; windows end today."""

from __future__ import annotations

from collections.abc import Callable

from churn_assets.grounding.measures.context import Served, as_day, implements
from churn_assets.grounding.measures.served import Holdings, Prices, Users, Vendors, held_by_active
from churn_assets.grounding.rows import ConsumptionRow, Request, TicketRow, UserRow
from churn_assets.tasks.answers import Value, top_of
from churn_assets.world.calendar import Day

# -- prices ------------------------------------------------------------------------------------------


@implements("list_price")
def list_price(s: Served, product: str) -> Value:
    [prices] = s.fetch(Request("prices", product=product))
    return Prices(None, s.need(prices)).price_on(product, s.today)


@implements("price_changes")
def price_changes(s: Served, days: int) -> Value:
    [prices] = s.fetch(Request("prices"))
    w, points = s.window(days), Prices(None, s.need(prices)).points
    # A product's first price point is its listing, not a change.
    return sum(1 for pts in points.values() for p in sorted(pts, key=lambda r: r.valid_from)[1:] if p.valid_from in w)


# -- licenses and holders ----------------------------------------------------------------------------


@implements("licenses_purchased")
def licenses_purchased(s: Served, days: int) -> Value:
    [licenses] = s.fetch(Request("licenses"))
    w = s.window(days)
    return sum(1 for r in s.need(licenses) if r.purchased_on in w)


def _ended(s: Served, days: int, ended_by: str, product: str | None = None) -> Value:
    [holdings] = s.fetch(Request("holdings", product=product))
    w = s.window(days)
    return sum(1 for h in s.need(holdings) if h.ended_by == ended_by and h.valid_to in w
               and (product is None or h.product_id == product))


@implements("idle_licenses_reclaimed")
def idle_licenses_reclaimed(s: Served, days: int) -> Value:
    return _ended(s, days, "reclaimed_idle")


@implements("licenses_freed_by_offboarding")
def licenses_freed_by_offboarding(s: Served, days: int) -> Value:
    return _ended(s, days, "offboarded")


@implements("direct_reassignments")
def direct_reassignments(s: Served, product: str, days: int) -> Value:
    return _ended(s, days, "reassigned", product)


@implements("unassigned_licenses")
def unassigned_licenses(s: Served) -> Value:
    licenses, holdings = s.fetch(Request("licenses"), Request("holdings"))
    held = Holdings(s.need(holdings))
    return sum(1 for lic in s.need(licenses)
               if lic.purchased_on <= s.today and held.holder_on(lic.license_id, s.today) is None)


@implements("held_licenses_net_change")
def held_licenses_net_change(s: Served, day1: Day, day2: Day) -> Value:
    [holdings] = s.fetch(Request("holdings"))
    held = Holdings(s.need(holdings))
    return len(held.holders_on(as_day(day2))) - len(held.holders_on(as_day(day1)))


@implements("licenses_held_by_active_users")
def licenses_held_by_active_users(s: Served, product: str) -> Value:
    licenses, holdings, users = s.fetch(Request("licenses", product=product),
                                        Request("holdings", product=product), Request("users"))
    return len(held_by_active(s.need(licenses), Holdings(s.need(holdings)), Users(users), s.today, product))


# -- users -------------------------------------------------------------------------------------------


def _users_where(s: Served, days: int, pick: Callable[[UserRow], Day | None]) -> Value:
    [users] = s.fetch(Request("users"))
    w = s.window(days)
    return sum(1 for u in s.need(users) if pick(u) in w)


@implements("users_offboarded")
def users_offboarded(s: Served, days: int) -> Value:
    return _users_where(s, days, lambda u: u.offboarded_on)


@implements("users_hired")
def users_hired(s: Served, days: int) -> Value:
    return _users_where(s, days, lambda u: u.hired_on)


# -- tickets -----------------------------------------------------------------------------------------


def _open_tickets(s: Served, product: str | None, keep: Callable[[TicketRow], bool]) -> Value:
    [tickets] = s.fetch(Request("tickets", product=product))
    return sum(1 for t in s.need(tickets) if t.opened_on <= s.today and t.status != "resolved" and keep(t))


@implements("open_tickets_of_product")
def open_tickets_of_product(s: Served, product: str) -> Value:
    return _open_tickets(s, product, lambda t: t.product_id == product)


@implements("open_tickets_by_priority")
def open_tickets_by_priority(s: Served, priority: str) -> Value:
    return _open_tickets(s, None, lambda t: t.priority == priority)


@implements("tickets_opened")
def tickets_opened(s: Served, days: int) -> Value:
    [tickets] = s.fetch(Request("tickets"))
    w = s.window(days)
    return sum(1 for t in s.need(tickets) if t.opened_on in w)


# -- vendors -----------------------------------------------------------------------------------------


def _vendor_field(s: Served, vendor: str, field_name: str) -> Value:
    [vendors] = s.fetch(Request("vendors", vendor=vendor))
    v = Vendors(s.need(vendors)).version_on(vendor, s.today)
    return None if v is None else getattr(v, field_name)


@implements("vendor_name")
def vendor_name(s: Served, vendor: str) -> Value:
    return _vendor_field(s, vendor, "name")


@implements("vendor_tier")
def vendor_tier(s: Served, vendor: str) -> Value:
    return _vendor_field(s, vendor, "tier")


# -- consumption -------------------------------------------------------------------------------------


def _consumption(s: Served, days: int, product: str | None = None) -> list[ConsumptionRow]:
    w = s.window(days)
    [rows] = s.fetch(Request("consumption", first=w.first, last=w.last, product=product))
    return [r for r in s.need(rows) if r.day in w and (product is None or r.product_id == product)]


@implements("api_calls")
def api_calls(s: Served, product: str, days: int) -> Value:
    return sum(r.api_calls for r in _consumption(s, days, product))


@implements("distinct_users")
def distinct_users(s: Served, product: str, days: int) -> Value:
    return len({r.user_id for r in _consumption(s, days, product)})


@implements("session_minutes")
def session_minutes(s: Served, product: str, days: int) -> Value:
    return sum(r.session_minutes for r in _consumption(s, days, product))


@implements("top_product_by_session_minutes")
def top_product_by_session_minutes(s: Served, days: int) -> Value:
    minutes: dict[str, float] = {}
    for r in _consumption(s, days):
        minutes[r.product_id] = minutes.get(r.product_id, 0) + r.session_minutes
    return top_of(minutes)
