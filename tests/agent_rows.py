"""Test helper: the rows a store would serve, built from a fold state (tests may fold; arms may not).

`StateTools(state, today)` answers the deterministic agent's requests from a state folded at a vintage
map: each class's rows are that class's facts as of its own day (a later end is not known yet), exactly
what a staged copy, an as-of view or the SaaS API serves. It lets the agent be checked against gold on
generated worlds without any service.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

from churn_assets.grounding.rows import (
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
)
from churn_assets.world.state import WorldState


def _intervals(points: Sequence[dt.date]) -> list[tuple[dt.date, dt.date | None]]:
    return [(d, points[i + 1] if i + 1 < len(points) else None) for i, d in enumerate(points)]


class StateTools:
    """Serves requests from a (vintage-map) fold state; `unavailable` classes answer None."""

    def __init__(self, state: WorldState, today: dt.date, unavailable: Collection[str] = ()) -> None:
        self.s = state
        self.today = today
        self.unavailable = set(unavailable)
        self.requests: list[Request] = []

    def retrieve(self, requests: Sequence[Request], note: str = "") -> list[list[Row] | None]:
        self.requests.extend(requests)
        return [None if r.entity_class in self.unavailable else self.rows(r) for r in requests]

    def rows(self, r: Request) -> list[Row]:
        s = self.s
        if r.view == "users":
            return [UserRow(u.user_id, u.hired_on, u.offboarded_on) for u in s.user_status.users.values()]
        if r.view == "memberships":
            return [MembershipRow(uid, m.cost_center_id, m.valid_from, m.valid_to)
                    for uid, ms in s.cost_center_membership.memberships.items() for m in ms]
        if r.view == "cost_centers":
            return [CostCenterRow(c.cost_center_id, c.business_unit)
                    for c in s.cost_center_membership.cost_centers.values()]
        if r.view == "licenses":
            return [LicenseRow(lic.license_id, lic.product_id, lic.purchased_on, lic.contract_id, lic.unit_price_usd)
                    for lic in s.assignments.licenses.values()
                    if (r.product is None or lic.product_id == r.product)
                    and (r.contract is None or lic.contract_id == r.contract)]
        if r.view == "holdings":
            return [HoldingRow(lic.license_id, lic.product_id, h.user_id, h.valid_from, h.valid_to, h.ended_by)
                    for lic in s.assignments.licenses.values() if r.product is None or lic.product_id == r.product
                    for h in lic.holdings]
        if r.view == "products":
            return [ProductRow(p.product_id, p.vendor_id, p.listed_on) for p in s.prices.products.values()]
        if r.view == "prices":
            out: list[Row] = []
            for p in s.prices.products.values():
                if r.product is not None and p.product_id != r.product:
                    continue
                spans = _intervals([pt.valid_from for pt in p.price_history])
                out.extend(PriceRow(p.product_id, pt.list_price_usd, a, b)
                           for pt, (a, b) in zip(p.price_history, spans, strict=True))
            return out
        if r.view == "vendors":
            out = []
            for v in s.vendor_dims.vendors.values():
                if r.vendor is not None and v.vendor_id != r.vendor:
                    continue
                spans = _intervals([ver.valid_from for ver in v.history])
                out.extend(VendorRow(v.vendor_id, ver.name, ver.tier, a, b)
                           for ver, (a, b) in zip(v.history, spans, strict=True))
            return out
        if r.view == "contracts":
            return [ContractRow(c.contract_id, c.vendor_id, c.renewal_notice_days,
                                tuple(TermRow(t.recorded_on, t.effective_on, t.expires_on, t.annual_value_usd,
                                              t.committed_seats) for t in c.terms))
                    for c in s.contract_terms.contracts.values() if r.contract is None or c.contract_id == r.contract]
        if r.view == "consumption":
            assert r.first is not None and r.last is not None
            return [ConsumptionRow(c.day, c.user_id, c.product_id, c.license_id, c.session_minutes, c.api_calls)
                    for c in s.consumption.records
                    if r.first <= c.day <= r.last and (r.product is None or c.product_id == r.product)]
        if r.view == "usage":
            assert r.window_days is not None
            first = self.today - dt.timedelta(days=r.window_days - 1)
            out = []
            for lic in s.assignments.licenses.values():
                if r.products is not None and lic.product_id not in r.products:
                    continue
                used = [c for c in s.utilization.by_license.get(lic.license_id, ()) if first <= c.day <= self.today]
                out.append(UsageRow(lic.license_id, lic.product_id, r.window_days, len({c.day for c in used}),
                                    sum(c.api_calls for c in used)))
            return out
        if r.view == "tickets":
            out = []
            for t in s.tickets.tickets.values():
                status = t.status_on(self.today)
                if status is not None and (r.product is None or t.product_id == r.product):
                    out.append(TicketRow(t.ticket_id, t.user_id, t.product_id, t.priority, t.opened_on, status))
            return out
        raise AssertionError(r.view)
