"""A sweep's record in the state folder: `<state>/sweeps/<sweep id>.json` (its spec, cells and how each went), and
where its report goes (`<state>/results/sweeps/<sweep id>/`). Written by `orchestration/sweeps.py` after every
cell; read by the `sweep_report` asset and `churnbench sweep list|show|rm`."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from churn_assets.state import StatePaths, atomic_write_text
from churn_assets.sweeps.spec import Cell, SweepError, SweepSpec
from churn_assets.unique_keys import load_json

DONE, FAILED, PENDING, SKIPPED = "done", "failed", "pending", "skipped"  # skipped: past the LLM budget cap


def scenario_key_of(cell: Cell, model_settings: dict[str, Any] | None = None) -> str:
    """The scenario key of a cell; an LLM cell's agent is its agent id (`llm-xxxxxx`), whose settings it needs."""
    from churn_assets.arms.registry import define_scenario
    from churn_assets.freshness.scenario import DETERMINISTIC_AGENT

    llm = cell.agent.startswith("llm-")
    return define_scenario(cell.world_id, cell.arm, cell.policy, cell.t_prime, cell.t,
                           agent_id=cell.agent if llm else DETERMINISTIC_AGENT, saas_profile=cell.saas_profile,
                           model_settings=model_settings if llm else None).key


@dataclass
class SweepRecord:
    """A sweep as stored: its spec, its cells and how each went (`outcomes`: scenario key -> outcome)."""

    spec: SweepSpec
    cells: list[Cell]
    exposure_cells: list[Cell]
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    exposure_rows: list[dict[str, Any]] = field(default_factory=list)
    started: str = ""
    finished: str = ""

    @property
    def sweep_id(self) -> str:
        return self.spec.sweep_id

    def key_of(self, cell: Cell) -> str:
        """The cell's scenario key (an LLM sweep's model settings are in its spec's options)."""
        return scenario_key_of(cell, self.spec.options.get("model_settings"))

    def status_counts(self) -> dict[str, int]:
        counts = {DONE: 0, FAILED: 0, PENDING: 0, SKIPPED: 0}
        for cell in self.cells:
            counts[self.outcomes.get(self.key_of(cell), {}).get("status", PENDING)] += 1
        return counts

    PROGRESS_COLUMNS = ("arm", "policy", "world_id", "t_prime", "gap", "status", "stale_answers", "exposure",
                        "accuracy", "seconds", "reused", "worker")

    def progress_rows(self) -> list[dict[str, Any]]:
        """One row per evaluated cell, pending ones too: what the sweep run's table shows as cells end."""
        rows = []
        for cell in self.cells:
            outcome = self.outcomes.get(self.key_of(cell), {})
            rows.append({"arm": cell.arm, "policy": cell.policy, "world_id": cell.world_id,
                         "t_prime": cell.t_prime.isoformat(), "gap": cell.gap,
                         "status": outcome.get("status", PENDING), "stale_answers": outcome.get("stale_answers"),
                         "exposure": outcome.get("exposure"), "accuracy": outcome.get("accuracy"),
                         "seconds": outcome.get("seconds"), "reused": outcome.get("reused"),
                         "worker": outcome.get("worker", ""), "error": outcome.get("error")})
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"sweep_id": self.sweep_id, "spec": self.spec.to_json(), "cells": [c.to_json() for c in self.cells],
                "exposure_cells": [c.to_json() for c in self.exposure_cells], "outcomes": self.outcomes,
                "exposure_rows": self.exposure_rows, "started": self.started, "finished": self.finished}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepRecord:
        return cls(SweepSpec.from_json(data["spec"]), [Cell.from_json(c) for c in data["cells"]],
                   [Cell.from_json(c) for c in data.get("exposure_cells", [])], dict(data.get("outcomes", {})),
                   list(data.get("exposure_rows", [])), str(data.get("started", "")), str(data.get("finished", "")))

    def save(self, paths: StatePaths) -> None:
        atomic_write_text(sweep_file(paths, self.sweep_id), json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")


def sweep_file(paths: StatePaths, sweep_id: str) -> Path:
    return paths.root / "sweeps" / f"{sweep_id}.json"


def load_sweep(paths: StatePaths, sweep_id: str) -> SweepRecord:
    path = sweep_file(paths, sweep_id)
    try:
        return SweepRecord.from_json(load_json(path.read_text(), f"sweep record {path}"))
    except FileNotFoundError:
        known = ", ".join(list_sweeps(paths)) or "none"
        raise SweepError(f"no sweep {sweep_id!r} in {paths.root} (sweeps: {known})") from None
    except (json.JSONDecodeError, KeyError) as e:
        raise SweepError(f"sweep record {path} is not readable ({e})") from None


def sweep_report_dir(paths: StatePaths, sweep_id: str) -> Path:
    return paths.results_root / "sweeps" / sweep_id


NIGHTS_DIR = "nights"
NIGHT_TAG = "churnbench/regression_night"  # the run date a regression run files its report under


def regression_night(now: dt.datetime | None = None) -> dt.date:
    """The run date a regression's report is filed under: today in the nightly schedule's timezone (deployment
    config `regression.timezone`)."""
    from zoneinfo import ZoneInfo

    from churn_assets.deployment import deployment

    zone = ZoneInfo(deployment().regression.timezone)
    return (now or dt.datetime.now(dt.UTC)).astimezone(zone).date()


def regression_night_dir(paths: StatePaths, sweep_id: str, night: dt.date) -> Path:
    """Where one night's regression report goes (`<sweep report dir>/nights/<YYYY-MM-DD>/`): the regression's sweep
    id is the same every night, so each run date keeps a folder of its own and a failing night never overwrites an
    earlier one (a second run on one date replaces that date's files)."""
    return sweep_report_dir(paths, sweep_id) / NIGHTS_DIR / night.isoformat()


def list_sweeps(paths: StatePaths) -> list[str]:
    folder = paths.root / "sweeps"
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
