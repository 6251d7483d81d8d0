"""Every figure of four evaluation cells of a 30-day world equals the committed fixture
(`tests/snapshots/figures_30day.json`): a restructuring, a dependency change or a refactor that moves a verdict
count, exposure, prediction, accuracy, cost or route mix fails here (`bench/compare_paper.py` checks the same on
the default world's `churnbench paper --json`).

The cells: the grounding arm tiered at T' = T - 1 and T - 28, its off ablation at T - 28, and the hierarchical
arm at T - 28; T = 2024-01-30, 20 tasks (the test budget of section 10). The fixture was written by the code
before the Dagster-wing issue (commit 4f27244, the same cells run through its `run_scenario`) and rewritten once,
by issue 19 (its diff: the measured-rate predictor moved cell 1's prediction 2.46 -> 1.37; every cell gained the
`unattributed_error` count; the off cell's one stale answer equal to a degenerate served gold moved from
`freshness_error` to it, so its stale answers and exposure went 10 -> 9; nothing else moved). An intended change
of figures (new question texts, say) regenerates it: `CHURNBENCH_UPDATE_FIGURES=1 pytest <this file>`, and the
diff of the fixture goes into the commit and its reason into the closing note.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from churn_assets.deployment import TaskSettings
from churn_assets.orchestration.materialize import Session, materialize
from churn_assets.orchestration.scenario_runs import run_scenario
from churn_assets.orchestration.world_registry import add_world
from churn_assets.world.config import load_config

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "snapshots" / "figures_30day.json"
UPDATE_ENV = "CHURNBENCH_UPDATE_FIGURES"
T = dt.date(2024, 1, 30)
CELLS = [("grounding", "tiered", dt.date(2024, 1, 29)), ("grounding", "tiered", dt.date(2024, 1, 2)),
         ("grounding_no_freshness_tiers", "off", dt.date(2024, 1, 2)), ("hierarchical", "tiered", dt.date(2024, 1, 2))]
FIELDS = ("tasks", "verdicts", "stale_answers", "exposure", "prediction", "accuracy", "mean_cost_units", "route_mix")


def figures(session: Session, defs: dg.Definitions, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import churn_assets.orchestration.assets.tasks as task_asset

    monkeypatch.setattr(task_asset, "task_settings", lambda: TaskSettings(count=20, seed=0))
    config = load_config(days=30, name="figures")  # a world of its own: no other test's partitions are reused
    add_world(session.paths, session.instance, config)
    materialize(session, defs, ["ledger"], [config.world_id])
    out: dict[str, Any] = {"world": config.world_id, "t": T.isoformat(), "cells": []}
    for arm, policy, t_prime in CELLS:
        s = run_scenario(session, defs, config.world_id, arm, t_prime, T, policy, "default", lambda _m: None)
        out["cells"].append({"arm": arm, "policy": policy, "t_prime": t_prime.isoformat(),
                             **{k: s[k] for k in FIELDS}})
    return out


def test_four_cells_give_the_committed_figures(session: Session, session_defs: dg.Definitions,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    actual = figures(session, session_defs, monkeypatch)
    if os.environ.get(UPDATE_ENV):
        FIXTURE.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"{FIXTURE.name} rewritten ({UPDATE_ENV} is set): review its diff")
    expected = json.loads(FIXTURE.read_text())
    assert actual["world"] == expected["world"]
    for want, got in zip(expected["cells"], actual["cells"], strict=True):
        assert got == want, f"{want['arm']} {want['policy']} T'={want['t_prime']}: figures moved"
    assert all(c["tasks"] == 20 for c in actual["cells"])
    grounding = [c for c in actual["cells"] if c["arm"].startswith("grounding")]
    assert all(c["stale_answers"] == c["exposure"] for c in grounding)  # section 10: the plan is served exactly
