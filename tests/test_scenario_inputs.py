"""What a scenario needs built (freshness/scenario.py) and the order the materializer builds it in, on the
paper's dates (docs/rules.md, "The paper's windows"): T = 2024-04-27, D+1 T' = 2024-04-26, D+28 T' = 2024-03-29."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from file_state_locks import use_file_locks

from churn_assets.freshness.scenario import (
    DBT_BUILD,
    SERVES_POLICY,
    Scenario,
    ScenarioError,
    ScenarioInput,
    ScenarioPlan,
    check_days,
    plan_scenario,
)
from churn_assets.grounding.registry import Registry, load_registry
from churn_assets.orchestration.scenario_materializer import Step, depends_on, plan_steps

WORLD = "default-s42-3f9a1c"
T = dt.date(2024, 4, 27)
D1, D28 = dt.date(2024, 4, 26), dt.date(2024, 3, 29)
STAGED = ("staged_assignments", "staged_user_status", "staged_prices", "staged_cost_center_membership",
          "staged_vendor_dims")


def d(month: int, day: int) -> dt.date:
    return dt.date(2024, month, day)


def grounding_plan(registry: Registry, t_prime: dt.date, t: dt.date, policy: str) -> ScenarioPlan:
    """The plan of the grounding arm (it serves the refresh policy) for world WORLD."""
    return plan_scenario(Scenario(WORLD, "grounding", policy, t_prime, t), SERVES_POLICY, registry)


def by_asset(inputs: tuple[ScenarioInput, ...]) -> dict[str, list[dt.date | None]]:
    out: dict[str, list[dt.date | None]] = {}
    for i in inputs:
        assert i.world == WORLD
        out.setdefault(i.asset, []).append(i.day)
    return out


def test_d28_tiered_needs_the_served_partitions_and_the_stores_at_every_refresh_day() -> None:
    plan = grounding_plan(load_registry(), D28, T, "tiered")
    assert plan.registry_hash == load_registry().content_hash
    assert {c: plan.served_vintage[c] for c in ("assignments", "user_status", "prices", "cost_center_membership",
                                                 "contract_terms", "vendor_dims", "consumption")} == {
        "assignments": d(4, 26), "user_status": d(4, 26), "prices": d(4, 22), "cost_center_membership": d(4, 22),
        "contract_terms": D28, "vendor_dims": D28, "consumption": T}
    hot = [D28 + dt.timedelta(days=2 * k) for k in range(15)]  # refreshed every 2 days: 03-29 ... 04-26
    warm = [D28, d(4, 6), d(4, 14), d(4, 22)]
    days = plan.days(D28, T)
    assert days == sorted({*hot, *warm, T})
    assets = by_asset(plan.inputs)
    assert assets["ledger"] == assets["warehouse_truth"] == assets["warehouse_raw"] == assets[DBT_BUILD] == [None]
    assert assets["operational_store"] == assets["contract_documents"] == days
    assert assets["staged_assignments"] == assets["staged_user_status"] == [d(4, 26)]
    assert assets["staged_prices"] == assets["staged_cost_center_membership"] == [d(4, 22)]
    assert assets["staged_vendor_dims"] == assets["vector_index"] == [D28]
    assert "rag_index" not in assets  # the RAG corpus is the RAG arms' own input, never grounding's
    assert assets["task_set"] == [T]
    assert len(plan.inputs) == len(set(plan.inputs)) == 4 + 2 * len(days) + 1 + 5 + 1


def test_off_serves_every_class_as_of_t_prime_and_d1_is_a_control() -> None:
    registry = load_registry()
    off = grounding_plan(registry, D28, T, "off")
    assert off.days(D28, T) == [D28, T]
    assets = by_asset(off.inputs)
    assert all(assets[a] == [D28] for a in (*STAGED, "vector_index"))
    # D+1: nothing is stale on T, so tiered and off need the same partitions and serve the same map.
    tiered1, off1 = grounding_plan(registry, D1, T, "tiered"), grounding_plan(registry, D1, T, "off")
    assert tiered1.inputs == off1.inputs and tiered1.served_vintage == off1.served_vintage


def test_a_plan_round_trips_through_json() -> None:
    plan = grounding_plan(load_registry(), D28, T, "tiered")
    assert ScenarioPlan.from_json(plan.to_json()) == plan


def test_t_prime_after_t_is_refused_in_one_place() -> None:
    with pytest.raises(ScenarioError, match="before T'"):
        check_days(T, D28)
    with pytest.raises(ScenarioError, match="before T'"):
        Scenario(WORLD, "grounding", "tiered", T, D28)
    check_days(T, T)  # T' = T is a scenario too (nothing can be stale)


def test_inputs_come_in_dependency_order() -> None:
    plan = grounding_plan(load_registry(), D28, T, "tiered")
    order = [i.asset for i in plan.inputs]
    assert order[:4] == ["ledger", "warehouse_truth", "warehouse_raw", DBT_BUILD]
    assert order.index("vector_index") > max(i for i, a in enumerate(order) if a == "contract_documents")
    assert min(order.index(a) for a in STAGED) > order.index(DBT_BUILD)
    assert order[-1] == "task_set"


# A toy asset graph for the run planner: what each asset reads, transitively.
ANCESTORS = {
    "ledger": frozenset(),
    "warehouse_truth": frozenset({"ledger"}),
    "warehouse_raw": frozenset({"ledger"}),
    "analytics/dim_vendor": frozenset({"ledger", "warehouse_raw"}),
    "analytics/fct_price": frozenset({"ledger", "warehouse_raw"}),
    "contract_documents": frozenset({"ledger"}),
    "operational_store": frozenset({"ledger"}),
    "vector_index": frozenset({"ledger", "contract_documents"}),
    "rag_index": frozenset({"ledger", "contract_documents"}),
    "staged_prices": frozenset({"ledger", "warehouse_raw", "analytics/fct_price"}),
    "staged_vendor_dims": frozenset({"ledger", "warehouse_raw", "analytics/dim_vendor"}),
    "task_set": frozenset({"ledger"}),
}


def test_runs_are_grouped_and_ordered_after_what_they_read(monkeypatch: pytest.MonkeyPatch) -> None:
    import churn_assets.orchestration.scenario_inputs as si

    monkeypatch.setattr(si, "dbt_asset_keys", lambda: ("analytics/dim_vendor", "analytics/fct_price"))
    missing = [
        ScenarioInput("staged_prices", WORLD, D28), ScenarioInput("vector_index", WORLD, T),
        ScenarioInput("contract_documents", WORLD, T), ScenarioInput("staged_vendor_dims", WORLD, D28),
        ScenarioInput(DBT_BUILD, WORLD), ScenarioInput("warehouse_raw", WORLD), ScenarioInput("warehouse_truth", WORLD),
        ScenarioInput("contract_documents", WORLD, D28), ScenarioInput("ledger", WORLD),
    ]
    steps = plan_steps(missing, ANCESTORS.__getitem__)
    labels = [s.label for s in steps]
    assert labels[:3] == [f"ledger [{WORLD}]", f"warehouse_raw + warehouse_truth [{WORLD}]", f"{DBT_BUILD} [{WORLD}]"]
    assert steps[2].assets == ("analytics/dim_vendor", "analytics/fct_price")
    assert sorted(labels) == sorted(set(labels)) and len(steps) == 8  # the warehouse pair is one run
    position = {s.label: n for n, s in enumerate(steps)}
    assert position[f"contract_documents [{WORLD} {T}]"] < position[f"vector_index [{WORLD} {T}]"]
    # A day-level failure blocks only that day's dependents; a world-level one blocks everything downstream.
    docs_t = next(s for s in steps if s.label == f"contract_documents [{WORLD} {T}]")
    index_t = next(s for s in steps if s.label == f"vector_index [{WORLD} {T}]")
    docs_d28 = next(s for s in steps if s.label == f"contract_documents [{WORLD} {D28}]")
    assert depends_on(index_t, docs_t, ANCESTORS.__getitem__)
    assert not depends_on(index_t, docs_d28, ANCESTORS.__getitem__)
    ledger = steps[0]
    assert all(depends_on(s, ledger, ANCESTORS.__getitem__) for s in steps[1:])
    assert isinstance(ledger, Step) and ledger.partition_key == WORLD
    assert str(index_t.partition_key) == f"{T}|{WORLD}"


def test_a_plan_is_made_once_and_refused_after_a_registry_edit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`scenario_plan` plans a registered scenario on first use and stores the plan; later calls read it; a
    plan made from another registry is refused until `replan`."""
    import dagster as dg

    from churn_assets.arms.registry import define_scenario
    from churn_assets.orchestration.materialize import Session
    from churn_assets.orchestration.scenario_inputs import scenario_plan
    from churn_assets.orchestration.scenarios import register_scenario, stored_plan
    from churn_assets.orchestration.world_registry import write_world_config
    from churn_assets.state import StatePaths
    from churn_assets.world.config import load_config

    paths = StatePaths.resolve(tmp_path / "state").ensure()
    use_file_locks(monkeypatch, paths)  # planning reaches no service
    config = load_config(days=30)
    write_world_config(paths, config)
    instance = dg.DagsterInstance.ephemeral()
    session = Session(paths, None, instance)  # type: ignore[arg-type]  # planning reaches no service
    scenario = define_scenario(config.world_id, "grounding", "tiered", d(1, 10), d(1, 14))
    register_scenario(paths, instance, scenario)
    assert stored_plan(paths, scenario.key) is None
    registry = load_registry()
    plan = scenario_plan(session, scenario, registry=registry)
    assert stored_plan(paths, scenario.key) == plan and plan.served_vintage["assignments"] == d(1, 14)
    assert scenario_plan(session, scenario, registry=registry) == plan
    retiered = registry.with_tiers({"assignments": "warm"})
    with pytest.raises(ScenarioError, match=f"planned with registry {registry.content_hash}.*--replan"):
        scenario_plan(session, scenario, registry=retiered)
    replanned = scenario_plan(session, scenario, registry=retiered, replan=True)
    assert replanned.registry_hash == retiered.content_hash and replanned.served_vintage["assignments"] == d(1, 10)
    assert stored_plan(paths, scenario.key) == replanned
    # Outside the world's calendar: refused when planned.
    late = define_scenario(config.world_id, "grounding", "tiered", d(1, 10), d(3, 1))
    register_scenario(paths, instance, late)
    with pytest.raises(ScenarioError, match="outside the calendar"):
        scenario_plan(session, late, registry=registry)


def test_a_stored_budget_plan_of_the_old_semantics_is_planned_again(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Decision 206: a state folder holding a budget cell planned before its schedule was fixed at T' (plan version
    2: every class's last refresh on T) gets it planned again on the next use, with the new schedule; a tiered cell
    planned then is planned again to the same plan (its experiment identity, TTLs and vintage, is unchanged)."""
    import json

    import dagster as dg

    from churn_assets.arms.registry import define_scenario
    from churn_assets.freshness.scenario import PLAN_VERSION
    from churn_assets.orchestration.materialize import Session
    from churn_assets.orchestration.scenario_inputs import scenario_plan
    from churn_assets.orchestration.scenarios import register_scenario, stored_plan
    from churn_assets.orchestration.world_registry import write_world_config
    from churn_assets.state import StatePaths
    from churn_assets.world.config import load_config

    paths = StatePaths.resolve(tmp_path / "state").ensure()
    use_file_locks(monkeypatch, paths)  # planning reaches no service
    config = load_config(days=30)
    write_world_config(paths, config)
    instance = dg.DagsterInstance.ephemeral()
    session = Session(paths, None, instance)  # type: ignore[arg-type]  # planning reaches no service
    registry = load_registry()
    t_prime, t = d(1, 2), d(1, 29)
    budget = define_scenario(config.world_id, "grounding", "uniform:8", t_prime, t)
    tiered = define_scenario(config.world_id, "grounding", "tiered", t_prime, t)
    staged = [c.name for c in registry.staged_classes]
    for scenario in (budget, tiered):
        register_scenario(paths, instance, scenario)
    # What a state folder of the old semantics holds: uniform:8's every class refreshed last on T (served at T).
    old_budget = {"plan_version": 2, "effective_ttls": {}, "registry_hash": registry.content_hash,
                  "refresh_days": {c: [t_prime.isoformat(), t.isoformat()] for c in staged},
                  "served_vintage": {c: t.isoformat() for c in registry.classes}, "inputs": []}
    tiered_now = scenario_plan(session, tiered, registry=registry)
    old_tiered = {**tiered_now.to_json(), "plan_version": 2}
    for scenario, plan in ((budget, old_budget), (tiered, old_tiered)):
        file = paths.scenario_file(scenario.key)
        data = json.loads(file.read_text())
        data["plan"] = plan
        file.write_text(json.dumps(data))
        assert stored_plan(paths, scenario.key) is None  # another plan version: not used
    replanned = scenario_plan(session, budget, registry=registry)
    assert replanned.served_vintage["prices"] == d(1, 25)  # every 22.5 days from T': 01-25, the next 02-16
    assert replanned.refresh_days["prices"] == [t_prime, d(1, 25)]
    stored = json.loads(paths.scenario_file(budget.key).read_text())["plan"]
    assert stored["plan_version"] == PLAN_VERSION and stored_plan(paths, budget.key) == replanned
    again = scenario_plan(session, tiered, registry=registry)
    assert again == tiered_now and again.effective_ttls == tiered_now.effective_ttls
