"""The asset graph alone: every asset and check of `orchestration/assets/` with the state resource, no jobs,
schedules or sensors. In-process materializations (the CLI, and the jobs whose ops run scenarios and sweeps) need
only this; `definitions.py` adds the jobs, schedules and sensors on top, so the jobs can materialize assets
without importing the code location that lists them."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import dagster as dg

from churn_assets.orchestration import assets as asset_modules
from churn_assets.orchestration.resources import StateResource


def asset_graph(state_dir: str | Path | None = None) -> dg.Definitions:
    """The assets, checks and state resource of the code location, bound to a state folder (None: resolved from
    the environment when a run starts)."""
    return dg.Definitions(
        assets=dg.load_assets_from_package_module(asset_modules),
        asset_checks=dg.load_asset_checks_from_package_module(asset_modules),
        resources={"state": StateResource(state_dir=str(state_dir or ""))},
    )


@cache
def asset_defs_for(state_dir: str) -> dg.Definitions:
    """One asset-graph Definitions per state folder per process: in-process runs reuse its resolved job."""
    return asset_graph(state_dir)
