"""A sweep against the real services (in process, as `churnbench sweep` runs it): exposure-only cells equal the
evaluated cells' exposure and stale answers, a relaunch reuses every cell, the report is materialized and its
files written, a failed cell fails alone, and `sweep rm` removes what it listed."""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg
import pytest
from few_tasks import use_task_count

from churn_assets.arms.registry import TIERED_ARM
from churn_assets.orchestration.materialize import Session, materialize
from churn_assets.orchestration.sweep_records import load_sweep, sweep_file, sweep_report_dir
from churn_assets.orchestration.sweeps import plan_removal, remove_sweep, run_sweep
from churn_assets.orchestration.world_registry import add_world
from churn_assets.sweeps.presets import uniform_ttl
from churn_assets.sweeps.spec import SweepSpec
from churn_assets.world.config import load_config

pytestmark = pytest.mark.integration

T = dt.date(2024, 1, 30)
TASKS = 20
TTL = 7


@pytest.fixture(scope="module")
def sweep_world(session: Session, session_defs: dg.Definitions) -> str:
    config = load_config(days=30, name="sweeps")  # its own world: no other module's partitions are reused
    add_world(session.paths, session.instance, config)
    materialize(session, session_defs, ["ledger"], [config.world_id])
    return config.world_id


@pytest.fixture
def few_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    use_task_count(monkeypatch, TASKS)


def test_a_grid_sweep_evaluates_checks_reuses_and_reports(session: Session, session_defs: dg.Definitions,
                                                           sweep_world: str, few_tasks: None) -> None:
    # One TTL of 7 days for every class (three refreshes of each in the 27 days; TTL 0 would build 27 days of
    # every input for the same checks).
    # With a window of 2 arrival days (T - 1 and T, T' = T - 27), exposure-only: the day before T asks T's task set
    # re-anchored (issue 34).
    spec = SweepSpec("it-grid", (sweep_world,), (TIERED_ARM,), (uniform_ttl(TTL), "off"), T,
                     gaps=(27,), exposure_only=True, evaluate_worlds=(0,), options={"ttls": [TTL]},
                     window_days=2, window_gaps=(27,))
    lines: list[str] = []
    record = run_sweep(session, session_defs, spec, echo=lines.append)
    assert record.status_counts() == {"done": 2, "failed": 0, "pending": 0, "skipped": 0}
    from churn_assets.orchestration.partitions import REGRESSION_PARTITIONS_NAME, SWEEP_PARTITIONS_NAME

    assert record.sweep_id in session.instance.get_dynamic_partitions(SWEEP_PARTITIONS_NAME)
    assert record.sweep_id not in session.instance.get_dynamic_partitions(REGRESSION_PARTITIONS_NAME)
    exposure = {r["cell"]["policy"]: r for r in record.exposure_rows if r["cell"]["t"] == T.isoformat()}
    earlier = [r for r in record.exposure_rows if r["cell"]["t"] != T.isoformat()]
    assert len(earlier) == 2 and all(r["task_anchor"] == T.isoformat() and r["tasks"] <= TASKS for r in earlier)
    for cell in record.cells:
        outcome = record.outcomes[record.key_of(cell)]
        # The ledger-only path and the evaluated path agree: same plan, same exposure and prediction, and for
        # the deterministic agent on grounding stale answers equal exposure.
        assert outcome["exposure"] == exposure[cell.policy]["exposure"] == outcome["stale_answers"]
        assert outcome["prediction"] == exposure[cell.policy]["prediction"]
        assert outcome["planned_vintage"] == exposure[cell.policy]["served_vintage"]
        assert outcome["tasks"] == TASKS and outcome["reused"] is False
    off = next(o for o in record.outcomes.values() if o["cell"]["policy"] == "off")
    ttl = next(o for o in record.outcomes.values() if o["cell"]["policy"] == uniform_ttl(TTL))
    assert off["refreshes"] == 0 and sum(off["refresh_rows"].values()) == 0
    assert ttl["refreshes"] > 0 and all(v and v > 0 for v in ttl["refresh_rows"].values()), ttl["refresh_rows"]
    # Where the refresh's partition was built (the served day: the last refresh), the count is what it holds.
    from churn_assets.fabric.postgres import connection
    from churn_assets.grounding.refresh_cost import refresh_rows
    from churn_assets.grounding.staging import partition_record

    with connection(session.urls.warehouse) as conn:
        served = dt.date.fromisoformat(ttl["planned_vintage"]["prices"])
        assert T - dt.timedelta(days=TTL) < served <= T
        [counted] = refresh_rows(conn, sweep_world, {"prices": [served]}, served - dt.timedelta(days=1),
                                 session.paths.contracts_root(sweep_world)).values()
        record_ = partition_record(conn, sweep_world, "prices", served)
        assert record_ is not None and counted == record_.rows > 0

    event = session.instance.get_latest_materialization_event(dg.AssetKey("sweep_report"))
    assert event is not None and event.asset_materialization is not None
    assert event.asset_materialization.partition == spec.sweep_id
    assert "data:image/png;base64," in event.asset_materialization.metadata["report"].value  # type: ignore[operator]
    folder = sweep_report_dir(session.paths, spec.sweep_id)
    data = json.loads((folder / "report.json").read_text())
    assert {g["ttl"] for g in data["ttl_grid"]} == {TTL}
    assert all(g["stale_equals_exposure"] for g in data["ttl_grid"])
    windows = {w["policy"]: w for w in data["windows"]}
    for policy, w in windows.items():  # the window's last day is the evaluated cell at T
        assert w["days"] == 2 and w["per_day"][-1] == exposure[policy]["exposure"]
    assert data["ttl_window"][0]["ttl"] == TTL and "ttl_window" in data["figures"]

    # A relaunch reuses every cell without building or checking any input again (decision 190): neither the
    # scenario materializer nor eval_run's input check may run.
    import churn_assets.orchestration.assets.evaluation as evaluation_asset
    import churn_assets.orchestration.scenario_materializer as materializer

    def not_again(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a finished cell's inputs were checked again")

    again: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(materializer, "materialize_scenario", not_again)
        mp.setattr(evaluation_asset, "missing_inputs", not_again)
        rerun = run_sweep(session, session_defs, spec, echo=again.append)
    assert all(o["inputs_built"] == 0 for o in rerun.outcomes.values()), again
    assert all(o["reused"] for o in rerun.outcomes.values())
    assert sum("reused" in line for line in again) == 2
    assert {k: o["experiment_hash"] for k, o in rerun.outcomes.items()} == \
        {k: o["experiment_hash"] for k, o in record.outcomes.items()}

    removal = plan_removal(session, spec.sweep_id)
    assert len(removal.scenarios) == 2
    remove_sweep(session, removal)
    assert not (folder / "report.json").exists()
    assert not any(session.instance.has_dynamic_partition("scenario", k) for k in removal.scenarios)
    with pytest.raises(Exception, match="no sweep"):
        load_sweep(session.paths, spec.sweep_id)


def test_a_grid_with_an_impossible_cell_is_refused_before_anything_is_registered(
        session: Session, session_defs: dg.Definitions, sweep_world: str, few_tasks: None) -> None:
    """Issue 36: T' before the world's first day is refused at the start, naming the gap and its range, and no
    sweep or scenario is registered (a cell that fails while it runs fails alone: test_figures_unchanged.py's
    two batches, whose refused cell is one of three)."""
    from churn_assets.evaluation.requests import RequestError
    from churn_assets.orchestration.partitions import SCENARIO_PARTITIONS_NAME, SWEEP_PARTITIONS_NAME

    spec = SweepSpec("it-fail", (sweep_world,), ("naive",), ("tiered",), dt.date(2024, 1, 5), gaps=(1, 10))
    before = {n: set(session.instance.get_dynamic_partitions(n)) for n in (SCENARIO_PARTITIONS_NAME,
                                                                         SWEEP_PARTITIONS_NAME)}
    with pytest.raises(RequestError, match=r"gap 10 gives T' = 2023-12-26, before the calendar .* a gap is 0\.\.4"):
        run_sweep(session, session_defs, spec, echo=lambda _m: None)
    assert {n: set(session.instance.get_dynamic_partitions(n)) for n in before} == before
    assert not sweep_file(session.paths, spec.sweep_id).exists()


def test_an_llm_sweep_prints_its_estimate_and_stops_at_its_budget(session: Session, session_defs: dg.Definitions,
                                                                    sweep_world: str, few_tasks: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A local OpenAI-compatible endpoint answers every question at once, reporting 1M prompt tokens per call
    (gpt-4o-mini: $0.15 a call): the first cell spends $3, which passes the $1 cap, so the second is skipped."""
    import threading

    from test_llm_endpoint import CLIENT_ENV, Endpoint, text_reply

    endpoint = Endpoint()
    endpoint.respond = lambda body: (200, text_reply(body, "unknown", (1_000_000, 5)), {})
    thread = threading.Thread(target=endpoint.server.serve_forever, daemon=True)
    thread.start()
    for var in CLIENT_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CHURNBENCH_LLM_BASE_URL", endpoint.base_url)
    monkeypatch.setenv("CHURNBENCH_LLM_MODEL", "gpt-4o-mini")
    monkeypatch.setenv("CHURNBENCH_LLM_API_KEY", "sk-local-test")
    try:
        spec = SweepSpec("it-llm", (sweep_world,), ("naive",), ("tiered",), T, gaps=(1, 2), agent="llm")
        lines: list[str] = []
        record = run_sweep(session, session_defs, spec, echo=lines.append, llm_budget_usd=1.0, report=False)
    finally:
        endpoint.server.shutdown()
        endpoint.server.server_close()
    assert any(line.startswith("LLM estimate for 2 cell(s) x 20 task(s)") for line in lines)
    assert record.status_counts() == {"done": 1, "failed": 0, "pending": 0, "skipped": 1}
    [done] = [o for o in record.outcomes.values() if o["status"] == "done"]
    assert done["llm_usage"]["model_calls"] == TASKS and done["llm_usage"]["cost_usd"] == pytest.approx(3.0, 0.01)
    assert all("__llm-" in k for k in record.outcomes)  # the agent id is in every key
    assert len(endpoint.seen) == TASKS  # nothing was asked for the skipped cell
