"""`churnbench ledger stats`: the figures against an independent count of the raw events, and the CLI."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from churn_assets.cli import main
from churn_assets.world.calendar import OutsideCalendarError
from churn_assets.world.config import load_config
from churn_assets.world.ledger import LoadedLedger, load_ledger
from churn_assets.world.simulator import generate_ledger
from churn_assets.world.stats import LedgerStats, StatsError, stats_of


def default_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default 180-day world, generated once per test session (shared by the test modules)."""
    out = tmp_path_factory.getbasetemp() / "default-world"
    if not (out / "manifest.json").exists():
        generate_ledger(load_config(), out)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return default_world(tmp_path_factory)


@pytest.fixture(scope="module")
def loaded(world: Path) -> LoadedLedger:
    return load_ledger(world)


@pytest.fixture(scope="module")
def small_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stats") / "w30"
    generate_ledger(load_config(days=30), out)
    return out


def count_raw_events(ledger_file: Path, day: str) -> dict[str, int]:
    """The stats figures counted straight from the JSON lines, without the loader or the fold."""
    events = 0
    active: dict[str, bool] = {}
    holder: dict[str, str | None] = {}
    terms: dict[str, list[tuple[str, str]]] = {}
    ticket_status: dict[str, str] = {}
    with ledger_file.open() as fh:
        for line in fh:
            r = json.loads(line)
            if r["at"] > day:
                break
            events += 1
            kind, eid, p = r["kind"], r["entity_id"], r["payload"]
            if kind == "user_hired":
                active[eid] = True
            elif kind == "user_offboarded":
                active[eid] = False
            elif kind in ("license_purchased", "license_unassigned"):
                holder[eid] = None
            elif kind == "license_assigned":
                holder[eid] = p["user_id"]
            elif kind == "license_reassigned":
                holder[eid] = p["to_user_id"]
            elif kind in ("contract_signed", "contract_renewed"):
                terms.setdefault(eid, []).append((p["effective_on"], p["expires_on"]))
            elif kind.startswith("ticket_"):
                ticket_status[eid] = p["status"]
    status = ["active" if any(a <= day <= b for a, b in ts) else "expired" if day > max(b for _, b in ts)
              else "pending" for ts in terms.values()]
    return {
        "events_so_far": events,
        "users_existing": len(active),
        "users_active": sum(active.values()),
        "licenses_existing": len(holder),
        "licenses_assigned": sum(1 for u in holder.values() if u is not None and active.get(u)),
        "licenses_unassigned": sum(1 for u in holder.values() if u is None),
        "licenses_held_by_inactive_users": sum(1 for u in holder.values() if u is not None and not active.get(u)),
        "contracts_existing": len(terms),
        "contracts_active": status.count("active"),
        "contracts_expired": status.count("expired"),
        "contracts_pending": status.count("pending"),
        "tickets_open": sum(1 for s in ticket_status.values() if s != "resolved"),
    }


def test_stats_at_mid_timeline_equal_an_independent_count(world: Path, loaded: LoadedLedger) -> None:
    config = load_config()
    mid = (config.start + dt.timedelta(days=config.days // 2)).isoformat()
    stats = stats_of(loaded, mid)
    expected = count_raw_events(world / "ledger.jsonl", mid)
    got = stats.to_dict()
    assert {k: got[k] for k in expected} == expected
    assert (stats.day, stats.format_version, stats.verified) == (mid, 2, True)
    assert stats.events_total == loaded.count
    # The mid-timeline world is not trivial (which figures are zero depends on the simulator's draws).
    assert all(expected[k] > 0 for k in ("users_active", "licenses_assigned", "contracts_active",
                                         "tickets_open"))
    assert expected["users_existing"] > expected["users_active"]


def test_stats_default_to_the_last_day(loaded: LoadedLedger) -> None:
    stats = stats_of(loaded)
    assert stats.day == loaded.last_day
    assert stats.events_so_far == stats.events_total == loaded.count


def test_a_day_outside_the_ledger_is_refused(loaded: LoadedLedger) -> None:
    # the one phrasing of a day outside a calendar, as every command says it (issue 22)
    with pytest.raises(OutsideCalendarError,
                       match=r"--at = 2024-06-29 is outside the calendar of the ledger \(2024-01-01..2024-06-28\)"):
        stats_of(loaded, "2024-06-29")
    with pytest.raises(OutsideCalendarError, match="outside the calendar"):
        stats_of(loaded, dt.date(2023, 12, 31))
    with pytest.raises(StatsError, match="not a day"):
        stats_of(loaded, "April 27")


def test_cli_json_prints_one_object_with_snake_case_keys(small_world: Path) -> None:
    result = CliRunner().invoke(main, ["ledger", "stats", str(small_world), "--at", "2024-01-15", "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    assert set(data) == set(LedgerStats.__dataclass_fields__)
    assert all(k == k.lower() and " " not in k for k in data)
    assert (data["day"], data["format_version"], data["verified"]) == ("2024-01-15", 2, True)
    assert data == stats_of(load_ledger(small_world), "2024-01-15").to_dict()


def test_cli_text_defaults_to_the_last_day(small_world: Path) -> None:
    result = CliRunner().invoke(main, ["ledger", "stats", str(small_world)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("as of 2024-01-30 (ledger 2024-01-01 .. 2024-01-30, format 2, verified)")
    for label in ("events", "users active", "assigned", "unassigned", "expired", "tickets open"):
        assert label in result.output


def test_cli_day_outside_the_ledger_is_one_line_and_nonzero(small_world: Path) -> None:
    result = CliRunner().invoke(main, ["ledger", "stats", str(small_world), "--at", "2024-04-27"])
    assert result.exit_code == 1
    assert "churnbench: error: --at = 2024-04-27 is outside the calendar of the ledger (2024-01-01..2024-01-30)" \
        in result.output
    assert "Traceback" not in result.output
