"""A day typed on the command line or the Launchpad (issue 46, item 8): a text of the form YYYY-MM-DD that names no
day is refused as "not a calendar day" with the reason, not as a wrong form the user would search for a typo in."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from click.testing import CliRunner

from churn_assets.cli import main
from churn_assets.evaluation.requests import RequestError, day_text
from churn_assets.world.calendar import typed_day


@pytest.mark.parametrize(("text", "problem"), [
    ("2024-02-30", "'2024-02-30' is not a calendar day (February 2024 has 29 days)"),
    ("2023-02-29", "'2023-02-29' is not a calendar day (February 2023 has 28 days)"),
    ("2024-04-31", "'2024-04-31' is not a calendar day (April 2024 has 30 days)"),
    ("2024-13-01", "'2024-13-01' is not a calendar day (there is no month 13)"),
    ("2024-01-00", "'2024-01-00' is not a calendar day (there is no day 00)"),
    ("0000-01-01", "'0000-01-01' is not a calendar day (there is no year 0000)"),
    ("2024-2-3", "'2024-2-3' is not a day YYYY-MM-DD"),
    ("yesterday", "'yesterday' is not a day YYYY-MM-DD"),
    ("2024-01-05x", "'2024-01-05x' is not a day YYYY-MM-DD"),
])
def test_an_impossible_day_says_why(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as err:
        typed_day(text)
    assert str(err.value) == problem
    with pytest.raises(RequestError) as err:
        day_text(text, "T")
    assert str(err.value) == f"T: {problem}"


def test_real_days_are_read_as_before() -> None:
    assert typed_day("2024-02-29") == dt.date(2024, 2, 29)
    assert typed_day("20240105") == dt.date(2024, 1, 5)  # what date.fromisoformat accepted stays accepted


def test_the_command_line_names_the_option_and_the_calendar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHURNBENCH_STATE_DIR", str(tmp_path / "state"))
    got = CliRunner().invoke(main, ["run", "--world", "default-s42-2906f8", "--arm", "naive", "--t-prime", "2024-01-05",
                                    "--t", "2024-02-30"])
    assert got.exit_code == 2, got.output
    assert "--t: '2024-02-30' is not a calendar day (February 2024 has 29 days)" in got.stderr
    assert "YYYY-MM-DD" not in got.stderr and got.stderr.count("\n") == 1
    assert not (tmp_path / "state").exists()  # refused before the state folder is opened
