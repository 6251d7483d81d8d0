"""Deployment config (`deployment.yaml` beside this module): the calendar every world shares.

Later issues add their deployment-wide settings (task count, task seed, ...) as new sections here.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import zoneinfo
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, Field

from churn_assets.errors import UserFacingError
from churn_assets.unique_keys import DuplicateKeyError, load_yaml, not_text
from churn_assets.world.config import WorldConfig
from churn_assets.world.validation import IsoDay, StrictModel, none_is, parse

DEPLOYMENT_RESOURCE = "deployment.yaml"


class DeploymentConfigError(UserFacingError, ValueError):
    """deployment.yaml is invalid, or a world does not fit it; the message names the key."""


@dataclass(frozen=True)
class Calendar:
    """The simulated calendar `[start, start + days)`."""

    start: dt.date
    days: int

    @property
    def end(self) -> dt.date:
        """Last day (inclusive)."""
        return self.start + dt.timedelta(days=self.days - 1)

    @property
    def end_exclusive(self) -> dt.date:
        """First day after the calendar (Dagster's `end_date` excludes it)."""
        return self.start + dt.timedelta(days=self.days)

    def fits(self, config: WorldConfig) -> bool:
        return self.start <= config.start and config.end <= self.end

    def require_fit(self, config: WorldConfig) -> None:
        """A world registered in Dagster must lie inside the calendar (all worlds of a deployment share it; each
        gets a world-day partition per day of its own calendar)."""
        if not self.fits(config):
            raise DeploymentConfigError(
                f"world {config.world_id} runs {config.start}..{config.end} ({config.days} days) but the "
                f"deployment calendar is {self.start}..{self.end} ({self.days} days, churn_assets/"
                f"{DEPLOYMENT_RESOURCE}); choose a world inside it (e.g. --days {self.days} or fewer)")

    def __str__(self) -> str:
        return f"{self.start}..{self.end} ({self.days} days)"


@dataclass(frozen=True)
class TaskSettings:
    """The `tasks` section: the task count and seed of every `task_set` partition (issue 10)."""

    count: int = 180
    seed: int = 0
    # k: k tasks of every template instead of `count` drawn by tier and weight (47 templates: 47k tasks), for
    # measurements where each template counts once (issue 45); None: `count`.
    per_template: int | None = None


@dataclass(frozen=True)
class RegressionSettings:
    """The `regression` section: when the `nightly_regression` schedule ticks (a cron string in `timezone`), and
    whether it starts running (off by default: opening `churnbench ui` starts nothing on a clock)."""

    cron: str = "0 2 * * *"
    timezone: str = "UTC"
    running: bool = False


@dataclass(frozen=True)
class DeploymentConfig:
    calendar: Calendar
    data: dict[str, Any]  # the file as read
    tasks: TaskSettings
    regression: RegressionSettings = RegressionSettings()


# --- the file's schema: a new deployment-wide section is a new field here ----------------------------------


class CalendarSection(StrictModel):
    start: IsoDay
    days: Annotated[int, Field(ge=1, le=3650, description="an integer 1..3650")]


class TasksSection(StrictModel):
    count: Annotated[int, Field(ge=1, le=10_000, description="an integer 1..10000")] = TaskSettings.count
    seed: Annotated[int, Field(ge=0, description="an integer >= 0")] = TaskSettings.seed
    # 1 only: a template without parameters has one question, so no world can ask every template twice
    per_template: Annotated[int | None, Field(ge=1, le=1, description="1 (each template once), or null")] = None


def _cron(value: Any) -> Any:
    """A five-field cron string (the schedule's definition checks the rest when the code location loads)."""
    field = re.compile(r"^[0-9A-Za-z*/,\-]+$")
    if not isinstance(value, str) or len(value.split()) != 5 or not all(field.match(f) for f in value.split()):
        raise ValueError("a cron string of five fields, e.g. \"0 2 * * *\"")
    return value


def _timezone(value: Any) -> Any:
    try:
        zoneinfo.ZoneInfo(str(value))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError("an IANA time zone, e.g. UTC or Europe/Berlin") from None
    return value


class RegressionSection(StrictModel):
    schedule: Annotated[str, BeforeValidator(_cron), Field(description="a cron string")] = RegressionSettings.cron
    timezone: Annotated[str, BeforeValidator(_timezone), Field(description="a time zone")] = \
        RegressionSettings.timezone
    running: Annotated[bool, Field(description="true or false")] = RegressionSettings.running


class DeploymentFile(StrictModel):
    calendar: CalendarSection
    tasks: Annotated[TasksSection, BeforeValidator(none_is(dict))] = TasksSection()
    regression: Annotated[RegressionSection, BeforeValidator(none_is(dict))] = RegressionSection()


def parse_deployment(data: Any, where: str) -> DeploymentConfig:
    checked = parse(DeploymentFile, data, lambda message: DeploymentConfigError(f"{where}: {message}"))
    r = checked.regression
    return DeploymentConfig(calendar=Calendar(start=checked.calendar.start, days=checked.calendar.days),
                            data=data, tasks=TaskSettings(count=checked.tasks.count, seed=checked.tasks.seed,
                                                               per_template=checked.tasks.per_template),
                            regression=RegressionSettings(cron=r.schedule, timezone=r.timezone, running=r.running))


def load_deployment(path: str | Path | None = None) -> DeploymentConfig:
    """The packaged deployment.yaml, or the file at `path`."""
    if path is not None:
        p = Path(path)
        try:
            text, where = p.read_text(), str(p)
        except FileNotFoundError:
            raise DeploymentConfigError(f"deployment config {p}: file not found") from None
        except UnicodeDecodeError as e:
            raise DeploymentConfigError(not_text(f"deployment config {p}", e)) from None
    else:
        text = resources.files("churn_assets").joinpath(DEPLOYMENT_RESOURCE).read_text()
        where = f"churn_assets/{DEPLOYMENT_RESOURCE}"
    try:
        data = load_yaml(text, where)
    except DuplicateKeyError as e:
        raise DeploymentConfigError(str(e)) from None
    except yaml.YAMLError as e:
        raise DeploymentConfigError(f"{where}: not valid YAML ({e})") from None
    return parse_deployment(data, where)


# A deployment.yaml to use instead of the packaged one (a deployment of its own, or a test whose worker
# processes need another task count: they inherit the environment, not a test's monkeypatch).
DEPLOYMENT_ENV = "CHURNBENCH_DEPLOYMENT"


@cache
def deployment() -> DeploymentConfig:
    """The deployment config, read once per process (partitions are built from it at import): the file named
    by `CHURNBENCH_DEPLOYMENT`, else the packaged one. The code location's processes (the webserver's code
    server, each run) inherit the variable from `churnbench ui`, so all of them read the same file."""

    return load_deployment(os.environ.get(DEPLOYMENT_ENV) or None)


def regression_settings(config: DeploymentConfig | None = None) -> RegressionSettings:
    """When the nightly regression runs (defaults when the section is absent)."""
    return (config or deployment()).regression


def task_settings(config: DeploymentConfig | None = None) -> TaskSettings:
    """The deployment's task settings (defaults when the section is absent; checked when the file was read)."""
    return (config or deployment()).tasks
