"""Measures that join classes: spend (docs/rules.md, "Spend"), idle and used seats (the live `utilization`
class with the cached holdings), active users and tickets by cost center, tickets on a vendor's products."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from churn_assets.grounding.measures.context import Served, as_day, implements
from churn_assets.grounding.measures.served import (
    Holdings,
    Memberships,
    Prices,
    Spend,
    Users,
    held_by_active,
    idle,
    money,
    spend_on,
    usage_by_license,
)
from churn_assets.grounding.rows import LicenseRow, Request, UsageRow
from churn_assets.tasks.answers import Value, round_half_up, top_of
from churn_assets.world.calendar import Day

# -- spend -------------------------------------------------------------------------------------------

SpendParts = tuple[list[LicenseRow], Holdings, Users, Memberships | None, Prices]


def _spend_parts(s: Served) -> SpendParts:
    licenses, holdings, users, memberships, products, prices = s.fetch(
        Request("licenses"), Request("holdings"), Request("users"),
        Request("memberships"), Request("products"), Request("prices"))
    return (s.need(licenses), Holdings(s.need(holdings)), Users(users),
            None if memberships is None else Memberships(memberships), Prices(products, prices))


def _spend(s: Served) -> Spend:
    return spend_on(s.today, *_spend_parts(s))


@implements("cost_center_spend")
def cost_center_spend(s: Served, cost_center: str) -> Value:
    return _spend(s).by_cost_center.get(cost_center, 0.0)


@implements("total_spend")
def total_spend(s: Served) -> Value:
    return _spend(s).total


@implements("unallocated_spend")
def unallocated_spend(s: Served) -> Value:
    return _spend(s).unallocated


@implements("top_spending_cost_center")
def top_spending_cost_center(s: Served) -> Value:
    return top_of(_spend(s).by_cost_center)


@implements("top_spending_cost_center_in_unit")
def top_spending_cost_center_in_unit(s: Served, business_unit: str) -> Value:
    spend = _spend(s)
    [centers] = s.fetch(Request("cost_centers"))
    unit = {r.cost_center_id: r.business_unit for r in s.need(centers)}
    return top_of({cc: spend.by_cost_center.get(cc, 0.0) for cc, bu in unit.items() if bu == business_unit})


@implements("cost_centers_above_spend")
def cost_centers_above_spend(s: Served, threshold: float) -> Value:
    return sorted(cc for cc, v in _spend(s).by_cost_center.items() if v > threshold)


@implements("cost_center_spend_change")
def cost_center_spend_change(s: Served, cost_center: str, day1: Day, day2: Day) -> Value:
    parts = _spend_parts(s)
    return money(spend_on(as_day(day2), *parts).by_cost_center.get(cost_center, 0.0)
                 - spend_on(as_day(day1), *parts).by_cost_center.get(cost_center, 0.0))


@implements("vendor_spend")
def vendor_spend(s: Served, vendor: str) -> Value:
    licenses, products, prices = s.fetch(Request("licenses"), Request("products"), Request("prices"))
    served = Prices(s.need(products), s.need(prices))
    total = 0.0
    for lic in sorted(s.need(licenses), key=lambda r: r.license_id):
        product = served.products.get(lic.product_id)
        if lic.purchased_on <= s.today and product is not None and product.vendor_id == vendor:
            price = served.price_on(lic.product_id, s.today)
            total += price if price is not None else 0.0
    return money(total)


# -- idle and used seats -----------------------------------------------------------------------------


def _held(s: Served, product: str | None, *, with_membership: bool = False
          ) -> tuple[dict[str, str], list[LicenseRow], Memberships | None]:
    """Licenses held by active users today (optionally of one product), from the assignments and
    user_status classes (and cost_center_membership when asked)."""
    requests = [Request("licenses", product=product), Request("holdings", product=product), Request("users")]
    if with_membership:
        requests.append(Request("memberships"))
    got = s.fetch(*requests)
    licenses = s.need(got[0])
    held = held_by_active(licenses, Holdings(s.need(got[1])), Users(got[2]), s.today, product)
    return held, licenses, Memberships(s.need(got[3])) if with_membership else None


def _usage(s: Served, days: int, held: Mapping[str, str], licenses: Iterable[LicenseRow]) -> dict[str, UsageRow]:
    """Usage over the question's window of the held licenses' products (the live `utilization` class)."""
    products = tuple(sorted({lic.product_id for lic in licenses if lic.license_id in held}))
    if not products:
        return {}
    [rows] = s.fetch(Request("usage", window_days=int(days), products=products))
    return usage_by_license(s.need(rows))


@implements("idle_licenses_in_cost_center")
def idle_licenses_in_cost_center(s: Served, cost_center: str, days: int) -> Value:
    held, licenses, memberships = _held(s, None, with_membership=True)
    assert memberships is not None
    mine = {lid: u for lid, u in held.items() if memberships.cost_center_on(u, s.today) == cost_center}
    return len(idle(mine, _usage(s, days, mine, licenses)))


@implements("idle_license_cost")
def idle_license_cost(s: Served, days: int) -> Value:
    held, licenses, _ = _held(s, None)
    idle_ids = idle(held, _usage(s, days, held, licenses))
    products, prices = s.fetch(Request("products"), Request("prices"))
    served = Prices(products, prices)
    by_id = {lic.license_id: lic for lic in licenses}
    total = 0.0
    for lid in sorted(idle_ids):
        lic = by_id[lid]
        price = served.price_on(lic.product_id, s.today) if served.known else lic.unit_price_usd
        total += price if price is not None else 0.0
    return money(total)


def _held_product(s: Served, product: str, days: int) -> tuple[dict[str, str], dict[str, UsageRow]]:
    """The product's licenses held by active users today and their usage over the window, in one retrieval
    (a federated join: the cached classes with the live `utilization`)."""
    licenses, holdings, users, usage = s.fetch(
        Request("licenses", product=product), Request("holdings", product=product), Request("users"),
        Request("usage", window_days=int(days), products=(product,)))
    held = held_by_active(s.need(licenses), Holdings(s.need(holdings)), Users(users), s.today, product)
    return held, usage_by_license(s.need(usage))


@implements("unused_licenses")
def unused_licenses(s: Served, product: str, days: int) -> Value:
    held, usage = _held_product(s, product, days)
    return len(idle(held, usage))


@implements("zero_api_licenses")
def zero_api_licenses(s: Served, product: str, days: int) -> Value:
    held, usage = _held_product(s, product, days)
    return sum(1 for lid in held if lid not in usage or usage[lid].api_calls == 0)


@implements("seat_utilization")
def seat_utilization(s: Served, product: str, days: int) -> Value:
    held, usage = _held_product(s, product, days)
    if not held:
        return None  # no seat held: the fraction is undefined
    used = len(held) - len(idle(held, usage))
    return round_half_up(used / len(held), 2)


# -- people and tickets by cost center ---------------------------------------------------------------


def _active_in(s: Served, cost_center: str, *days: Day) -> list[int]:
    users, memberships = s.fetch(Request("users"), Request("memberships"))
    served, m = Users(s.need(users)), Memberships(s.need(memberships))
    return [sum(1 for u in served.active_on(day) if m.cost_center_on(u, day) == cost_center) for day in days]


@implements("active_users")
def active_users(s: Served, cost_center: str) -> Value:
    [count] = _active_in(s, cost_center, s.today)
    return count


@implements("active_users_net_change")
def active_users_net_change(s: Served, cost_center: str, day1: Day, day2: Day) -> Value:
    first, second = _active_in(s, cost_center, as_day(day1), as_day(day2))
    return second - first


@implements("tickets_opened_by_cost_center")
def tickets_opened_by_cost_center(s: Served, days: int, cost_center: str) -> Value:
    tickets, memberships = s.fetch(Request("tickets"), Request("memberships"))
    w, m = s.window(days), Memberships(s.need(memberships))
    return sum(1 for t in s.need(tickets)
               if t.opened_on in w and m.cost_center_on(t.user_id, s.today) == cost_center)


@implements("tickets_opened_on_vendor_products")
def tickets_opened_on_vendor_products(s: Served, vendor: str, days: int) -> Value:
    tickets, products = s.fetch(Request("tickets"), Request("products"))
    w = s.window(days)
    vendor_of = {p.product_id: p.vendor_id for p in s.need(products)}
    return sum(1 for t in s.need(tickets)
               if t.opened_on in w and t.product_id in vendor_of and vendor_of[t.product_id] == vendor)
