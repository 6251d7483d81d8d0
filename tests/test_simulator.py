"""The simulator: determinism, a pinned golden ledger, rates, and every drift rule observable."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from churn_assets.world.config import load_config
from churn_assets.world.simulator import generate_ledger

# SHA-256 of the default world's ledger.jsonl. It changes only when the simulator, the defaults or
# the ledger format change on purpose: update it in the same commit and say why.
GOLDEN_DEFAULT_LEDGER_SHA256 = "8c9331f6944d849ab565068825b1aada76d5fcc4617f332311865cbe84d424ce"

D28_T_PRIME, T = "2024-03-29", "2024-04-27"


@pytest.fixture(scope="module")
def default_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("default") / "w"
    generate_ledger(load_config(), out)
    return out


@pytest.fixture(scope="module")
def records(default_ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (default_ledger / "ledger.jsonl").open()]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_golden_default_ledger(default_ledger: Path) -> None:
    assert _sha(default_ledger / "ledger.jsonl") == GOLDEN_DEFAULT_LEDGER_SHA256


def test_byte_identical_across_processes(tmp_path: Path) -> None:
    code = ("import sys; from pathlib import Path; from churn_assets.world.config import load_config; "
            "from churn_assets.world.simulator import generate_ledger; "
            "generate_ledger(load_config(days=20), Path(sys.argv[1]))")
    for i, hashseed in enumerate(("1", "987")):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        subprocess.run([sys.executable, "-c", code, str(tmp_path / f"run{i}")], check=True, env=env)
    assert (tmp_path / "run0" / "ledger.jsonl").read_bytes() == (tmp_path / "run1" / "ledger.jsonl").read_bytes()
    assert (tmp_path / "run0" / "manifest.json").read_bytes() == (tmp_path / "run1" / "manifest.json").read_bytes()


def test_different_seed_gives_a_different_world(tmp_path: Path) -> None:
    generate_ledger(load_config(days=5, seed=1), tmp_path / "a")
    generate_ledger(load_config(days=5, seed=2), tmp_path / "b")
    assert _sha(tmp_path / "a" / "ledger.jsonl") != _sha(tmp_path / "b" / "ledger.jsonl")


def test_scale_matches_the_reference(records: list[dict[str, Any]]) -> None:
    assert 50_000 <= len(records) <= 62_000  # the reference: 56,370 events over 180 days


def _within_poisson(observed: int, mean: float, sigmas: float = 4.0) -> bool:
    return abs(observed - mean) <= sigmas * math.sqrt(mean) + 1


def test_totals_within_configured_rates(records: list[dict[str, Any]]) -> None:
    config = load_config()
    days, rates, ref = config.days, config.section("rates_per_day"), config.section("reference_data")
    counts = Counter(r["kind"] for r in records)
    assert counts["consumption_logged"] == config.section("consumption")["events_per_day"] * days
    assert counts["vendor_registered"] == ref["vendors"]
    assert counts["product_listed"] == ref["products"]
    assert counts["cost_center_created"] == ref["cost_centers"]
    assert _within_poisson(counts["user_hired"] - ref["users"], rates["hires"] * days)
    assert _within_poisson(counts["user_offboarded"], rates["offboards"] * days)
    assert _within_poisson(counts["user_moved_cost_center"], rates["cost_center_moves"] * days)
    assert _within_poisson(counts["ticket_opened"], rates["tickets_opened"] * days)
    # Draws that find no eligible target are skipped, so these stay at or under their rate.
    assert counts["license_reassigned"] <= rates["reassignments"] * days + 4 * math.sqrt(rates["reassignments"] * days)
    assert counts["license_reassigned"] >= 0.8 * rates["reassignments"] * days
    assert counts["price_changed"] <= rates["price_changes"] * days + 4 * math.sqrt(rates["price_changes"] * days)
    assert counts["price_changed"] >= 1


class _MiniFold:
    """An independent, minimal replay for these tests (deliberately not the project's fold)."""

    def __init__(self) -> None:
        self.active: set[str] = set()
        self.cost_center: dict[str, str] = {}
        self.holder: dict[str, str | None] = {}
        self.product_of: dict[str, str] = {}
        self.price: dict[str, float] = {}

    def apply(self, r: dict[str, Any]) -> None:
        k, e, p = r["kind"], r["entity_id"], r["payload"]
        if k == "user_hired":
            self.active.add(e)
            self.cost_center[e] = p["cost_center_id"]
        elif k == "user_offboarded":
            self.active.discard(e)
        elif k == "user_moved_cost_center":
            self.cost_center[e] = p["to_cost_center_id"]
        elif k == "license_purchased":
            self.holder[e], self.product_of[e] = None, p["product_id"]
        elif k == "license_assigned":
            self.holder[e] = p["user_id"]
        elif k == "license_unassigned":
            self.holder[e] = None
        elif k == "license_reassigned":
            self.holder[e] = p["to_user_id"]
        elif k == "product_listed" or k == "price_changed":
            self.price[e] = p["list_price_usd"]

    def spend_by_cost_center(self, prices: dict[str, float]) -> dict[str, float]:
        spend: dict[str, float] = defaultdict(float)
        for lic, user in self.holder.items():
            if user is not None and user in self.active:
                spend[self.cost_center[user]] += prices[self.product_of[lic]]
        return {cc: round(v, 2) for cc, v in spend.items()}


def _by_day(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    days: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        days[r["at"]].append(r)
    return days


def test_freed_seats_are_reassigned_and_pool_does_not_drain(records: list[dict[str, Any]]) -> None:
    freed: set[str] = set()
    reassigned_freed = 0
    fold = _MiniFold()
    assigned_at: dict[str, int] = {}
    for day, events in sorted(_by_day(records).items()):
        for r in events:
            if r["kind"] == "license_unassigned":
                freed.add(r["entity_id"])
            elif r["kind"] == "license_assigned" and r["entity_id"] in freed:
                reassigned_freed += 1
            fold.apply(r)
        assigned_at[day] = sum(1 for u in fold.holder.values() if u is not None)
    assert reassigned_freed >= 20
    start, t, end = assigned_at["2024-01-01"], assigned_at[T], assigned_at[max(assigned_at)]
    assert t >= 0.9 * start and end >= 0.9 * start, (start, t, end)  # the reference drained 200 -> 69


def test_purchases_after_day_zero(records: list[dict[str, Any]]) -> None:
    assert sum(1 for r in records if r["kind"] == "license_purchased" and r["at"] > "2024-01-01") >= 10


def test_contracts_expire_and_renew_inside_the_d28_window(records: list[dict[str, Any]]) -> None:
    window = [r for r in records if D28_T_PRIME <= r["at"] <= T]
    assert any(r["kind"] == "contract_expired" for r in window)
    assert any(r["kind"] == "contract_renewed" for r in window)


def test_contract_dates_are_consistent(records: list[dict[str, Any]]) -> None:
    expires: dict[str, str] = {}
    for r in records:
        p = r["payload"]
        if r["kind"] == "contract_signed":
            assert p["signed_on"] <= p["effective_on"] < p["expires_on"]
            assert p["expires_on"] >= r["at"]  # every contract runs on day 0 or later
            expires[r["entity_id"]] = p["expires_on"]
        elif r["kind"] == "contract_renewed":
            assert p["previous_expires_on"] == expires[r["entity_id"]]
            assert dt.date.fromisoformat(p["effective_on"]) == \
                dt.date.fromisoformat(p["previous_expires_on"]) + dt.timedelta(days=1)
            expires[r["entity_id"]] = p["expires_on"]
        elif r["kind"] == "contract_expired":
            assert expires[r["entity_id"]] < r["at"] == p["expired_on"]


def test_tickets_open_and_resolve(records: list[dict[str, Any]]) -> None:
    status: dict[str, str] = {}
    for r in records:
        if r["at"] > T:
            break
        if r["kind"].startswith("ticket_"):
            status[r["entity_id"]] = r["payload"]["status"]
    counts = Counter(status.values())
    assert counts["open"] >= 1 and counts["resolved"] >= 1 and counts["in_progress"] >= 1


def test_vendor_changes_happen_rarely(records: list[dict[str, Any]]) -> None:
    changes = [r for r in records if r["kind"] == "vendor_changed"]
    assert 1 <= len(changes) <= 15


def test_a_price_change_moves_a_spend_total(records: list[dict[str, Any]]) -> None:
    """Spend (docs/rules.md, "Spend") follows the current list price, so a price change moves it."""
    fold = _MiniFold()
    moved = 0
    for _day, events in sorted(_by_day(records).items()):
        before_prices = dict(fold.price)
        for r in events:
            fold.apply(r)
        changed = {r["entity_id"] for r in events if r["kind"] == "price_changed"}
        if changed and before_prices:
            old = {**fold.price, **{p: before_prices[p] for p in changed}}
            if fold.spend_by_cost_center(fold.price) != fold.spend_by_cost_center(old):
                moved += 1
    assert moved >= 1


def test_activity_weights_are_heavy_tailed(records: list[dict[str, Any]]) -> None:
    """Skew: the top decile of users draws a large share of consumption."""
    per_user = Counter(r["payload"]["user_id"] for r in records if r["kind"] == "consumption_logged")
    counts = sorted(per_user.values(), reverse=True)
    top = counts[: max(1, len(counts) // 10)]
    assert sum(top) / sum(counts) >= 0.35


def test_shelfware_makes_idle_licenses_and_reclamations(records: list[dict[str, Any]]) -> None:
    """Some licenses are bought but barely used: idle-license questions have non-trivial answers."""
    assert sum(1 for r in records if r["kind"] == "license_unassigned"
               and r["payload"]["reason"] == "reclaimed_idle") >= 5
    last_used: dict[str, str] = {}
    holder: dict[str, str | None] = {}
    for r in records:
        if r["at"] > T:
            break
        if r["kind"] == "consumption_logged":
            last_used[r["entity_id"]] = r["at"]
        elif r["kind"] in ("license_assigned", "license_reassigned"):
            holder[r["entity_id"]] = r["payload"].get("user_id") or r["payload"]["to_user_id"]
        elif r["kind"] == "license_unassigned":
            holder[r["entity_id"]] = None
    cutoff = (dt.date.fromisoformat(T) - dt.timedelta(days=29)).isoformat()
    idle = [lic for lic, h in holder.items() if h and last_used.get(lic, "") < cutoff]
    assert 5 <= len(idle) <= 0.3 * sum(1 for h in holder.values() if h)
