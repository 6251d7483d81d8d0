"""Bad input gets one line and exit 1, never a traceback, never a silent pass (issue 22, items 8-12): the real
CLI in process (`CliRunner`) on the session's state folder and its small (30-day) world."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from churn_assets.cli import main
from churn_assets.services import ServiceUrls
from churn_assets.state import StatePaths
from churn_assets.world.ledger import LEDGER_FILE, MANIFEST_FILE

pytestmark = pytest.mark.integration

UNKNOWN_WORLD = "nope-s1-abcdef"


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def refused(result: Result, *words: str) -> str:
    """The one line of a refusal: exit 1, no traceback, each of `words` in it."""
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def broken_ledgers(small_world: str, state_paths: StatePaths, tmp_path: Path) -> dict[str, Path]:
    source = state_paths.ledger_dir(small_world)
    not_utf8 = tmp_path / "not-utf8"
    shutil.copytree(source, not_utf8)
    lines = (not_utf8 / LEDGER_FILE).read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"', b'\xff', 1)  # line 3: a byte that is no UTF-8
    (not_utf8 / LEDGER_FILE).write_bytes(b"\n".join(lines))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / LEDGER_FILE).write_bytes(b"")  # truncated to nothing (a manifest beside it or not)
    bare = tmp_path / "bare.jsonl"
    bare.write_bytes(b"")
    shutil.copy(source / MANIFEST_FILE, empty / MANIFEST_FILE)
    return {"not_utf8": not_utf8, "empty": empty, "bare": bare}


def test_a_ledger_that_is_not_utf8_or_empty_is_refused_in_one_line(broken_ledgers: dict[str, Path]) -> None:
    bad = str(broken_ledgers["not_utf8"])
    for args in (["ledger", "verify", bad], ["ledger", "stats", bad], ["tasks", "--ledger", bad, "--out", "/dev/null"]):
        refused(cli(*args), "line 3", "not UTF-8")
    for name in ("empty", "bare"):
        refused(cli("ledger", "verify", str(broken_ledgers[name])), "empty ledger")


def test_an_unknown_world_is_an_error_not_no_runs(services: ServiceUrls, small_world: str) -> None:
    refused(cli("results", "list", "--world", UNKNOWN_WORLD), f"unknown world {UNKNOWN_WORLD}", small_world)
    refused(cli("verify-results", "--all", "--world", UNKNOWN_WORLD), f"unknown world {UNKNOWN_WORLD}")
    assert cli("results", "list", "--world", small_world).exit_code == 0  # known, maybe without runs


def test_defaults_follow_the_worlds_calendar_and_paper_refuses_a_world_without_its_days(
        small_world: str, state_paths: StatePaths) -> None:
    made = cli("tasks", "--world", small_world, "--n", "12")
    assert made.exit_code == 0, made.output
    assert f"world {small_world} at T=2024-01-30: 12 tasks" in made.output  # the world's last day
    written = state_paths.root / "task-files" / small_world / "2024-01-30-n12-seed0.jsonl"
    assert written.is_file() and f"-> {written}" in made.output
    assert not Path("tasks.jsonl").exists()  # never into the working directory
    exposed = cli("exposure", "--world", small_world, "--at", "2024-01-29", "--policy", "off")
    assert exposed.exit_code == 0, exposed.output
    assert "T=2024-01-29, T'=2024-01-02" in exposed.output  # T' from the world's calendar, not 2024-03-29
    line = refused(cli("paper", "--world", small_world), "the paper's D+28 T' = 2024-03-29",
                   f"calendar of world {small_world}")
    assert line.startswith("churnbench: error:")  # nothing printed before the refusal


def test_days_outside_the_calendar_have_one_phrasing_and_one_exit_code(services: ServiceUrls,
                                                                       small_world: str) -> None:
    outside = "is outside the calendar of"
    refused(cli("project", "--world", small_world, "--at", "2025-01-01"), "--at = 2025-01-01", outside)
    refused(cli("tasks", "--world", small_world, "--at", "2025-01-01", "--out", "/dev/null"), "--at = 2025-01-01",
            outside)
    refused(cli("exposure", "--world", small_world, "--at", "2025-01-01"), "--at = 2025-01-01", outside)
    refused(cli("run", "--world", small_world, "--arm", "naive", "--t-prime", "2024-01-10", "--t", "2025-01-01"),
            "T = 2025-01-01", outside)


def test_a_ttl_for_an_unknown_class_names_the_valid_classes(services: ServiceUrls, small_world: str) -> None:
    refused(cli("run", "--world", small_world, "--arm", "grounding", "--t-prime", "2024-01-10", "--t",
                "2024-01-12", "--policy", "ttl:nosuch=3"),
            "policy ttl:nosuch=3: no cached class named nosuch", "prices", "vendor_dims")
