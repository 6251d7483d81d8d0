"""Contract measures: the documents' terms (contract_terms), joined to holdings or vendors where asked.
States that follow from dates (status, months remaining) are computed today from the term dates."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from churn_assets.grounding.measures.context import Served, implements
from churn_assets.grounding.measures.served import (
    Holdings,
    Users,
    Vendors,
    contract_last_day,
    contract_status,
    held_by_active,
    money,
)
from churn_assets.grounding.rows import ContractRow, Request
from churn_assets.tasks.answers import Value
from churn_assets.world.calendar import whole_months


def _contract(s: Served, contract: str) -> ContractRow | None:
    [contracts] = s.fetch(Request("contracts", contract=contract))
    found = [r for r in s.need(contracts) if r.contract_id == contract and r.terms]
    # A contract recorded after today is unknown today (it cannot be, on any served day <= T).
    return found[0] if found and found[0].terms[0].recorded_on <= s.today else None


def _on_contract(fn: Callable[[Served, ContractRow], Value]) -> Callable[[Served, str], Value]:
    """A measure of one contract: None (unknown) when the served documents do not know it today."""
    def run(s: Served, contract: str) -> Value:
        found = _contract(s, contract)
        return None if found is None else fn(s, found)
    run.__name__ = fn.__name__
    return run


def _active_contracts(s: Served) -> list[ContractRow]:
    [contracts] = s.fetch(Request("contracts"))
    return [r for r in s.need(contracts)
            if r.terms and r.terms[0].recorded_on <= s.today and contract_status(r, s.today) == "active"]


@implements("contract_annual_value")
@_on_contract
def contract_annual_value(s: Served, c: ContractRow) -> Value:
    return c.terms[-1].annual_value_usd


@implements("committed_seats")
@_on_contract
def committed_seats(s: Served, c: ContractRow) -> Value:
    return c.terms[-1].committed_seats


@implements("contract_status")
@_on_contract
def status(s: Served, c: ContractRow) -> Value:
    return contract_status(c, s.today)


@implements("months_remaining")
@_on_contract
def months_remaining(s: Served, c: ContractRow) -> Value:
    return whole_months(s.today, contract_last_day(c))


@implements("committed_seat_gap")
@_on_contract
def committed_seat_gap(s: Served, c: ContractRow) -> Value:
    committed = c.terms[-1].committed_seats
    if committed is None:
        return None
    licenses, holdings, users = s.fetch(Request("licenses", contract=c.contract_id),
                                        Request("holdings"), Request("users"))
    mine = [lic for lic in s.need(licenses) if lic.contract_id == c.contract_id]
    return committed - len(held_by_active(mine, Holdings(s.need(holdings)), Users(users), s.today))


@implements("renewal_notice_deadline")
@_on_contract
def renewal_notice_deadline(s: Served, c: ContractRow) -> Value:
    if c.renewal_notice_days is None:
        return None
    return (c.terms[-1].expires_on - dt.timedelta(days=c.renewal_notice_days)).isoformat()


@implements("contract_vendor_name")
@_on_contract
def contract_vendor_name(s: Served, c: ContractRow) -> Value:
    if c.vendor_id is None:
        return None
    [vendors] = s.fetch(Request("vendors", vendor=c.vendor_id))
    v = Vendors(s.need(vendors)).version_on(c.vendor_id, s.today)
    return None if v is None else v.name


@implements("vendor_active_contract_value")
def vendor_active_contract_value(s: Served, vendor: str) -> Value:
    return money(sum(r.terms[-1].annual_value_usd or 0.0 for r in _active_contracts(s) if r.vendor_id == vendor))


@implements("contracts_expiring")
def contracts_expiring(s: Served, days: int) -> Value:
    horizon = s.today + dt.timedelta(days=int(days))
    return sorted(r.contract_id for r in _active_contracts(s) if contract_last_day(r) <= horizon)


@implements("contracts_by_vendor_tier")
def contracts_by_vendor_tier(s: Served, tier: str) -> Value:
    active = _active_contracts(s)
    [vendors] = s.fetch(Request("vendors"))
    served = Vendors(s.need(vendors))
    return sorted(r.contract_id for r in active
                  if (v := served.version_on(r.vendor_id, s.today)) is not None and v.tier == tier)
