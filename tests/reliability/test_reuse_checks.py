"""A partition is reused only when its latest blocking checks passed (issue 22, item 5): the real instance and
services of the session's state folder, a 30-day world of this module's own.

The ledger is the cheapest partition with a blocking check (`ledger_hash_chain`): materialized, it is reused;
broken on disk and checked again (`worlds check` runs the same check-only run), its failed check makes it
missing for the scenario materializer, which rebuilds it. `eval_run` reads the warehouse (the ledger is no
input of a scenario): a truth schema tampered with after its materialization fails its blocking check, and
`eval_run` refuses to start, naming the partition and the check."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from churn_assets.arms.registry import define_scenario
from churn_assets.fabric.postgres import connection, schema_name
from churn_assets.freshness.scenario import LEDGER, ScenarioInput
from churn_assets.orchestration.materialize import MaterializationError, Session, materialize, run_checks
from churn_assets.orchestration.scenario_inputs import blocking_checks, existing_inputs
from churn_assets.orchestration.scenario_materializer import Step, build_step
from churn_assets.orchestration.scenarios import register_scenario
from churn_assets.orchestration.world_registry import add_world
from churn_assets.world.config import load_config
from churn_assets.world.ledger import LEDGER_FILE

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def world(session: Session, session_defs: dg.Definitions) -> str:
    config = load_config(days=30, name="reusecheck")
    add_world(session.paths, session.instance, config)
    materialize(session, session_defs, [LEDGER], [config.world_id])
    materialize(session, session_defs, ["warehouse_truth", "warehouse_raw"], [config.world_id])
    return config.world_id


def test_a_partition_whose_blocking_check_failed_later_is_rebuilt_not_reused(
        session: Session, session_defs: dg.Definitions, world: str) -> None:
    checks = blocking_checks(session_defs.resolve_asset_graph())
    assert [c.name for c in checks[LEDGER]] == ["ledger_hash_chain"]
    item = ScenarioInput(LEDGER, world)
    assert existing_inputs(session, [item], checks=checks) == ({item}, {})  # materialized, check passed: reused

    ledger_file = session.paths.ledger_dir(world) / LEDGER_FILE
    good = ledger_file.read_bytes()
    ledger_file.write_bytes(good + b'{"not": "an event"}\n')  # the data breaks after its materialization
    [evaluation] = run_checks(session, session_defs, list(checks[LEDGER]), world)  # as `worlds check` does
    assert not evaluation.passed
    assert existing_inputs(session, [item], checks=checks) == (
        set(), {item: "its blocking check ledger_hash_chain failed"})

    # the materializer's step rebuilds it (the recorded materialization is not trusted), and the check passes
    lines: list[str] = []
    step = Step((LEDGER,), (item,), world, None)
    result = build_step(session, session_defs, step, {}, lines.append)
    assert result.ok and not result.built_elsewhere, lines
    assert ledger_file.read_bytes() == good
    assert existing_inputs(session, [item], checks=checks) == ({item}, {})


def test_eval_run_refuses_an_input_whose_blocking_check_failed(session: Session, session_defs: dg.Definitions,
                                                               world: str) -> None:
    checks = blocking_checks(session_defs.resolve_asset_graph())
    truth = ScenarioInput("warehouse_truth", world)
    assert existing_inputs(session, [truth], checks=checks) == ({truth}, {})
    with connection(session.urls.warehouse, autocommit=True) as conn:  # tampered with after it was checked
        conn.execute(f'UPDATE "{schema_name(world, "truth")}".events SET at = at + 1 WHERE seq = 5'.encode())
    [evaluation] = run_checks(session, session_defs, list(checks["warehouse_truth"]), world)
    assert not evaluation.passed

    scenario = define_scenario(world, "naive", "tiered", dt.date(2024, 1, 20), dt.date(2024, 1, 22))
    key = register_scenario(session.paths, session.instance, scenario)
    with pytest.raises(MaterializationError) as refused:
        materialize(session, session_defs, ["eval_run"], [key])
    assert f"warehouse_truth[{world}] (its blocking check warehouse_truth_matches_ledger failed)" \
        in str(refused.value)
