"""The reference's (ChurnBench v1) ledger loads through our loader and replays to its own figures."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest

from churn_assets.world.fold import (
    active_users,
    assigned_licenses,
    fold_ledger,
    license_holders,
    monthly_spend_by_cost_center,
    walk_ledger,
)
from churn_assets.world.ledger import LoadedLedger, file_sha256, load_ledger
from churn_assets.world.state import WorldState
from churn_assets.world.stats import stats_of

# The reference's own ledger is not part of this repository (its licence is not stated): the checks of its figures
# run where CHURNBENCH_REFERENCE_DIR names the folder holding `churnbench-v1-ledger.jsonl.gz`, and skip, saying so,
# elsewhere. The hand-made format-1 records below run everywhere.
REFERENCE_DIR = Path(os.environ["CHURNBENCH_REFERENCE_DIR"]) if os.environ.get("CHURNBENCH_REFERENCE_DIR") else None
REFERENCE_LEDGER = REFERENCE_DIR / "churnbench-v1-ledger.jsonl.gz" if REFERENCE_DIR else None
REFERENCE_SHA256 = "4c49ac0318ef4739eeaaf1d01912c9fb9abfd1a9cdce311ba6d7c2027c6680e9"

# The reference's own figures (docs/reference.md; the paper's T and the D+28 T').
FIGURES = [
    ("2024-04-27", 37_259, 440, 69),
    ("2024-03-29", 28_324, 422, 96),
]

D = dt.date.fromisoformat


def v1_record(seq: int, at: str, kind: str, entity_type: str, entity_id: str, **payload: Any) -> dict[str, Any]:
    return {"seq": seq, "at": at, "kind": kind, "entity_type": entity_type, "entity_id": entity_id,
            "payload": payload}


def test_hand_made_v1_records_translate_into_the_fold() -> None:
    records = [
        v1_record(0, "2024-01-01", "price_changed", "product", "prd_0000", unit_price_usd=100.0,
                  reason="initial"),
        v1_record(1, "2024-01-01", "contract_signed", "contract", "ctr_0000", vendor_idx=3, term_months=12),
        v1_record(2, "2024-01-01", "user_hired", "user", "usr_000000", cost_center_id="cc_001"),
        v1_record(3, "2024-01-01", "user_hired", "user", "usr_000001", cost_center_id="cc_002"),
        v1_record(4, "2024-01-01", "license_purchased", "license", "lic_000000", product_id="prd_0000",
                  seats=1, unit_price_usd=100.0),
        v1_record(5, "2024-01-01", "license_assigned", "license", "lic_000000", to="usr_000000",
                  product_id="prd_0000"),
        v1_record(6, "2024-01-02", "license_reassigned", "license", "lic_000000", **{
            "from": "usr_000000", "to": "usr_000001"}),
        v1_record(7, "2024-01-02", "price_changed", "product", "prd_0000", unit_price_usd=110.0,
                  prev_price=100.0, pct_change=0.1),
        v1_record(8, "2024-01-02", "user_moved_cost_center", "user", "usr_000001", cost_center_id="cc_003"),
        v1_record(9, "2024-01-02", "consumption_logged", "user", "usr_000001", product_id="prd_0000",
                  session_minutes=10, api_calls=3),
        v1_record(10, "2024-01-03", "license_unassigned", "license", "lic_000000", prev_holder="usr_000001",
                  reason="offboard"),
        v1_record(11, "2024-01-03", "user_offboarded", "user", "usr_000001"),
        v1_record(12, "2024-01-03", "contract_renewed", "contract", "ctr_0000", term_months=24),
    ]
    s2 = fold_ledger(records, "2024-01-02", format_version=1)
    assert assigned_licenses(s2) == {"lic_000000": "usr_000001"}
    assert monthly_spend_by_cost_center(s2, "2024-01-02").by_cost_center == {"cc_003": 110.0}
    assert s2.utilization.last_used_on(user_id="usr_000001", product_id="prd_0000") == D("2024-01-02")
    contract = s2.contract_terms.contracts["ctr_0000"]
    assert (contract.vendor_idx, contract.current_term.effective_on, contract.current_term.expires_on) == (
        3, D("2024-01-01"), D("2024-12-31"))
    s3 = fold_ledger(records, "2024-01-03", format_version=1)
    assert assigned_licenses(s3) == {}
    assert active_users(s3) == {"usr_000000"}
    renewed = s3.contract_terms.contracts["ctr_0000"].current_term
    assert (renewed.effective_on, renewed.expires_on) == (D("2024-01-03"), D("2026-01-02"))
    assert [d for d, _ in walk_ledger(records, format_version=1)] == [
        D("2024-01-01"), D("2024-01-02"), D("2024-01-03")]


@pytest.fixture(scope="module")
def reference() -> LoadedLedger:
    if REFERENCE_LEDGER is None or not REFERENCE_LEDGER.exists():
        pytest.skip("the reference (ChurnBench v1) ledger is not in this repository: set CHURNBENCH_REFERENCE_DIR "
                    "to the folder holding churnbench-v1-ledger.jsonl.gz to check its figures")
    return load_ledger(REFERENCE_LEDGER)


def test_reference_ledger_loads_as_format_1_unverified(reference: LoadedLedger) -> None:
    assert (reference.count, reference.format_version, reference.verified) == (56_370, 1, False)
    assert REFERENCE_LEDGER is not None and file_sha256(REFERENCE_LEDGER) == REFERENCE_SHA256
    assert (reference.first_day, reference.last_day) == ("2024-01-01", "2024-06-28")


@pytest.fixture(scope="module")
def reference_folds(reference: LoadedLedger) -> dict[str, WorldState]:
    return {day: fold_ledger(reference.records, day, format_version=1) for day, *_ in FIGURES}


@pytest.mark.parametrize(("day", "events", "active", "assigned"), FIGURES)
def test_reference_replays_to_its_own_figures(reference: LoadedLedger, reference_folds: dict[str, WorldState],
                                              day: str, events: int, active: int, assigned: int) -> None:
    state = reference_folds[day]
    assert state.events_applied == events
    assert len(active_users(state)) == active
    assert len(assigned_licenses(state)) == assigned
    # The evidence for v1.py's reading: every holder is active, so "has a holder" counts the same.
    assert len(license_holders(state)) == assigned
    stats = stats_of(reference, day)
    assert (stats.events_so_far, stats.users_active, stats.licenses_assigned) == (events, active, assigned)
    assert (stats.format_version, stats.verified) == (1, False)
    assert stats.licenses_assigned + stats.licenses_unassigned == stats.licenses_existing == 200
    assert (stats.contracts_active, stats.contracts_expired) == (25, 0)  # the reference expired none


def test_reference_walker_agrees_with_the_fold(
        reference: LoadedLedger, reference_folds: dict[str, WorldState]) -> None:
    seen = []
    for day, state in walk_ledger(reference.records, format_version=1):
        if day.isoformat() in reference_folds:
            assert state == reference_folds[day.isoformat()]
            seen.append(day.isoformat())
    assert sorted(seen) == sorted(reference_folds)
