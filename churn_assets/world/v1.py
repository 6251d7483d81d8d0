"""Format-1 (ChurnBench v1) records read into the fold's operations.

The reference's ledger replays through the same fold as ours, with the same table of operations per kind
(`fold.V1_OPERATIONS`: format 2's, for the kinds format 1 has); only the payload reading differs, in the appliers
here, each named after the format-2 one it stands in for. Its
payloads carry their own fields and nothing else, so facts they lack stay empty (no product names,
vendors by index, no cost-center reference data, no license on a consumption event, no sessions).

Semantics, chosen to reproduce the reference's own figures and checked against its complete ledger
(`tests/test_v1_import.py`):

- "As of T" includes every event of day T (`at <= T`): 37,259 events at 2024-04-27 and 28,324 at
  2024-03-29. Excluding day T gives 36,952 and 28,015 (and 439 / 423 active users): not theirs.
- Active users = hired on or before T and not offboarded on or before T: 440 and 422.
- An assigned license = one with an active holder on T: 69 and 96. In this ledger "has a holder at all"
  gives the same figures, because the reference unassigns every license of a leaving user on the day of
  the offboarding, just before it (all 170 unassignments, reason "offboard", for 116 leavers; the other
  121 leavers held nothing), and no reassignment names an inactive user on either side. So the rule of docs/rules.md,
  "Absent references" (a license held by an inactive or unknown user is not an active user's license) costs nothing
  here, and reassignments never change the count: only assignments (200, all on day 0) and unassignments (131 and 104
  by T) do. That is the "drained pool" of docs/reference.md: 200 - 131 = 69, 200 - 104 = 96.
- `license_reassigned {from, to}` moves the holder; `from` must be the current holder, as it is in
  every record of the reference's ledger.
- `user_moved_cost_center {cost_center_id}` names only the new cost center.
- `price_changed` on a product not seen before lists it (the reference's day-0 "initial" prices);
  later ones change the list price. `license_purchased.unit_price_usd` is the purchase price, which
  docs/rules.md, "Spend" never uses (the reference did, which is why its spend ignored price changes).
- Contracts: `contract_signed {vendor_idx, term_months}` is signed and effective on its day and runs
  `term_months` months (last day inclusive, as in format 2: 2024-01-01 + 12 months runs to 2024-12-31).
  `contract_renewed {term_months}` starts a new term on the renewal day (the reference renews at random
  days, even on the day of signing, so stacking terms after the old expiry would be no truer). No
  reference figure depends on this: no v1 term ends inside the 180 days under either reading.
- `consumption_logged` names a user, not a license: consumption is indexed by (user, product).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from churn_assets.world.calendar import Day, add_months
from churn_assets.world.state import (
    Assignments,
    ConsumptionRecord,
    Contract,
    ContractTerm,
    ContractTerms,
    CostCenterMembership,
    License,
    PricePoint,
    Prices,
    Product,
    UserStatus,
)

Record = Mapping[str, Any]


def term_from(day: Day, term_months: int, recorded_on: Day, change: str) -> ContractTerm:
    """A term effective on `day` whose last day is the day before `term_months` months later."""
    expires_on = add_months(day, term_months) - dt.timedelta(days=1)
    return ContractTerm(recorded_on, change, term_months, day, expires_on)


def price_changed(s: Prices, r: Record, day: Day) -> None:
    p = r["payload"]
    reason = p.get("reason")
    if r["entity_id"] not in s.products:
        s.list_product(Product(r["entity_id"], day, [PricePoint(day, p["unit_price_usd"], reason)]))
    else:
        s.change_price(r["entity_id"], p["unit_price_usd"], day, reason)


def contract_signed(s: ContractTerms, r: Record, day: Day) -> None:
    p = r["payload"]
    s.sign(Contract(r["entity_id"], None, day, [term_from(day, p["term_months"], day, "signed")],
                    vendor_idx=p["vendor_idx"]))


def contract_renewed(s: ContractTerms, r: Record, day: Day) -> None:
    s.renew(r["entity_id"], term_from(day, r["payload"]["term_months"], day, "renewed"))


def user_offboarded(s: UserStatus, r: Record, day: Day) -> None:
    s.offboard(r["entity_id"], day, None)


def user_moved(s: CostCenterMembership, r: Record, day: Day) -> None:
    s.move(r["entity_id"], r["payload"]["cost_center_id"], day, None)


def license_purchased(s: Assignments, r: Record, day: Day) -> None:
    p = r["payload"]
    s.purchase(License(r["entity_id"], p["product_id"], day, p["unit_price_usd"], None, seats=p["seats"]))


def license_assigned(s: Assignments, r: Record, day: Day) -> None:
    s.assign(r["entity_id"], r["payload"]["to"], day)


def license_unassigned(s: Assignments, r: Record, day: Day) -> None:
    p = r["payload"]
    s.unassign(r["entity_id"], p["prev_holder"], day, p["reason"])


def license_reassigned(s: Assignments, r: Record, day: Day) -> None:
    p = r["payload"]
    s.reassign(r["entity_id"], p["from"], p["to"], day)


def consumption_record(r: Record, day: Day) -> ConsumptionRecord:
    p = r["payload"]
    return ConsumptionRecord(day, r["entity_id"], p["product_id"], None, None, p["session_minutes"],
                             p["api_calls"])
