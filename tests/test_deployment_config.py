"""The deployment config's schema: the packaged file, defaults of optional sections, one-line refusals."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from churn_assets.deployment import (
    DeploymentConfigError,
    DeploymentFile,
    TaskSettings,
    load_deployment,
    parse_deployment,
    task_settings,
)
from churn_assets.world.validation import leaf_fields

CALENDAR = {"start": "2024-01-01", "days": 180}


def test_packaged_file() -> None:
    config = load_deployment()
    assert (config.calendar.start, config.calendar.days) == (dt.date(2024, 1, 1), 180)
    assert task_settings(config) == TaskSettings(count=180, seed=0)
    assert config.data == {"calendar": CALENDAR, "tasks": {"count": 180, "seed": 0},
                           "regression": {"schedule": "0 2 * * *", "timezone": "UTC", "running": False}}


@pytest.mark.parametrize("tasks", [{}, None, {"count": 180}])
def test_tasks_default_when_absent(tasks: dict | None) -> None:
    data = {"calendar": CALENDAR} if tasks == {} else {"calendar": CALENDAR, "tasks": tasks}
    assert task_settings(parse_deployment(data, "test")) == TaskSettings()


def test_per_template_is_read() -> None:
    data = {"calendar": CALENDAR, "tasks": {"per_template": 1}}
    assert task_settings(parse_deployment(data, "test")) == TaskSettings(per_template=1)


def test_an_unquoted_yaml_day_is_a_day(tmp_path: Path) -> None:
    f = tmp_path / "d.yaml"
    f.write_text("calendar:\n  start: 2024-02-01\n  days: 30\n")
    assert load_deployment(f).calendar.start == dt.date(2024, 2, 1)


@pytest.mark.parametrize(("data", "message"), [
    ({"calendar": {**CALENDAR, "days": 0}}, "test: calendar.days must be an integer 1..3650 (got 0)"),
    ({"calendar": {**CALENDAR, "days": True}}, "test: calendar.days must be an integer 1..3650 (got True)"),
    ({"calendar": {**CALENDAR, "start": "2024-13-01"}},
     "test: calendar.start must be an ISO day YYYY-MM-DD (got '2024-13-01')"),
    ({"calendar": CALENDAR, "tasks": {"count": 0}}, "test: tasks.count must be an integer 1..10000 (got 0)"),
    ({"calendar": CALENDAR, "tasks": {"seed": -1}}, "test: tasks.seed must be an integer >= 0 (got -1)"),
    ({"calendar": CALENDAR, "tasks": {"per_template": 2}},
     "test: tasks.per_template must be 1 (each template once), or null (got 2)"),
    ({"calendar": CALENDAR, "taks": {"count": 3}}, "test: unknown key 'taks'"),
    ({"calendar": 5}, "test: calendar must be a mapping"),
    ({}, "test: calendar is missing"),
    ([], "test: top level must be a mapping"),
])
def test_bad_files_are_one_line(data: object, message: str) -> None:
    with pytest.raises(DeploymentConfigError) as err:
        parse_deployment(data, "test")
    assert str(err.value) == message


def test_a_bad_file_is_named(tmp_path: Path) -> None:
    f = tmp_path / "d.yaml"
    f.write_text("calendar:\n  start: 2024-01-01\n  days: 3651\n")
    with pytest.raises(DeploymentConfigError, match=f"^{re.escape(str(f))}: calendar\\.days"):
        load_deployment(f)


def test_every_field_says_what_it_must_be() -> None:
    leaves = leaf_fields(DeploymentFile)
    assert set(leaves) == {"calendar.start", "calendar.days", "tasks.count", "tasks.seed", "tasks.per_template",
                           "regression.schedule",
                           "regression.timezone", "regression.running"}
    assert all(field.description for field in leaves.values())
