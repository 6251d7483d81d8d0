"""Served rows, indexed: the fold's queries re-done over what the router returned.

Each index is built from the rows of one view as served (history included, a data day's facts only) and
answers the questions the measures ask at a day. None rows mean the arm did not serve the class; the index
then applies the documented fallback (docs/arms.md, "The deterministic agent").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from churn_assets.grounding.rows import (
    ContractRow,
    HoldingRow,
    LicenseRow,
    MembershipRow,
    PriceRow,
    ProductRow,
    UsageRow,
    UserRow,
    VendorRow,
    holds_on,
)
from churn_assets.tasks.answers import last_day, round_half_up
from churn_assets.world.calendar import Day


def money(value: float) -> float:
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


def usage_by_license(rows: Iterable[UsageRow]) -> dict[str, UsageRow]:
    return {r.license_id: r for r in rows}


def idle(held: Mapping[str, str], usage: Mapping[str, UsageRow]) -> list[str]:
    """Held licenses with no consumption record inside the window (a license the usage source does not
    list had no use)."""
    return [lid for lid in held if lid not in usage or usage[lid].active_days == 0]
