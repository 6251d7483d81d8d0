"""Ledger events as changes to named entities: what the analytic predictor counts.

Each format-2 record becomes a `ChangeEvent`: its kind, a tag that refines the kind where the refinement
decides whether an answer can move (`license_unassigned:reclaimed_idle`, `vendor_changed:renamed`,
`license_reassigned:across_cost_centers`, `user_offboarded:with_license`, ...), and the entity keys it
touches (`license:..`, `user:..`, `product:..`, `vendor:..`, `contract:..`, `cost_center:..`,
`business_unit:..`, `ticket:..`, and `*`). Keys that are not on the record (the cost center of a license's
holder, the cost centers holding a product whose price changed) come from a small tracker walked along
the ledger: the ledger's own history at the event's day, never anything later.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.tasks.templates import ANY
from churn_assets.world.calendar import Day


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    day: Day
    kind: str
    tag: str
    keys: frozenset[str]


def tag_matches(tag: str, moving: Iterable[str]) -> bool:
    """A moving kind matches its exact tag, or every tag of its kind when it names the bare kind."""
    kind = tag.split(":", 1)[0]
    return any(m in (tag, kind) for m in moving)


@dataclass
class _Tracker:
    """The facts the keys need, as of the record being read."""

    user_cc: dict[str, str] = field(default_factory=dict)
    cc_unit: dict[str, str] = field(default_factory=dict)
    product_vendor: dict[str, str] = field(default_factory=dict)
    license_product: dict[str, str] = field(default_factory=dict)
    license_contract: dict[str, str | None] = field(default_factory=dict)
    holder: dict[str, str] = field(default_factory=dict)  # license -> user
    held_by: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # user -> licenses
    product_licenses: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    contract_vendor: dict[str, str] = field(default_factory=dict)
    vendor_contracts: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    ticket_refs: dict[str, tuple[str, str]] = field(default_factory=dict)  # ticket -> (user, product)

    def cc_keys(self, user: str | None) -> set[str]:
        cc = self.user_cc.get(user) if user is not None else None
        if cc is None:
            return set()
        keys = {f"cost_center:{cc}"}
        unit = self.cc_unit.get(cc)
        if unit is not None:
            keys.add(f"business_unit:{unit}")
        return keys

    def license_keys(self, lid: str) -> set[str]:
        keys = {f"license:{lid}"}
        product = self.license_product.get(lid)
        if product is not None:
            keys.add(f"product:{product}")
            vendor = self.product_vendor.get(product)
            if vendor is not None:
                keys.add(f"vendor:{vendor}")
        contract = self.license_contract.get(lid)
        if contract is not None:
            keys.add(f"contract:{contract}")
        return keys

    def user_keys(self, user: str) -> set[str]:
        return {f"user:{user}"} | self.cc_keys(user)

    def with_license(self, user: str) -> str:
        return "with_license" if self.held_by.get(user) else "without_license"


def _tag_and_keys(t: _Tracker, r: Mapping[str, Any]) -> tuple[str, set[str]]:
    """The tag and keys of one record, then the tracker updated by it (keys see the state before)."""
    kind, eid, p = r["kind"], r["entity_id"], r["payload"]
    tag, keys = kind, {ANY}
    if kind == "vendor_registered":
        keys.add(f"vendor:{eid}")
    elif kind == "vendor_changed":
        tag = f"{kind}:{p['change']}"
        keys |= {f"vendor:{eid}"} | {f"contract:{c}" for c in t.vendor_contracts.get(eid, ())}
    elif kind == "cost_center_created":
        t.cc_unit[eid] = p["business_unit"]
        keys |= {f"cost_center:{eid}", f"business_unit:{p['business_unit']}"}
    elif kind == "product_listed":
        t.product_vendor[eid] = p["vendor_id"]
        keys |= {f"product:{eid}", f"vendor:{p['vendor_id']}"}
    elif kind == "price_changed":
        keys |= {f"product:{eid}", f"vendor:{t.product_vendor.get(eid)}"}
        for lid in t.product_licenses.get(eid, ()):  # cost centers whose spend holds this product
            keys |= t.cc_keys(t.holder.get(lid))
    elif kind == "user_hired":
        t.user_cc[eid] = p["cost_center_id"]
        keys |= t.user_keys(eid)
    elif kind == "user_offboarded":
        tag = f"{kind}:{t.with_license(eid)}"
        keys |= t.user_keys(eid)
        for lid in t.held_by.get(eid, ()):
            keys |= t.license_keys(lid)
    elif kind == "user_moved_cost_center":
        tag = f"{kind}:{t.with_license(eid)}"
        keys |= t.user_keys(eid)
        t.user_cc[eid] = p["to_cost_center_id"]
        keys |= t.cc_keys(eid)
    elif kind == "license_purchased":
        t.license_product[eid], t.license_contract[eid] = p["product_id"], p["contract_id"]
        t.product_licenses[p["product_id"]].add(eid)
        keys |= t.license_keys(eid)
    elif kind == "license_assigned":
        keys |= t.license_keys(eid) | t.user_keys(p["user_id"])
        t.holder[eid] = p["user_id"]
        t.held_by[p["user_id"]].add(eid)
    elif kind == "license_unassigned":
        tag = f"{kind}:{p['reason']}"
        keys |= t.license_keys(eid) | t.user_keys(p["user_id"])
        t.holder.pop(eid, None)
        t.held_by[p["user_id"]].discard(eid)
    elif kind == "license_reassigned":
        frm, to = p["from_user_id"], p["to_user_id"]
        same = t.user_cc.get(frm) is not None and t.user_cc.get(frm) == t.user_cc.get(to)
        tag = f"{kind}:{'within_cost_center' if same else 'across_cost_centers'}"
        keys |= t.license_keys(eid) | t.user_keys(frm) | t.user_keys(to)
        t.holder[eid] = to
        t.held_by[frm].discard(eid)
        t.held_by[to].add(eid)
    elif kind in ("contract_signed", "contract_renewed", "contract_expired"):
        if kind == "contract_signed":
            t.contract_vendor[eid] = p["vendor_id"]
            t.vendor_contracts[p["vendor_id"]].add(eid)
        keys |= {f"contract:{eid}", f"vendor:{t.contract_vendor.get(eid)}"}
    elif kind == "consumption_logged":
        keys |= t.license_keys(eid) | t.user_keys(p["user_id"])
    elif kind in ("ticket_opened", "ticket_status_changed", "ticket_resolved"):
        if kind == "ticket_opened":
            t.ticket_refs[eid] = (p["user_id"], p["product_id"])
        user, product = t.ticket_refs.get(eid, (None, None))
        keys |= {f"ticket:{eid}", f"product:{product}", f"vendor:{t.product_vendor.get(product or '')}"}
        if user is not None:
            keys |= t.user_keys(user)
    return tag, keys


# Kinds that never change what the tracker knows: skipped entirely unless asked for (54k of 57k records).
_STATELESS_KINDS = frozenset({"consumption_logged"})


def change_events(
    records: Iterable[Mapping[str, Any]],
    *,
    first_day: Day,
    last_day: Day,
    kinds: Collection[str] | None = None,
    format_version: int = 2,
) -> list[ChangeEvent]:
    """The change events of days `first_day` .. `last_day` (the tracker reads everything before too),
    of every kind or of `kinds` only."""
    if format_version != 2:
        raise UserFacingError(f"change events need a format-2 ledger (got format {format_version})")
    first, last = first_day.isoformat(), last_day.isoformat()
    wanted = None if kinds is None else frozenset(kinds)
    tracker = _Tracker()
    out: list[ChangeEvent] = []
    cache: dict[str, Day] = {}
    for r in records:
        at = r["at"]
        if at > last:
            break
        kind = r["kind"]
        if wanted is not None and kind not in wanted and kind in _STATELESS_KINDS:
            continue
        tag, keys = _tag_and_keys(tracker, r)
        if at >= first and (wanted is None or kind in wanted):
            day = cache.get(at) or cache.setdefault(at, dt.date.fromisoformat(at))
            out.append(ChangeEvent(day, r["kind"], tag, frozenset(keys)))
    return out
