"""The fold: hand-made ledgers with known answers, the walker against the fold, vintage-map states."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from ledger_records import make_ledger

from churn_assets.world import fold
from churn_assets.world.events import ENTITY_CLASSES, EVENT_KINDS, V1_EVENT_KINDS
from churn_assets.world.fold import (
    V1_OPERATIONS,
    V2_OPERATIONS,
    active_users,
    assigned_licenses,
    contracts_by_status,
    fold_ledger,
    fold_vintage,
    licenses_held_by_inactive_users,
    monthly_spend_by_cost_center,
    open_tickets,
    unassigned_licenses,
    uniform_vintage,
    walk_ledger,
)
from churn_assets.world.ledger import load_ledger
from churn_assets.world.state import FoldError, Holding, Membership

D = dt.date.fromisoformat


def _cost_center(name: str, business_unit: str) -> dict[str, Any]:
    return {"name": name, "business_unit": business_unit, "activity_weight": 1.0}


def _product(name: str, price: float) -> dict[str, Any]:
    return {"name": name, "vendor_id": "vnd_000", "license_model": "per_seat", "api_access": True,
            "list_price_usd": price, "activity_weight": 1.0}


def _consumption(user: str, product: str) -> dict[str, Any]:
    return {"user_id": user, "product_id": product, "sessions": 1, "session_minutes": 30, "api_calls": 5}


# Two cost centers, two products, three users; a price change, a move, a reassignment, an offboarding with
# its unassignment, a re-assignment of the freed seat, a ticket's lifecycle; no events on 2024-01-03.
SMALL = make_ledger(
    ("2024-01-01", "vendor_registered", "vnd_000", {"name": "Acme", "tier": "standard", "activity_weight": 1.0}),
    ("2024-01-01", "cost_center_created", "cc_000", _cost_center("Eng Core", "Engineering")),
    ("2024-01-01", "cost_center_created", "cc_001", _cost_center("Sales EMEA", "Sales")),
    ("2024-01-01", "product_listed", "prd_0000", _product("Acme CRM", 100.0)),
    ("2024-01-01", "product_listed", "prd_0001", _product("Acme Docs", 50.0)),
    ("2024-01-01", "contract_signed", "ctr_0000", {
        "vendor_id": "vnd_000", "term_months": 12, "signed_on": "2023-12-20", "effective_on": "2024-01-03",
        "expires_on": "2025-01-02", "annual_value_usd": 1500.0, "committed_seats": 2, "auto_renew": False,
        "renewal_notice_days": 30, "activity_weight": 1.0}),
    ("2024-01-01", "user_hired", "usr_000000", {"cost_center_id": "cc_000", "activity_weight": 1.0}),
    ("2024-01-01", "user_hired", "usr_000001", {"cost_center_id": "cc_001", "activity_weight": 1.0}),
    ("2024-01-01", "license_purchased", "lic_000000", {
        "product_id": "prd_0000", "contract_id": "ctr_0000", "unit_price_usd": 100.0, "activity_weight": 1.0}),
    ("2024-01-01", "license_assigned", "lic_000000", {"user_id": "usr_000000", "product_id": "prd_0000"}),
    ("2024-01-01", "license_purchased", "lic_000001", {
        "product_id": "prd_0001", "contract_id": None, "unit_price_usd": 50.0, "activity_weight": 1.0}),
    ("2024-01-01", "license_assigned", "lic_000001", {"user_id": "usr_000001", "product_id": "prd_0001"}),
    ("2024-01-02", "price_changed", "prd_0000", {
        "list_price_usd": 120.0, "previous_list_price_usd": 100.0, "reason": "list_price_increase"}),
    ("2024-01-02", "user_moved_cost_center", "usr_000001", {
        "from_cost_center_id": "cc_001", "to_cost_center_id": "cc_000"}),
    ("2024-01-02", "ticket_opened", "tkt_000000", {
        "user_id": "usr_000000", "product_id": "prd_0000", "priority": "high", "status": "open"}),
    ("2024-01-02", "consumption_logged", "lic_000000", _consumption("usr_000000", "prd_0000")),
    ("2024-01-04", "user_hired", "usr_000002", {"cost_center_id": "cc_001", "activity_weight": 1.0}),
    ("2024-01-04", "license_reassigned", "lic_000000", {
        "from_user_id": "usr_000000", "to_user_id": "usr_000002", "product_id": "prd_0000"}),
    ("2024-01-04", "user_offboarded", "usr_000001", {"reason": "voluntary"}),
    ("2024-01-04", "license_unassigned", "lic_000001", {
        "user_id": "usr_000001", "product_id": "prd_0001", "reason": "offboarded"}),
    ("2024-01-04", "ticket_status_changed", "tkt_000000", {"status": "in_progress", "previous_status": "open"}),
    ("2024-01-05", "vendor_changed", "vnd_000", {
        "change": "renamed", "name": "Big Acme", "tier": "standard", "previous_name": "Acme",
        "previous_tier": "standard"}),
    ("2024-01-05", "license_assigned", "lic_000001", {"user_id": "usr_000000", "product_id": "prd_0001"}),
    ("2024-01-05", "ticket_resolved", "tkt_000000", {"status": "resolved", "previous_status": "in_progress"}),
    ("2024-01-05", "consumption_logged", "lic_000001", _consumption("usr_000000", "prd_0001")),
)


# --- the operation tables -----------------------------------------------------------------------------


def test_every_kind_has_operations_on_exactly_its_classes() -> None:
    for table, kinds in ((V2_OPERATIONS, EVENT_KINDS), (V1_OPERATIONS, V1_EVENT_KINDS)):
        assert set(table) == set(kinds)
        for name, steps in table.items():
            classes = {c for c, _ in steps}
            derived = {"utilization"} if name == "consumption_logged" else set()
            assert classes == set(kinds[name].classes) | derived, name
            assert classes <= set(ENTITY_CLASSES)


# --- a hand-made ledger with known answers --------------------------------------------------------------


@pytest.mark.parametrize(("day", "by_cc", "unallocated"), [
    ("2024-01-01", {"cc_000": 100.0, "cc_001": 50.0}, 0.0),
    ("2024-01-02", {"cc_000": 170.0}, 0.0),            # price 100 -> 120; usr_000001 moved to cc_000
    ("2024-01-03", {"cc_000": 170.0}, 0.0),            # no events
    ("2024-01-04", {"cc_001": 120.0}, 50.0),           # reassigned to usr_000002; lic_000001 freed
    ("2024-01-05", {"cc_000": 50.0, "cc_001": 120.0}, 0.0),
])
def test_spend_follows_holder_cost_center_and_current_list_price(
        day: str, by_cc: dict[str, float], unallocated: float) -> None:
    spend = monthly_spend_by_cost_center(fold_ledger(SMALL, day), day)
    assert spend.by_cost_center == by_cc
    assert spend.unallocated == unallocated
    assert spend.total == round(sum(by_cc.values()) + unallocated, 2)


def test_small_world_current_facts_and_history() -> None:
    s = fold_ledger(SMALL, "2024-01-04")
    assert s.events_applied == 21
    assert active_users(s) == {"usr_000000", "usr_000002"}
    assert assigned_licenses(s) == {"lic_000000": "usr_000002"}
    assert unassigned_licenses(s) == {"lic_000001"}
    assert s.assignments.licenses["lic_000000"].holdings == [
        Holding("usr_000000", D("2024-01-01"), D("2024-01-04"), "reassigned"),
        Holding("usr_000002", D("2024-01-04")),
    ]
    assert s.cost_center_membership.memberships["usr_000001"] == [
        Membership("cc_001", D("2024-01-01"), D("2024-01-02")), Membership("cc_000", D("2024-01-02"))]
    assert s.user_status.users["usr_000001"].offboarded_on == D("2024-01-04")
    product = s.prices.products["prd_0000"]
    assert (product.list_price_on(D("2024-01-01")), product.list_price_usd) == (100.0, 120.0)
    # History answers earlier days from the later state, the same as folding to that day.
    assert assigned_licenses(s, "2024-01-02") == assigned_licenses(fold_ledger(SMALL, "2024-01-02"))
    assert open_tickets(s) == {"tkt_000000"}
    assert s.tickets.tickets["tkt_000000"].status == "in_progress"
    later = fold_ledger(SMALL, "2024-01-05")
    assert open_tickets(later) == set()
    assert [v.name for v in later.vendor_dims.vendors["vnd_000"].history] == ["Acme", "Big Acme"]
    assert s.vendor_dims.vendors["vnd_000"].name == "Acme"


def test_contract_status_comes_from_dates_at_the_anchor() -> None:
    s = fold_ledger(SMALL, "2024-01-05")
    assert contracts_by_status(s, "2024-01-02")["pending"] == ["ctr_0000"]
    assert contracts_by_status(s, "2024-01-03")["active"] == ["ctr_0000"]
    assert contracts_by_status(s, "2025-01-02")["active"] == ["ctr_0000"]
    assert contracts_by_status(s, "2025-01-03")["expired"] == ["ctr_0000"]


def test_walker_yields_every_day_including_days_without_events() -> None:
    days = []
    for day, state in walk_ledger(SMALL, end="2024-01-07"):
        assert state == fold_ledger(SMALL, day), day
        days.append(day.isoformat())
    assert days == [f"2024-01-0{i}" for i in range(1, 8)]
    assert [d for d, _ in walk_ledger(SMALL, end="2024-01-02")] == [D("2024-01-01"), D("2024-01-02")]


def test_vintage_state_resolves_unknown_references_as_absent() -> None:
    # Assignments served as of 01-04 know lic_000000 went to usr_000002; user_status served as of 01-02 does
    # not know usr_000002 yet, and still has usr_000001 active.
    vintage = {**uniform_vintage("2024-01-05"), "user_status": D("2024-01-02"),
               "assignments": D("2024-01-04"), "prices": D("2024-01-01")}
    s = fold_vintage(SMALL, vintage)
    assert assigned_licenses(s) == {}
    assert licenses_held_by_inactive_users(s) == {"lic_000000": "usr_000002"}
    assert active_users(s) == {"usr_000000", "usr_000001"}
    spend = monthly_spend_by_cost_center(s, "2024-01-05")  # the question stays anchored at T
    assert spend.by_cost_center == {}
    assert spend.unallocated == 150.0  # prices as served on 01-01: 100 + 50
    for entity_class, day in vintage.items():
        assert s.of(entity_class) == fold_ledger(SMALL, day).of(entity_class), entity_class


def test_inconsistent_ledgers_are_refused_with_the_event_named() -> None:
    bad = [*SMALL, {**SMALL[9], "seq": 99, "at": "2024-01-06", "payload": {
        "user_id": "usr_000002", "product_id": "prd_0000"}}]
    with pytest.raises(FoldError, match=r"seq 99 \(license_assigned lic_000000 on 2024-01-06\).*held by"):
        fold_ledger(bad, "2024-01-06")
    backwards = [*SMALL, {**SMALL[-1], "seq": 100, "at": "2024-01-01"}]
    with pytest.raises(FoldError, match="goes backwards"):
        fold_ledger(backwards, "2024-01-06")
    with pytest.raises(FoldError, match="missing tickets"):
        fold_vintage(SMALL, {c: "2024-01-01" for c in ENTITY_CLASSES if c != "tickets"})
    with pytest.raises(FoldError, match="unknown event kind"):
        fold_ledger([{**SMALL[0], "kind": "contract_expired"}], "2024-01-01", format_version=1)


# --- the default world -------------------------------------------------------------------------------


def default_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default 180-day world, generated once per test session (shared by the test modules)."""
    from churn_assets.world.config import load_config
    from churn_assets.world.simulator import generate_ledger

    out = tmp_path_factory.getbasetemp() / "default-world"
    if not (out / "manifest.json").exists():
        generate_ledger(load_config(), out)
    return out


@pytest.fixture(scope="module")
def world_records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return load_ledger(default_world(tmp_path_factory)).records


CHECK_DAYS = ("2024-01-01", "2024-02-14", "2024-03-29", "2024-04-26", "2024-04-27", "2024-06-28")


@pytest.fixture(scope="module")
def folds(world_records: list[dict[str, Any]]) -> dict[str, Any]:
    return {d: fold_ledger(world_records, d) for d in CHECK_DAYS}


def test_fold_equals_the_walker_on_the_default_world(
        world_records: list[dict[str, Any]], folds: dict[str, Any]) -> None:
    seen = []
    days = 0
    for day, state in walk_ledger(world_records):
        days += 1
        # A consistent ledger ends every day with no license held by an offboarded user.
        assert licenses_held_by_inactive_users(state) == {}, day
        if day.isoformat() in folds:
            assert state == folds[day.isoformat()], day
            seen.append(day.isoformat())
    assert seen == list(CHECK_DAYS)
    assert days == 180


def test_vintage_map_state_equals_the_per_class_folds(
        world_records: list[dict[str, Any]], folds: dict[str, Any]) -> None:
    # A D+28-like served map: hot classes at T', warm and cold classes refreshed on other days, live at T.
    vintage = {
        "assignments": "2024-03-29", "user_status": "2024-04-26", "prices": "2024-04-27",
        "cost_center_membership": "2024-02-14", "contract_terms": "2024-01-01", "vendor_dims": "2024-06-28",
        "consumption": "2024-04-27", "utilization": "2024-04-26", "tickets": "2024-03-29",
    }
    state = fold_vintage(world_records, vintage)
    assert state.vintage == {c: D(d) for c, d in vintage.items()}
    for entity_class, day in vintage.items():
        assert state.of(entity_class) == folds[day].of(entity_class), entity_class
    # An event counts once if it reached any class: vendor events to the last day, others to T at most.
    expected = sum(1 for r in world_records if any(
        r["at"] <= vintage[c] for c in (*EVENT_KINDS[r["kind"]].classes, "utilization")
        if c != "utilization" or r["kind"] == "consumption_logged"))
    assert state.events_applied == expected


def test_spend_splits_every_existing_license(folds: dict[str, Any]) -> None:
    for day, state in folds.items():
        spend = monthly_spend_by_cost_center(state, day)
        prices = [state.prices.products[lic.product_id].list_price_on(D(day))
                  for lic in state.assignments.licenses.values()]
        assert spend.unpriced_licenses == ()
        assert spend.total == pytest.approx(sum(prices), abs=0.02), day
        assert spend.allocated > 0


def test_recorded_expiries_agree_with_the_dates(folds: dict[str, Any]) -> None:
    contracts = folds["2024-06-28"].contract_terms.contracts.values()
    expired = [c for c in contracts if c.expired_on is not None]
    assert expired, "the default world expires some contracts"
    for c in expired:
        assert c.status_on(c.expired_on) == "expired"
        assert c.status_on(c.expired_on - dt.timedelta(days=1)) == "active"


def test_query_helpers_accept_iso_days(folds: dict[str, Any]) -> None:
    s = folds["2024-04-27"]
    assert fold.active_users(s, "2024-04-27") == fold.active_users(s, D("2024-04-27")) == fold.active_users(s)
