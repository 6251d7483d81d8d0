"""The Dagster code location (`workspace.yaml` points here): the one place that assembles `Definitions`.

Assets and their checks are collected from the modules of `orchestration/assets/` (each module holds its
assets and the checks beside them), so nothing is listed by hand: an asset or a check is registered exactly
once, and a new one is registered by defining it in an asset module. Jobs, schedules and sensors come from
their own modules.

Runs launched from the UI execute their steps in the run's own process (`in_process_executor`, decision 192):
Dagster's default, the multiprocess executor, starts a subprocess per step that loads this code location again
(7 s on an idle machine, 20-28 s with both cores busy) for steps that mostly take seconds; parallel work is the
cell pool's (decision 125), and the CLI's materializations run in process already.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import dagster as dg

from churn_assets.orchestration.asset_graph import asset_graph
from churn_assets.orchestration.jobs import JOBS
from churn_assets.orchestration.schedules import SCHEDULES
from churn_assets.orchestration.sensors import SENSORS


def build_defs(state_dir: str | Path | None = None) -> dg.Definitions:
    """Definitions bound to a state folder (None: resolved from the environment when a run starts)."""
    return dg.Definitions.merge(
        asset_graph(state_dir),
        dg.Definitions(jobs=list(JOBS), schedules=list(SCHEDULES), sensors=list(SENSORS),
                       executor=dg.in_process_executor),
    )


@cache
def defs_for(state_dir: str) -> dg.Definitions:
    """One Definitions (and so one resolved job) per state folder per process: in-process runs reuse it."""
    return build_defs(state_dir)


defs = build_defs()
