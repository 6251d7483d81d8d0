"""The facts a contract document states: plain types, shared by rendering, parsing and the agents that read
documents. No fold here: arms parse documents through `contracts.parse`, which must not reach the ledger's
fold (docs/rules.md, "Arm isolation"); `contracts.facts` builds these facts from the fold.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

from churn_assets.world.calendar import Day


class ProductRef(NamedTuple):
    product_id: str
    name: str | None


@dataclass(frozen=True)
class TermFacts:
    """One term of a contract: the signed term, then one per renewal, in the order recorded."""

    change: str  # "signed" or "renewed"
    recorded_on: Day  # the day the ledger recorded the signing or renewal
    term_months: int
    effective_on: Day
    expires_on: Day  # last day of the term (inclusive)
    annual_value_usd: float | None
    committed_seats: int | None


@dataclass(frozen=True)
class ContractFacts:
    """Everything one contract document states, as of the document's day."""

    contract_id: str
    vendor_id: str | None
    vendor_name: str | None
    vendor_tier: str | None
    products: tuple[ProductRef, ...]
    signed_on: Day
    auto_renew: bool | None
    renewal_notice_days: int | None
    terms: tuple[TermFacts, ...]
    expired_on: Day | None  # the day the ledger recorded the expiry, when it has by the document's day
    status: str  # "pending", "active" or "expired" on the document's day (informative only)

    @property
    def current_term(self) -> TermFacts:
        return self.terms[-1]

    @property
    def first_term(self) -> TermFacts:
        return self.terms[0]

    @property
    def renewals(self) -> tuple[TermFacts, ...]:
        return self.terms[1:]

    @property
    def recorded_on(self) -> Day:
        """The last day the ledger changed this contract's terms (signing, renewal or expiry)."""
        days = [t.recorded_on for t in self.terms]
        if self.expired_on is not None:
            days.append(self.expired_on)
        return max(days)

    def diff(self, other: ContractFacts) -> list[str]:
        """Names of the fields that differ from `other` (empty when equal); for readable check failures."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(other, f.name)]
