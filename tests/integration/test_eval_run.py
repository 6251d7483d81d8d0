"""`eval_run` against the real services: it refuses missing inputs with the list, and a scenario built by
`churnbench run`'s path materializes with its metadata readable from the instance."""

from __future__ import annotations

import datetime as dt
from typing import Any

import dagster as dg
import pytest
from scripted_answer import ScriptedAnswer

from churn_assets.arms.registry import define_scenario
from churn_assets.orchestration.materialize import MaterializationError, Session, materialize
from churn_assets.orchestration.scenario_runs import run_scenario
from churn_assets.orchestration.scenarios import register_scenario
from churn_assets.orchestration.world_registry import add_world
from churn_assets.world.config import load_config

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
    scenario = define_scenario(eval_world, "naive", "tiered", dt.date(2024, 1, 20), dt.date(2024, 1, 22))
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
    assert summary["stale_answers"] == summary["exposure"]  # docs/rules.md, "Exposure and prediction"
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


def test_eval_run_serves_the_stored_plan_and_refuses_one_of_another_registry(
        session: Session, session_defs: dg.Definitions, eval_world: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import churn_assets.orchestration.scenario_inputs as scenario_inputs
    from churn_assets.grounding.registry import load_registry
    from churn_assets.orchestration.scenarios import stored_plan

    summary = run_scenario(session, session_defs, eval_world, "grounding", T_PRIME, T, "tiered", "default",
                           lambda _m: None)
    key = summary["scenario_key"]
    plan = stored_plan(session.paths, key)
    assert plan is not None and plan.registry_hash == load_registry().content_hash
    event = session.instance.get_latest_materialization_event(dg.AssetKey("eval_run"))
    assert event is not None and event.asset_materialization is not None
    md = event.asset_materialization.metadata["refresh_day_per_entity_class"].value
    assert {r.data["entity_class"]: r.data["refresh_day"] for r in md.records} == {
        c: d.isoformat() for c, d in plan.served_vintage.items()}
    # A re-tiered registry: the stored plan is refused in one line, never served silently or re-planned.
    retiered = load_registry().with_tiers({"assignments": "warm"})
    monkeypatch.setattr(scenario_inputs, "load_registry", lambda: retiered)
    with pytest.raises(MaterializationError, match=r"was planned with registry .* `--replan`"):
        materialize(session, session_defs, ["eval_run"], [key])
    assert stored_plan(session.paths, key) == plan


# ---------------------------------------------------------------------------------------------------
# The results catalog, `results list|show` and `verify-results` (issue 13)
# ---------------------------------------------------------------------------------------------------


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from churn_assets.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def grounding_run(session: Session, session_defs: dg.Definitions, eval_world: str) -> dict[str, Any]:
    """The grounding scenario of this module (run once; a second call reads the finished results back)."""
    return run_scenario(session, session_defs, eval_world, "grounding", T_PRIME, T, "tiered", "default",
                        lambda _m: None)


def test_the_catalog_has_the_run_complete_with_its_figures(session: Session, grounding_run: dict[str, Any]) -> None:
    from pathlib import Path

    from churn_assets.evaluation.catalog import RunCatalog

    s = grounding_run
    [row] = [r for r in RunCatalog(session.urls.warehouse).find(s["scenario_key"])
             if r.code_version == s["code_version"]]
    assert row.status == "complete" and row.error is None and row.finished_at is not None
    assert (row.experiment_hash, row.world, row.arm, row.policy) == (s["experiment_hash"], s["experiment"]["world_id"],
                                                                     "grounding", "tiered")
    assert (row.t_prime, row.t, row.agent_id, row.saas_profile) == (T_PRIME, T, "det", "default")
    assert row.tasks == s["tasks"] and row.accuracy == s["accuracy"] and row.verdicts == s["verdicts"]
    assert (row.stale_answers, row.exposure, row.prediction) == (s["stale_answers"], s["exposure"], s["prediction"])
    assert row.mean_latency_ms == s["mean_latency_ms"] and row.mean_cost_units == s["mean_cost_units"]
    assert row.results_dir == s["results"] and all(Path(p).is_file() for p in row.files.values() if p)

    listing = _cli("results", "list", "--world", row.world)
    assert listing.exit_code == 0, listing.output
    line = next(x for x in listing.output.splitlines() if s["scenario_key"] in x)
    assert row.experiment_hash[:10] in line and "complete" in line and f"{100 * row.accuracy:.1f}%" in line
    for ref in (s["scenario_key"], row.experiment_hash[:8], str(row.run_id)):
        shown = _cli("results", "show", ref)
        assert shown.exit_code == 0, shown.output
        assert f"run {row.run_id}: {s['scenario_key']}" in shown.output
        assert f"correct {s['verdicts']['correct']}" in shown.output
        assert str(Path(s["results"]) / "tasks.jsonl") in shown.output
    missing = _cli("results", "show", "ffffffffffff")
    assert missing.exit_code == 1 and "no run 'ffffffffffff' in the results catalog" in missing.stderr


def test_verify_results_confirms_every_row_and_rejects_a_tampered_one(grounding_run: dict[str, Any],
                                                                       tmp_path: Any) -> None:
    import json
    import shutil

    s = grounding_run
    ok = _cli("verify-results", s["scenario_key"])
    assert ok.exit_code == 0, ok.output + ok.stderr
    assert f"{s['tasks']} rows confirmed" in ok.output

    forged = tmp_path / "forged"
    shutil.copytree(s["results"], forged)
    rows = [json.loads(x) for x in (forged / "tasks.jsonl").read_text().splitlines()]
    victim = next(r for r in rows if r["verdict"] == "correct")
    victim["verdict"] = "freshness_error"
    (forged / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bad = _cli("verify-results", str(forged))
    assert bad.exit_code == 1
    assert f"task {victim['task_id']}: verdict stored \"freshness_error\", recomputed \"correct\"" in bad.output
    assert "run(s) not confirmed" in bad.stderr


class _GoldArm:
    """Answers gold at T (as naive does), records its run's catalog status while answering, and raises
    `error` on call `fail_on`."""

    name = "catalog_probe"

    def __init__(self, resolver: Any, status: Any, fail_on: int | None = None,
                 error: BaseException | None = None) -> None:
        self.resolver, self.status, self.fail_on, self.error = resolver, status, fail_on, error
        self.calls, self.seen = 0, []

    @property
    def planned_vintage(self) -> dict[str, dt.date]:
        return {c: T for c in _classes()}

    def answer(self, task: Any) -> ScriptedAnswer:
        self.calls += 1
        self.seen.append(self.status())
        if self.calls == self.fail_on:
            raise self.error or RuntimeError("probe failure")
        value = self.resolver.gold(task.template, task.params, anchor=T)
        return ScriptedAnswer(task.task_id, value, "", {c: T for c in task.template.classes}, route="probe")


def _classes() -> list[str]:
    from churn_assets.world.fold import uniform_vintage

    return sorted(uniform_vintage(T))


@pytest.mark.parametrize("error", [KeyboardInterrupt("interrupted"), RuntimeError("source refused")],
                         ids=["interrupt", "error"])
def test_a_failed_run_is_recorded_failed_and_its_resume_complete(session: Session, eval_world: str,
                                                                 grounding_run: dict[str, Any], tmp_path: Any,
                                                                 error: BaseException) -> None:
    from churn_assets.evaluation.catalog import RunCatalog
    from churn_assets.evaluation.results import ResultsStore
    from churn_assets.evaluation.runner import RunSpec, evaluate
    from churn_assets.freshness.scenario import Scenario
    from churn_assets.tasks.gold import GoldResolver
    from churn_assets.tasks.task_set import read_tasks, task_set_hash
    from churn_assets.world.ledger import load_ledger

    tasks = read_tasks(session.paths.task_set_file(eval_world, T))[:5]
    loaded = load_ledger(session.paths.ledger_dir(eval_world))
    resolver = GoldResolver(loaded.records, format_version=loaded.format_version)
    spec = RunSpec(Scenario(eval_world, _GoldArm.name, "tiered", T_PRIME, T), "probe", task_set_hash(tasks))
    code = f"git-probe-{type(error).__name__.lower()}"
    store, catalog = ResultsStore(tmp_path), RunCatalog(session.urls.warehouse)

    def status() -> str | None:
        rows = [r for r in catalog.find(spec.scenario_key) if r.code_version == code]
        return rows[0].status if rows else None

    arm = _GoldArm(resolver, status, fail_on=3, error=error)
    with pytest.raises(type(error)):
        evaluate(arm, tasks, resolver, store, spec, code=code, catalog=session.urls.warehouse)
    assert arm.seen == ["running"] * 3
    [row] = [r for r in catalog.find(spec.scenario_key) if r.code_version == code]
    assert row.status == "failed" and type(error).__name__ in (row.error or "")
    assert row.tasks is None and row.accuracy is None and row.finished_at is not None
    assert not store.is_complete(spec.key(code))
    listing = _cli("results", "list", "--world", eval_world)
    assert "failed" in next(x for x in listing.output.splitlines() if spec.scenario_key in x and code in x)
    unverifiable = _cli("verify-results", str(row.run_id))
    assert unverifiable.exit_code == 1 and "is failed: only a complete run can be verified" in unverifiable.stderr

    resumed = _GoldArm(resolver, status)
    summary = evaluate(resumed, tasks, resolver, store, spec, code=code, catalog=catalog)
    assert resumed.seen == ["running"] * 3  # the two checkpointed answers are not asked again
    [row] = [r for r in catalog.find(spec.scenario_key) if r.code_version == code]
    assert row.status == "complete" and row.error is None and row.attempts == 2
    assert row.verdicts == summary["verdicts"] and row.verdicts["correct"] == 5 and row.accuracy == 1.0

    # A complete run whose folder was removed by hand and that fails when run again must not read complete.
    import shutil

    shutil.rmtree(store.run_dir(spec.key(code)))
    with pytest.raises(type(error)):
        evaluate(_GoldArm(resolver, status, fail_on=1, error=error), tasks, resolver, store, spec, code=code,
                 catalog=catalog)
    [row] = [r for r in catalog.find(spec.scenario_key) if r.code_version == code]
    assert row.status == "failed" and row.attempts == 3
