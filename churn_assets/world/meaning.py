"""The meaning check of a ledger: every event is possible in the world the events before it made.

The hash chain proves a ledger was not changed after it was written; it says nothing about whether what was
written can happen. `MeaningChecker` takes a format-2 ledger's records in order, one at a time, and refuses the
first impossible one, naming its line:

- **the fold's own invariants** (`state.py`), by applying each record with the fold's operations
  (`fold.operations_for`): nothing created twice (a user hired twice, a license purchased twice, ...), nothing
  changed that was never created or no longer exists (a user offboarded who was never hired, a second
  offboarding, a license taken from someone who does not hold it, a price change of a product never listed, a
  contract renewed after it expired, a ticket leaving a status it is not in);
- **references across entities**, which the fold never checks (a vintage map makes them normal there, but not
  in the ledger itself): every entity an event names exists when it happens (`REFERENCES`), and the users a
  license is assigned to, or moved between cost centers, are still active.

Memory: the checker holds the fold's state of every class but the two usage classes (consumption and its
utilization index, 95% of a large world's events: each is checked for its references and kept nowhere), so a
100x world's check stays far below its exposure path. It runs while a ledger is generated
(`ledger.LedgerWriter`) and in `churnbench ledger verify`; the manifest records that it passed for the ledger's
head hash (`CHECK_VERSION`), and every loader refuses a format-2 ledger whose manifest does not (no second pass
per load). Format-1 ledgers load unverified, as before.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from churn_assets.world.fold import operations_for
from churn_assets.world.state import FoldError, WorldState

# Bump when the checks change: a manifest recording an older version is checked again (`ledger verify`,
# `churnbench migrate`).
CHECK_VERSION = 1
USAGE_CLASSES = ("consumption", "utilization")  # checked for their references only: kept nowhere

# kind -> (where the referenced id is: "entity_id" or a payload field, the entity it names, it must be active)
REFERENCES: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "product_listed": (("vendor_id", "vendor", False),),
    "user_hired": (("cost_center_id", "cost_center", False),),
    "user_moved_cost_center": (("entity_id", "user", True), ("to_cost_center_id", "cost_center", False)),
    "license_purchased": (("product_id", "product", False), ("contract_id", "contract", False)),
    "license_assigned": (("user_id", "user", True), ("product_id", "product", False)),
    "license_unassigned": (("user_id", "user", False), ("product_id", "product", False)),
    "license_reassigned": (("from_user_id", "user", False), ("to_user_id", "user", True),
                           ("product_id", "product", False)),
    "contract_signed": (("vendor_id", "vendor", False),),
    "consumption_logged": (("entity_id", "license", False), ("user_id", "user", False),
                           ("product_id", "product", False)),
    "ticket_opened": (("user_id", "user", False), ("product_id", "product", False)),
}


_OF_A_LICENSE = frozenset({"license_assigned", "license_unassigned", "license_reassigned", "consumption_logged"})


def _where(rec: Mapping[str, Any]) -> str:
    return f"seq {rec.get('seq')} ({rec['kind']} {rec.get('entity_id')} on {rec['at']})"


class MeaningError(ValueError):
    """An impossible event; `seq` names it (the caller turns it into a `LedgerError` naming the line)."""


class MeaningChecker:
    """Feed a format-2 ledger's records in order (`check`); raises `MeaningError` at the first impossible one."""

    def __init__(self) -> None:
        self.state = WorldState(vintage={})
        self.ops = operations_for(2)
        self.count = 0
        s = self.state  # the sub-states' dicts are filled in place: look them up once
        self._tables: dict[str, Mapping[str, Any]] = {
            "vendor": s.vendor_dims.vendors, "cost_center": s.cost_center_membership.cost_centers,
            "product": s.prices.products, "license": s.assignments.licenses, "contract": s.contract_terms.contracts,
        }
        self._at = ""
        self._day = dt.date.min

    def check(self, rec: Mapping[str, Any]) -> None:
        at = rec["at"]
        if at != self._at:
            self._at, self._day = at, dt.date.fromisoformat(at)
        kind = rec["kind"]
        payload = rec["payload"]
        for field, entity, active in REFERENCES.get(kind, ()):
            ref = rec["entity_id"] if field == "entity_id" else payload.get(field)
            if ref is None:
                continue  # a nullable reference (a license bought outside any contract)
            problem = self._missing(entity, ref, active)
            if problem:
                named = entity.replace("_", " ") if field == "entity_id" else field
                raise MeaningError(f"{_where(rec)}: {named} {ref}: {problem}")
        if kind in _OF_A_LICENSE:
            lic = self.state.assignments.licenses.get(rec["entity_id"])
            if lic is not None and payload.get("product_id") != lic.product_id:
                raise MeaningError(f"{_where(rec)}: product_id {payload.get('product_id')} is not the license's "
                                   f"product {lic.product_id}")
        for entity_class, apply in self.ops.get(kind, ()):
            if entity_class in USAGE_CLASSES:
                continue
            try:
                apply(self.state.of(entity_class), rec, self._day)
            except FoldError as e:
                raise MeaningError(f"{_where(rec)}: {e}") from None
        self.count += 1

    def _missing(self, entity: str, ref: str, active: bool) -> str | None:
        """Why `ref` cannot be referred to now (None: it can)."""
        if entity == "user":
            user = self.state.user_status.users.get(ref)
            if user is None:
                return "no such user (never hired)"
            if active and not user.active:
                return f"the user was offboarded on {user.offboarded_on}"
            return None
        return None if ref in self._tables[entity] else f"no such {entity.replace('_', ' ')} (never created)"
