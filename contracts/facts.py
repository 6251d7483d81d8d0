"""The contract facts a document shows, taken from a fold state as of a day.

Contract documents are the contract system of record (docs/rules.md, "Contract documents"): the terms below
(vendor, term, expiry, annual value, committed seats, renewal clauses) are loaded into no other store.
Every fact comes from the sub-state of the class that owns it (docs/rules.md, "Which class owns which fact"): terms,
renewals and expiries from `contract_terms`, the vendor's name and tier from `vendor_dims`, the vendor's products from
`prices` (where products are listed).

The status is derived from the term dates at the document's day with the fold's own rule
(`Contract.status_on`). It is informative only: gold and agents derive a status at the question's
anchor from the dates (docs/rules.md, "Gold"), never from a rendered status line.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from churn_assets.world.calendar import Day
from churn_assets.world.events import SCHEMAS_BY_FORMAT
from churn_assets.world.fold import fold_ledger
from churn_assets.world.state import Contract, WorldState
from contracts.model import ContractFacts, ProductRef, TermFacts

# The classes a document reads. Folding only their events gives the same contract facts as folding the
# whole ledger (a class's facts depend on its own events only: docs/rules.md, "Which class owns which fact"), at a
# fraction of the cost: a 180-day ledger has ~57k events, of which ~200 touch these classes.
DOCUMENT_CLASSES: frozenset[str] = frozenset({"contract_terms", "vendor_dims", "prices"})


def document_records(records: Iterable[Mapping[str, Any]], *, format_version: int = 2
                     ) -> list[Mapping[str, Any]]:
    """The records whose kinds change a class documents read, in ledger order."""
    kinds = SCHEMAS_BY_FORMAT[format_version]
    wanted = {name for name, kind in kinds.items() if DOCUMENT_CLASSES.intersection(kind.classes)}
    return [r for r in records if r["kind"] in wanted]


def contract_facts(state: WorldState, day: Day) -> list[ContractFacts]:
    """The facts of every contract the ledger has recorded by `day`, sorted by contract id.

    `state` is a fold as of `day`, or any state whose contract, vendor and product classes are at least
    as late: anything recorded after `day` is left out, so the result holds no date recorded later.
    """
    out = []
    for cid in sorted(state.contract_terms.contracts):
        contract = state.contract_terms.contracts[cid]
        if contract.terms[0].recorded_on > day:
            continue
        out.append(_facts_of(state, contract, day))
    return out


def contract_facts_as_of(records: Sequence[Mapping[str, Any]], day: Day | str, *, format_version: int = 2
                         ) -> list[ContractFacts]:
    """Fold the ledger's document classes as of `day` and take the contract facts of that day."""
    anchor = day if isinstance(day, dt.date) else dt.date.fromisoformat(day)
    state = fold_ledger(document_records(records, format_version=format_version), anchor,
                        format_version=format_version)
    return contract_facts(state, anchor)


def _facts_of(state: WorldState, contract: Contract, day: Day) -> ContractFacts:
    kept = [t for t in contract.terms if t.recorded_on <= day]
    terms = tuple(TermFacts(t.change, t.recorded_on, t.term_months, t.effective_on, t.expires_on,
                            t.annual_value_usd, t.committed_seats) for t in kept)
    # The fold's own status rule, applied to the terms known on `day` only.
    status = dataclasses.replace(contract, terms=kept).status_on(day)
    expired_on = contract.expired_on if contract.expired_on is not None and contract.expired_on <= day else None

    vendor_name = vendor_tier = None
    vendor = state.vendor_dims.vendors.get(contract.vendor_id) if contract.vendor_id is not None else None
    version = vendor.version_on(day) if vendor is not None else None
    if version is not None:
        vendor_name, vendor_tier = version.name, version.tier
    products: tuple[ProductRef, ...] = ()
    if contract.vendor_id is not None:
        products = tuple(ProductRef(p.product_id, p.name) for pid, p in sorted(state.prices.products.items())
                         if p.vendor_id == contract.vendor_id and p.listed_on <= day)
    return ContractFacts(
        contract_id=contract.contract_id,
        vendor_id=contract.vendor_id,
        vendor_name=vendor_name,
        vendor_tier=vendor_tier,
        products=products,
        signed_on=contract.signed_on,
        auto_renew=contract.auto_renew,
        renewal_notice_days=contract.renewal_notice_days,
        terms=terms,
        expired_on=expired_on,
        status=status,
    )
