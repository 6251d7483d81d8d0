"""Deployment config (`deployment.yaml` beside this module): the calendar every world shares.

Later issues add their deployment-wide settings (task count, task seed, ...) as new sections here.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from churn_assets.errors import UserFacingError
from churn_assets.world.config import WorldConfig

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
        """A world registered in Dagster must lie inside the calendar (its day partitions exist)."""
        if not self.fits(config):
            raise DeploymentConfigError(
                f"world {config.world_id} runs {config.start}..{config.end} ({config.days} days) but the "
                f"deployment calendar is {self.start}..{self.end} ({self.days} days, churn_assets/"
                f"{DEPLOYMENT_RESOURCE}); choose a world inside it (e.g. --days {self.days} or fewer)")

    def __str__(self) -> str:
        return f"{self.start}..{self.end} ({self.days} days)"


@dataclass(frozen=True)
class DeploymentConfig:
    calendar: Calendar
    data: dict[str, Any]


def parse_deployment(data: Any, where: str) -> DeploymentConfig:
    if not isinstance(data, dict) or not isinstance(data.get("calendar"), dict):
        raise DeploymentConfigError(f"{where}: needs a `calendar` mapping")
    cal = data["calendar"]
    try:
        start = dt.date.fromisoformat(str(cal.get("start")))
    except ValueError:
        raise DeploymentConfigError(f"{where}: calendar.start must be an ISO day YYYY-MM-DD") from None
    days = cal.get("days")
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= 3650:
        raise DeploymentConfigError(f"{where}: calendar.days must be an integer 1..3650")
    return DeploymentConfig(calendar=Calendar(start=start, days=days), data=data)


def load_deployment(path: str | Path | None = None) -> DeploymentConfig:
    """The packaged deployment.yaml, or the file at `path`."""
    if path is not None:
        p = Path(path)
        try:
            text, where = p.read_text(), str(p)
        except FileNotFoundError:
            raise DeploymentConfigError(f"deployment config {p}: file not found") from None
    else:
        text = resources.files("churn_assets").joinpath(DEPLOYMENT_RESOURCE).read_text()
        where = f"churn_assets/{DEPLOYMENT_RESOURCE}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DeploymentConfigError(f"{where}: not valid YAML ({e})") from None
    return parse_deployment(data, where)


@cache
def deployment() -> DeploymentConfig:
    """The deployment config, read once per process (partitions are built from it at import)."""
    return load_deployment()


@dataclass(frozen=True)
class TaskSettings:
    """The `tasks` section: the task count and seed of every `task_set` partition (issue 10)."""

    count: int = 180
    seed: int = 0


def task_settings(config: DeploymentConfig | None = None) -> TaskSettings:
    """The deployment's task settings (defaults when the section is absent); refuses bad values."""
    section = (config or deployment()).data.get("tasks") or {}
    if not isinstance(section, dict):
        raise DeploymentConfigError("deployment config: `tasks` must be a mapping")
    count, seed = section.get("count", 180), section.get("seed", 0)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 10_000:
        raise DeploymentConfigError("deployment config: tasks.count must be an integer 1..10000")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise DeploymentConfigError("deployment config: tasks.seed must be an integer >= 0")
    return TaskSettings(count=count, seed=seed)
