"""The deterministic agent: reads the question text, plans retrievals through the arm's tools, and computes
the answer from the rows it retrieved. No model, no gold, no fold.

It parses the question with `tasks.parser` (question text -> template and parameters) and runs that
template's *plan*: a few `Request`s to the arm's tools, then a computation over the rows that came back.
The computations are a second, independent implementation of each template's semantics (the words are
defined in `tasks/templates.py` and docs/tasks.md), written over rows rather than over a folded state:

- "today" is the anchor T the arm gives the agent; windows ("in the last N days") end at T whatever day
  the data was served from;
- states that follow from dates (a contract's status, months remaining, who is active) are computed at T
  from the dates the rows carry, never read from a rendered status;
- a reference the served rows do not know resolves as absent (docs/rules.md, "Absent references"): a license held by a
  user the served `user_status` does not know is not an active user's license; a product the served `prices` does not
  know has no price.

Arms whose tools cannot serve a class (the `grounding_no_semantic_model` ablation maps question keywords
to classes and serves only those) return None for that request; the agent then applies the documented
fallback (docs/arms.md, "The deterministic agent": e.g. without `prices` a license is priced at its purchase
price), so the answer differs exactly where a measure's definition needs a class the question's words do not name.

Arms that only retrieve fact records (`grounding_no_source_routing`, the classic-RAG arms) get their
answer from `arms.extraction` instead: the fixed extraction rule over the records retrieved.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from churn_assets.arms.agents.interface import AgentAnswer, AgentError, RecordSearch, StructuredTools
from churn_assets.arms.extraction import K, extract, search_kinds
from churn_assets.grounding.rows import (
    ConsumptionRow,
    ContractRow,
    HoldingRow,
    LicenseRow,
    MembershipRow,
    PriceRow,
    ProductRow,
    Request,
    TicketRow,
    UsageRow,
    UserRow,
    VendorRow,
    holds_on,
)
from churn_assets.tasks.answers import Value, last_day, round_half_up, top_of
from churn_assets.tasks.parser import QuestionParseError, parse_question
from churn_assets.tasks.windows import Window
from churn_assets.world.calendar import Day, whole_months

Params = Mapping[str, Any]

AGENT_ID = "det"


# ---------------------------------------------------------------------------------------------------
# served rows, indexed: the fold's queries re-done over what was retrieved
# ---------------------------------------------------------------------------------------------------


def _money(value: float) -> float:
    return round_half_up(value, 2)


class Users:
    def __init__(self, rows: Iterable[UserRow] | None) -> None:
        # None: the arm did not serve user_status; the fallback counts every holder as active.
        self.known = rows is not None
        self.by_id = {r.user_id: r for r in rows or ()}

    def is_active_on(self, user_id: str, day: Day) -> bool:
        if not self.known:
            return True
        u = self.by_id.get(user_id)
        return u is not None and holds_on(u.hired_on, u.offboarded_on, day)

    def active_on(self, day: Day) -> list[str]:
        return [u for u, r in self.by_id.items() if holds_on(r.hired_on, r.offboarded_on, day)]


class Memberships:
    def __init__(self, rows: Iterable[MembershipRow]) -> None:
        self.by_user: dict[str, list[MembershipRow]] = {}
        for r in rows:
            self.by_user.setdefault(r.user_id, []).append(r)

    def cost_center_on(self, user_id: str, day: Day) -> str | None:
        for m in self.by_user.get(user_id, ()):
            if holds_on(m.valid_from, m.valid_to, day):
                return m.cost_center_id
        return None


class Holdings:
    def __init__(self, rows: Iterable[HoldingRow]) -> None:
        self.rows = list(rows)
        self.by_license: dict[str, list[HoldingRow]] = {}
        for r in self.rows:
            self.by_license.setdefault(r.license_id, []).append(r)

    def holder_on(self, license_id: str, day: Day) -> str | None:
        for h in self.by_license.get(license_id, ()):
            if holds_on(h.valid_from, h.valid_to, day):
                return h.user_id
        return None

    def holders_on(self, day: Day) -> dict[str, str]:
        """License -> holder on `day`, whatever the holder's status (the fold's `license_holders`)."""
        out = {}
        for lid in self.by_license:
            holder = self.holder_on(lid, day)
            if holder is not None:
                out[lid] = holder
        return out


class Prices:
    """Products and their list-price intervals as served; None rows: the arm did not serve `prices`."""

    def __init__(self, products: Iterable[ProductRow] | None, prices: Iterable[PriceRow] | None) -> None:
        self.known = products is not None or prices is not None
        self.products = {p.product_id: p for p in products or ()}
        self.points: dict[str, list[PriceRow]] = {}
        for r in prices or ():
            self.points.setdefault(r.product_id, []).append(r)

    def price_on(self, product_id: str, day: Day) -> float | None:
        for p in self.points.get(product_id, ()):
            if holds_on(p.valid_from, p.valid_to, day):
                return p.list_price_usd
        return None

    def vendor_of(self, product_id: str) -> str | None:
        p = self.products.get(product_id)
        return None if p is None else p.vendor_id


class Vendors:
    def __init__(self, rows: Iterable[VendorRow]) -> None:
        self.by_id: dict[str, list[VendorRow]] = {}
        for r in rows:
            self.by_id.setdefault(r.vendor_id, []).append(r)

    def version_on(self, vendor_id: str | None, day: Day) -> VendorRow | None:
        for v in self.by_id.get(vendor_id or "", ()):
            if holds_on(v.valid_from, v.valid_to, day):
                return v
        return None


def contract_status(c: ContractRow, today: Day) -> str:
    """From the term dates at today: active when a term covers today, expired after the last term's
    last day, pending before any term starts."""
    if any(t.effective_on <= today <= t.expires_on for t in c.terms):
        return "active"
    if today > max(t.expires_on for t in c.terms):
        return "expired"
    return "pending"


def contract_last_day(c: ContractRow) -> Day:
    day = last_day(t.expires_on for t in c.terms)
    assert day is not None, "a served contract has at least one term"
    return day


@dataclass(frozen=True)
class Spend:
    by_cost_center: dict[str, float]
    unallocated: float

    @property
    def total(self) -> float:
        return round(round(sum(self.by_cost_center.values()), 2) + self.unallocated, 2)


# ---------------------------------------------------------------------------------------------------
# the context a plan runs in
# ---------------------------------------------------------------------------------------------------


class Unknown(Exception):
    """A class the computation cannot do without was not served: the answer is unknown."""


class Context:
    """A plan's view of one question: parameters, today, and the arm's tools."""

    def __init__(self, params: Params, today: Day, tools: StructuredTools, template_id: str) -> None:
        self.p = params
        self.today = today
        self.tools = tools
        self.template_id = template_id

    def fetch(self, *requests: Request) -> list[list[Any] | None]:
        """The rows of each request, None for a class not served. Each list holds the row type of its request's
        kind (`LicenseRow`s for "licenses", ...), which the request value does not carry to the type checker."""
        return self.tools.retrieve(list(requests), note=self.template_id)

    @staticmethod
    def need(rows: list[Any] | None) -> list[Any]:
        if rows is None:
            raise Unknown
        return rows

    def window(self) -> Window:
        return Window.ending_at(self.today, self.p["days"])

    def day(self, name: str) -> Day:
        return dt.date.fromisoformat(str(self.p[name]))

    # -- shared building blocks ---------------------------------------------------------------------

    def spend_parts(self, *, product: str | None = None) -> tuple[list[LicenseRow], Holdings, Users,
                                                                   Memberships | None, Prices]:
        licenses, holdings, users, memberships, products, prices = self.fetch(
            Request("licenses", product=product), Request("holdings", product=product), Request("users"),
            Request("memberships"), Request("products"), Request("prices"))
        return (self.need(licenses), Holdings(self.need(holdings)), Users(users),
                None if memberships is None else Memberships(memberships), Prices(products, prices))


def spend_on(day: Day, licenses: Sequence[LicenseRow], holdings: Holdings, users: Users,
             memberships: Memberships | None, prices: Prices) -> Spend:
    """Spend on `day` (docs/rules.md, "Spend"): a license assigned on `day` to an active user whose cost center on
    `day` is C counts its product's list price on `day` in C's spend; every other license that exists on `day` counts
    in unallocated spend; a license whose product has no price that day counts nowhere."""
    by_cc: dict[str, float] = {}
    unallocated = 0.0
    for lic in sorted(licenses, key=lambda r: r.license_id):
        if lic.purchased_on > day:
            continue
        price = prices.price_on(lic.product_id, day) if prices.known else lic.unit_price_usd
        if price is None:
            continue
        holder = holdings.holder_on(lic.license_id, day)
        cc = None
        if holder is not None and users.is_active_on(holder, day) and memberships is not None:
            cc = memberships.cost_center_on(holder, day)
        if cc is None:  # without cost_center_membership no license is attributed to a cost center
            unallocated += price
        else:
            by_cc[cc] = by_cc.get(cc, 0.0) + price
    return Spend({cc: round(v, 2) for cc, v in sorted(by_cc.items())}, round(unallocated, 2))


def held_by_active(licenses: Iterable[LicenseRow], holdings: Holdings, users: Users, day: Day,
                   product: str | None = None) -> dict[str, str]:
    """License -> holder, for licenses held on `day` by users active on `day` (optionally of one product)."""
    out = {}
    for lic in licenses:
        if product is not None and lic.product_id != product:
            continue
        holder = holdings.holder_on(lic.license_id, day)
        if holder is not None and users.is_active_on(holder, day):
            out[lic.license_id] = holder
    return out


def _usage_by_license(rows: Iterable[UsageRow]) -> dict[str, UsageRow]:
    return {r.license_id: r for r in rows}


def _consumption(ctx: Context, product: str | None = None) -> list[ConsumptionRow]:
    w = ctx.window()
    [rows] = ctx.fetch(Request("consumption", first=w.first, last=w.last, product=product))
    return [r for r in ctx.need(rows) if r.day in w and (product is None or r.product_id == product)]


# ---------------------------------------------------------------------------------------------------
# plans, one per template
# ---------------------------------------------------------------------------------------------------

Plan = Callable[[Context], Value]


def _list_price(c: Context) -> Value:
    [prices] = c.fetch(Request("prices", product=c.p["product"]))
    return Prices(None, c.need(prices)).price_on(c.p["product"], c.today)


def _price_changes(c: Context) -> Value:
    [prices] = c.fetch(Request("prices"))
    w, points = c.window(), Prices(None, c.need(prices)).points
    # A product's first price point is its listing, not a change.
    return sum(1 for pts in points.values() for p in sorted(pts, key=lambda r: r.valid_from)[1:] if p.valid_from in w)


def _purchases(c: Context) -> Value:
    [licenses] = c.fetch(Request("licenses"))
    w = c.window()
    return sum(1 for r in c.need(licenses) if r.purchased_on in w)


def _ended(c: Context, ended_by: str, product: str | None = None) -> Value:
    [holdings] = c.fetch(Request("holdings", product=product))
    w = c.window()
    return sum(1 for h in c.need(holdings) if h.ended_by == ended_by and h.valid_to in w
               and (product is None or h.product_id == product))


def _unassigned(c: Context) -> Value:
    licenses, holdings = c.fetch(Request("licenses"), Request("holdings"))
    held = Holdings(c.need(holdings))
    return sum(1 for lic in c.need(licenses)
               if lic.purchased_on <= c.today and held.holder_on(lic.license_id, c.today) is None)


def _users_where(c: Context, pick: Callable[[UserRow], Day | None]) -> Value:
    [users] = c.fetch(Request("users"))
    w = c.window()
    return sum(1 for u in c.need(users) if pick(u) in w)


def _open_tickets(c: Context, keep: Callable[[TicketRow], bool]) -> Value:
    [tickets] = c.fetch(Request("tickets", product=c.p.get("product")))
    return sum(1 for t in c.need(tickets) if t.opened_on <= c.today and t.status != "resolved" and keep(t))


def _tickets_opened(c: Context) -> Value:
    [tickets] = c.fetch(Request("tickets"))
    w = c.window()
    return sum(1 for t in c.need(tickets) if t.opened_on in w)


def _vendor_field(c: Context, field_name: str) -> Value:
    [vendors] = c.fetch(Request("vendors", vendor=c.p["vendor"]))
    v = Vendors(c.need(vendors)).version_on(c.p["vendor"], c.today)
    return None if v is None else getattr(v, field_name)


def _held_change(c: Context) -> Value:
    [holdings] = c.fetch(Request("holdings"))
    held = Holdings(c.need(holdings))
    return len(held.holders_on(c.day("day2"))) - len(held.holders_on(c.day("day1")))


def _top_product_minutes(c: Context) -> Value:
    minutes: dict[str, float] = {}
    for r in _consumption(c):
        minutes[r.product_id] = minutes.get(r.product_id, 0) + r.session_minutes
    return top_of(minutes)


def _spend(c: Context, day: Day | None = None) -> Spend:
    return spend_on(day or c.today, *c.spend_parts())


def _vendor_spend(c: Context) -> Value:
    licenses, products, prices = c.fetch(Request("licenses"), Request("products"), Request("prices"))
    served = Prices(c.need(products), c.need(prices))
    total = 0.0
    for lic in sorted(c.need(licenses), key=lambda r: r.license_id):
        product = served.products.get(lic.product_id)
        if lic.purchased_on <= c.today and product is not None and product.vendor_id == c.p["vendor"]:
            price = served.price_on(lic.product_id, c.today)
            total += price if price is not None else 0.0
    return _money(total)


def _top_cost_center_in_unit(c: Context) -> Value:
    spend = _spend(c)
    [centers] = c.fetch(Request("cost_centers"))
    unit = {r.cost_center_id: r.business_unit for r in c.need(centers)}
    return top_of({cc: spend.by_cost_center.get(cc, 0.0) for cc, bu in unit.items() if bu == c.p["business_unit"]})


def _spend_change(c: Context) -> Value:
    parts = c.spend_parts()
    cc = c.p["cost_center"]
    return _money(spend_on(c.day("day2"), *parts).by_cost_center.get(cc, 0.0)
                  - spend_on(c.day("day1"), *parts).by_cost_center.get(cc, 0.0))


def _held(c: Context, product: str | None, *, with_membership: bool = False
          ) -> tuple[dict[str, str], list[LicenseRow], Memberships | None]:
    """Licenses held by active users today (optionally of one product), from the assignments and
    user_status classes (and cost_center_membership when asked)."""
    requests = [Request("licenses", product=product), Request("holdings", product=product), Request("users")]
    if with_membership:
        requests.append(Request("memberships"))
    got = c.fetch(*requests)
    licenses = c.need(got[0])
    held = held_by_active(licenses, Holdings(c.need(got[1])), Users(got[2]), c.today, product)
    return held, licenses, Memberships(c.need(got[3])) if with_membership else None


def _usage(c: Context, held: Mapping[str, str], licenses: Iterable[LicenseRow]) -> dict[str, UsageRow]:
    """Usage over the question's window of the held licenses' products (the live `utilization` class)."""
    products = tuple(sorted({lic.product_id for lic in licenses if lic.license_id in held}))
    if not products:
        return {}
    [rows] = c.fetch(Request("usage", window_days=int(c.p["days"]), products=products))
    return _usage_by_license(c.need(rows))


def _idle(held: Mapping[str, str], usage: Mapping[str, UsageRow]) -> list[str]:
    """Held licenses with no consumption record inside the window (a license the usage source does not
    list had no use)."""
    return [lid for lid in held if lid not in usage or usage[lid].active_days == 0]


def _idle_cost_center(c: Context) -> Value:
    held, licenses, memberships = _held(c, None, with_membership=True)
    assert memberships is not None
    mine = {lid: u for lid, u in held.items() if memberships.cost_center_on(u, c.today) == c.p["cost_center"]}
    return len(_idle(mine, _usage(c, mine, licenses)))


def _idle_cost(c: Context) -> Value:
    held, licenses, _ = _held(c, None)
    idle = _idle(held, _usage(c, held, licenses))
    products, prices = c.fetch(Request("products"), Request("prices"))
    served = Prices(products, prices)
    by_id = {lic.license_id: lic for lic in licenses}
    total = 0.0
    for lid in sorted(idle):
        lic = by_id[lid]
        price = served.price_on(lic.product_id, c.today) if served.known else lic.unit_price_usd
        total += price if price is not None else 0.0
    return _money(total)


def _held_product(c: Context) -> tuple[dict[str, str], dict[str, UsageRow]]:
    """The product's licenses held by active users today and their usage over the window, in one retrieval
    (a federated join: the cached classes with the live `utilization`)."""
    p = c.p["product"]
    licenses, holdings, users, usage = c.fetch(
        Request("licenses", product=p), Request("holdings", product=p), Request("users"),
        Request("usage", window_days=int(c.p["days"]), products=(p,)))
    held = held_by_active(c.need(licenses), Holdings(c.need(holdings)), Users(users), c.today, p)
    return held, _usage_by_license(c.need(usage))


def _unused_product(c: Context) -> Value:
    held, usage = _held_product(c)
    return len(_idle(held, usage))


def _zero_api_product(c: Context) -> Value:
    held, usage = _held_product(c)
    return sum(1 for lid in held if lid not in usage or usage[lid].api_calls == 0)


def _seat_utilization(c: Context) -> Value:
    held, usage = _held_product(c)
    if not held:
        return None  # no seat held: the fraction is undefined
    used = len(held) - len(_idle(held, usage))
    return round_half_up(used / len(held), 2)


def _license_holders(c: Context) -> Value:
    licenses, holdings, users = c.fetch(Request("licenses", product=c.p["product"]),
                                        Request("holdings", product=c.p["product"]), Request("users"))
    return len(held_by_active(c.need(licenses), Holdings(c.need(holdings)), Users(users), c.today, c.p["product"]))


def _active_in(c: Context, day: Day) -> int:
    users, memberships = c.fetch(Request("users"), Request("memberships"))
    served, m = Users(c.need(users)), Memberships(c.need(memberships))
    return sum(1 for u in served.active_on(day) if m.cost_center_on(u, day) == c.p["cost_center"])


def _active_change(c: Context) -> Value:
    users, memberships = c.fetch(Request("users"), Request("memberships"))
    served, m = Users(c.need(users)), Memberships(c.need(memberships))

    def count(day: Day) -> int:
        return sum(1 for u in served.active_on(day) if m.cost_center_on(u, day) == c.p["cost_center"])

    return count(c.day("day2")) - count(c.day("day1"))


def _tickets_opened_cost_center(c: Context) -> Value:
    tickets, memberships = c.fetch(Request("tickets"), Request("memberships"))
    w, m = c.window(), Memberships(c.need(memberships))
    return sum(1 for t in c.need(tickets)
               if t.opened_on in w and m.cost_center_on(t.user_id, c.today) == c.p["cost_center"])


def _tickets_opened_vendor(c: Context) -> Value:
    tickets, products = c.fetch(Request("tickets"), Request("products"))
    w = c.window()
    vendor_of = {p.product_id: p.vendor_id for p in c.need(products)}
    return sum(1 for t in c.need(tickets)
               if t.opened_on in w and t.product_id in vendor_of and vendor_of[t.product_id] == c.p["vendor"])


# -- contracts ---------------------------------------------------------------------------------------


def _contract(c: Context) -> ContractRow | None:
    [contracts] = c.fetch(Request("contracts", contract=c.p["contract"]))
    found = [r for r in c.need(contracts) if r.contract_id == c.p["contract"] and r.terms]
    # A contract recorded after today is unknown today (it cannot be, on any served day <= T).
    return found[0] if found and found[0].terms[0].recorded_on <= c.today else None


def _on_contract(fn: Callable[[Context, ContractRow], Value]) -> Plan:
    def run(c: Context) -> Value:
        contract = _contract(c)
        return None if contract is None else fn(c, contract)
    return run


def _active_contracts(c: Context) -> list[ContractRow]:
    [contracts] = c.fetch(Request("contracts"))
    return [r for r in c.need(contracts)
            if r.terms and r.terms[0].recorded_on <= c.today and contract_status(r, c.today) == "active"]


def _vendor_contract_value(c: Context) -> Value:
    return _money(sum(r.terms[-1].annual_value_usd or 0.0 for r in _active_contracts(c)
                      if r.vendor_id == c.p["vendor"]))


def _seat_gap(c: Context, contract: ContractRow) -> Value:
    committed = contract.terms[-1].committed_seats
    if committed is None:
        return None
    licenses, holdings, users = c.fetch(Request("licenses", contract=contract.contract_id),
                                        Request("holdings"), Request("users"))
    mine = [lic for lic in c.need(licenses) if lic.contract_id == contract.contract_id]
    return committed - len(held_by_active(mine, Holdings(c.need(holdings)), Users(users), c.today))


def _notice_deadline(c: Context, contract: ContractRow) -> Value:
    if contract.renewal_notice_days is None:
        return None
    return (contract.terms[-1].expires_on - dt.timedelta(days=contract.renewal_notice_days)).isoformat()


def _contract_vendor_name(c: Context, contract: ContractRow) -> Value:
    if contract.vendor_id is None:
        return None
    [vendors] = c.fetch(Request("vendors", vendor=contract.vendor_id))
    v = Vendors(c.need(vendors)).version_on(contract.vendor_id, c.today)
    return None if v is None else v.name


def _contracts_expiring(c: Context) -> Value:
    horizon = c.today + dt.timedelta(days=int(c.p["days"]))
    return sorted(r.contract_id for r in _active_contracts(c) if contract_last_day(r) <= horizon)


def _contracts_by_tier(c: Context) -> Value:
    active = _active_contracts(c)
    [vendors] = c.fetch(Request("vendors"))
    served = Vendors(c.need(vendors))
    out = []
    for r in active:
        v = served.version_on(r.vendor_id, c.today)
        if v is not None and v.tier == c.p["tier"]:
            out.append(r.contract_id)
    return sorted(out)


PLANS: dict[str, Plan] = {
    "t1_list_price": _list_price,
    "t1_price_changes": _price_changes,
    "t1_purchases": _purchases,
    "t1_reclamations": lambda c: _ended(c, "reclaimed_idle"),
    "t1_freed_by_offboarding": lambda c: _ended(c, "offboarded"),
    "t1_unassigned_licenses": _unassigned,
    "t1_offboardings": lambda c: _users_where(c, lambda u: u.offboarded_on),
    "t1_hires": lambda c: _users_where(c, lambda u: u.hired_on),
    "t1_open_tickets_product": lambda c: _open_tickets(c, lambda t: t.product_id == c.p["product"]),
    "t1_open_tickets_priority": lambda c: _open_tickets(c, lambda t: t.priority == c.p["priority"]),
    "t1_tickets_opened": _tickets_opened,
    "t1_vendor_name": lambda c: _vendor_field(c, "name"),
    "t1_vendor_tier": lambda c: _vendor_field(c, "tier"),
    "t1_reassignments_product": lambda c: _ended(c, "reassigned", c.p["product"]),
    "t1_held_licenses_change": _held_change,
    "t1_api_calls_product": lambda c: sum(r.api_calls for r in _consumption(c, c.p["product"])),
    "t1_distinct_users_product": lambda c: len({r.user_id for r in _consumption(c, c.p["product"])}),
    "t1_session_minutes_product": lambda c: sum(r.session_minutes for r in _consumption(c, c.p["product"])),
    "t1_top_product_minutes": _top_product_minutes,
    "t2_cost_center_spend": lambda c: _spend(c).by_cost_center.get(c.p["cost_center"], 0.0),
    "t2_total_spend": lambda c: _spend(c).total,
    "t2_vendor_spend": _vendor_spend,
    "t2_top_cost_center": lambda c: top_of(_spend(c).by_cost_center),
    "t2_top_cost_center_in_unit": _top_cost_center_in_unit,
    "t2_cost_centers_above": lambda c: sorted(cc for cc, v in _spend(c).by_cost_center.items()
                                              if v > c.p["threshold"]),
    "t2_spend_change_cost_center": _spend_change,
    "t2_unallocated_spend": lambda c: _spend(c).unallocated,
    "t2_idle_licenses_cost_center": _idle_cost_center,
    "t2_idle_license_cost": _idle_cost,
    "t2_unused_licenses_product": _unused_product,
    "t2_zero_api_licenses_product": _zero_api_product,
    "t2_active_users_cost_center": lambda c: _active_in(c, c.today),
    "t2_active_users_change_cost_center": _active_change,
    "t2_tickets_opened_cost_center": _tickets_opened_cost_center,
    "t2_tickets_opened_vendor": _tickets_opened_vendor,
    "t2_seat_utilization": _seat_utilization,
    "t2_license_holders_product": _license_holders,
    "t3_contract_annual_value": _on_contract(lambda c, r: r.terms[-1].annual_value_usd),
    "t3_vendor_contract_value": _vendor_contract_value,
    "t3_committed_seat_gap": _on_contract(_seat_gap),
    "t3_notice_deadline": _on_contract(_notice_deadline),
    "t3_committed_seats": _on_contract(lambda c, r: r.terms[-1].committed_seats),
    "t3_contract_status": _on_contract(lambda c, r: contract_status(r, c.today)),
    "t3_months_remaining": _on_contract(lambda c, r: whole_months(c.today, contract_last_day(r))),
    "t3_contract_vendor_name": _on_contract(_contract_vendor_name),
    "t3_contracts_expiring": _contracts_expiring,
    "t3_contracts_by_vendor_tier": _contracts_by_tier,
}


# ---------------------------------------------------------------------------------------------------
# the agent
# ---------------------------------------------------------------------------------------------------


class DeterministicAgent:
    """Parses the question, runs its template's plan against the arm's tools, formats the answer."""

    agent_id = AGENT_ID

    def answer(self, question: str, today: Day, tools: StructuredTools) -> AgentAnswer:
        try:
            parsed = parse_question(question)
        except QuestionParseError as e:
            return AgentAnswer(None, "unknown", None, parse_error=str(e))
        tmpl = parsed.template
        plan = PLANS.get(tmpl.template_id)
        if plan is None:
            raise AgentError(f"the deterministic agent has no plan for template {tmpl.template_id}")
        try:
            value = plan(Context(parsed.params, today, tools, tmpl.template_id))
        except Unknown:
            value = None
        value = tmpl.answer.normalize(value)
        return AgentAnswer(value, tmpl.answer.format(value), tmpl.template_id, dict(parsed.params))

    def answer_from_records(self, question: str, today: Day, search: RecordSearch, *,
                            by_kind: bool = True) -> AgentAnswer:
        """Answer from retrieved fact records only, by the fixed rule of `arms.extraction`. `by_kind`: search
        only the record kinds that state the template's facts (`grounding_no_source_routing`); False: one
        search over every kind (`classic_rag`, one store of everything)."""
        try:
            parsed = parse_question(question)
        except QuestionParseError as e:
            return AgentAnswer(None, "unknown", None, parse_error=str(e))
        tmpl = parsed.template
        kinds = search_kinds(tmpl.template_id)
        records = (search(question, kinds, K) if by_kind else search(question, None, K)) if kinds else []
        value = tmpl.answer.normalize(extract(tmpl.template_id, tmpl.answer.kind, parsed.params, today, records))
        return AgentAnswer(value, tmpl.answer.format(value), tmpl.template_id, dict(parsed.params))
