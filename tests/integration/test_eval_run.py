"""`eval_run` against the real services: it refuses missing inputs with the list, and a scenario built by
`churnbench run`'s path materializes with its metadata readable from the instance."""

from __future__ import annotations

import datetime as dt
from typing import Any

import dagster as dg
import pytest

from churn_assets.commands.run import run_scenario
from churn_assets.materialize import MaterializationError, Session, materialize
from churn_assets.scenarios import ScenarioDef, register_scenario
from churn_assets.world.config import load_config
from churn_assets.world_registry import add_world

pytestmark = pytest.mark.integration

T = dt.date(2024, 1, 12)
T_PRIME = dt.date(2024, 1, 9)


@pytest.fixture(scope="module")
def eval_world(session: Session, session_defs: dg.Definitions) -> str:
    """The default 30-day world under its own name, so no other module's partitions are reused."""
    config = load_config(days=30, name="evalrun")
    add_world(session.paths, session.instance, config)
    materialize(session, session_defs, ["ledger"], [config.world_id])
    return config.world_id


def test_missing_inputs_fail_the_run_with_the_list(session: Session, session_defs: dg.Definitions,
                                                    eval_world: str) -> None:
    scenario = ScenarioDef(eval_world, "naive", "tiered", dt.date(2024, 1, 20), dt.date(2024, 1, 22))
    key = register_scenario(session.paths, session.instance, scenario)
    with pytest.raises(MaterializationError) as err:
        materialize(session, session_defs, ["eval_run"], [key])
    message = str(err.value)
    assert "input partition(s) missing" in message
    assert "task_set" in message and "operational_store" in message


def test_a_scenario_runs_and_its_metadata_is_on_the_instance(session: Session, session_defs: dg.Definitions,
                                                             eval_world: str) -> None:
    summary: dict[str, Any] = run_scenario(session, session_defs, eval_world, "grounding", T_PRIME, T, "tiered",
                                           "default", lambda _m: None)
    verdicts = summary["verdicts"]
    assert summary["tasks"] == sum(verdicts.values()) > 0
    assert verdicts["reasoning_error"] == 0 and verdicts["transport_failure"] == 0
    assert summary["stale_answers"] == summary["exposure"]  # section 10: grounding serves its plan exactly
    event = session.instance.get_latest_materialization_event(dg.AssetKey("eval_run"))
    assert event is not None and event.asset_materialization is not None
    md = event.asset_materialization.metadata
    assert event.asset_materialization.partition == summary["scenario_key"]
    assert md["verdict/correct"].value == verdicts["correct"]
    assert md["exposure"].value == summary["exposure"]
    served = {r.data["entity_class"]: r.data["refresh_day"] for r in md["refresh_day_per_entity_class"].value.records}
    assert served["assignments"] == "2024-01-11" and served["prices"] == T_PRIME.isoformat()
    assert served["tickets"] == T.isoformat()
    assert md["experiment_hash"].value == summary["experiment_hash"]
    # A second run of the same scenario and code version reads the finished results back: nothing is re-asked.
    again = run_scenario(session, session_defs, eval_world, "grounding", T_PRIME, T, "tiered", "default",
                         lambda _m: None)
    assert again["verdicts"] == verdicts and again["results"] == summary["results"]
