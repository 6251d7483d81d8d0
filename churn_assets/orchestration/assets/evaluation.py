"""The `eval_run` asset: one partition per scenario key; it answers a task set through an arm and scores it.

It does not build its inputs (section 10, "Evaluation wiring"): it reads the scenario's stored plan (planned
once, at its first materialization; refused when the registry changed since), checks that every partition
the plan names exists and fails listing the missing ones; `churnbench run` / `paper` call the scenario
materializer first. Lineage edges to its inputs use a mapping that needs no matching keys (all partitions).

A service of the state folder that dies during the evaluation fails the run naming it (`service_errors`), and
an answer that failed in transport while an embedded service is gone is not recorded: the SaaS API killed
mid-run is an outage of this machine, not a transport verdict to keep (a rate-limited or failing external API
still is one). The checkpoint then holds only real answers, and the run resumes once the services are up.

A finished result of the same identity is reused, unless the run carries `RETRY_TRANSPORT_TAG` and that result
has transport failures: then those tasks are answered again into a retry folder (`evaluation/runner.py`).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at decoration time.
import dataclasses
import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.exposure import run_exposure
from churn_assets.evaluation.results import ResultsStore
from churn_assets.evaluation.runner import RunSpec, evaluate, finished_run, transport_failures
from churn_assets.freshness.scenario import DETERMINISTIC_AGENT
from churn_assets.orchestration.assets.common import require_world, user_errors, world_ledger
from churn_assets.orchestration.assets.documents import contract_documents
from churn_assets.orchestration.assets.index import rag_index, vector_index
from churn_assets.orchestration.assets.ledger import ledger
from churn_assets.orchestration.assets.operational import operational_store
from churn_assets.orchestration.assets.staging import STAGED_ASSETS
from churn_assets.orchestration.assets.tasks import task_set
from churn_assets.orchestration.assets.warehouse import warehouse_raw
from churn_assets.orchestration.dead_runs import PID_TAG, process_tags
from churn_assets.orchestration.materialize import MISSING_INPUTS, RETRY_TRANSPORT_TAG, Session
from churn_assets.orchestration.partitions import ANY_PARTITION, SCENARIO_PARTITIONS_NAME, scenario_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.orchestration.scenario_inputs import blocking_checks, job_asset_graph, missing_inputs, scenario_plan
from churn_assets.orchestration.scenarios import load_scenario
from churn_assets.orchestration.unbacked import Unbacked, refusal, scenario_problem
from churn_assets.orchestration.world_registry import using_world
from churn_assets.tasks.gold import shared_resolver
from churn_assets.tasks.task_set import read_tasks, task_set_hash

_INPUTS = [ledger, warehouse_raw, operational_store, contract_documents, vector_index, rag_index, task_set,
           *STAGED_ASSETS]


def results_store(state: StateResource) -> ResultsStore:
    return ResultsStore(state.paths.results_root)


@dg.asset(
    partitions_def=scenario_partitions,
    deps=[dg.AssetDep(a, partition_mapping=ANY_PARTITION) for a in _INPUTS],
    group_name="evaluation",
    kinds={"python"},
    description="An evaluation run: every task of the task set at T answered through the scenario's arm, scored "
                "against ledger gold at T and at the data time actually served (freshness errors told apart "
                "from wrong answers). Keyed by experiment hash and code version; never overwritten.",
)
def eval_run(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    if PID_TAG not in context.run.tags:  # launched from the UI: record which process runs it (dead_runs)
        context.instance.add_run_tags(context.run_id, process_tags())
    problem = scenario_problem(state.paths, context.partition_key)
    if problem is not None:  # a key typed into "Add a partition": refused, and removed from the list
        raise refusal(Unbacked(SCENARIO_PARTITIONS_NAME, context.partition_key, problem))
    with user_errors():
        world = load_scenario(state.paths, context.partition_key).world_id
    # Also when the daemon launched it (no `run_scenario` around it): `worlds rm` refuses while this runs.
    with using_world(state.paths, world):
        return _evaluate(context, state)


def _evaluate(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    from churn_assets.arms.registry import make_arm
    from churn_assets.fabric.roles import arm_secret, prepare_arm
    from churn_assets.fabric.sources import close_sources, connect_sources
    from churn_assets.services import saas_api_key, service_errors

    paths = state.paths
    with user_errors():
        scenario = load_scenario(paths, context.partition_key)
        urls = state.service_urls()
        session = Session(paths, urls, context.instance)
        plan = scenario_plan(session, scenario)  # the stored plan (made now only if it never was)
    world = scenario.world_id
    config = require_world(state, world)
    retry = context.run.tags.get(RETRY_TRANSPORT_TAG) == "true"
    store = results_store(state)
    # A finished result of the same identity is looked up before the inputs are: reusing it reads no input
    # (decision 190). Its identity needs the task set, so a missing task set goes on to the check below.
    found = finished_run(store, scenario, config.config_hash, plan, paths.task_set_file(world, scenario.t),
                         catalog=urls.warehouse)
    if found is not None and not (retry and transport_failures(found[1])):
        # the same identity ran to the end before: reused, never run twice
        run_dir = _result_dir(store, found[0], found[1])
        context.log.info(f"{scenario.key}: reusing the finished result {run_dir}")
        return dg.MaterializeResult(metadata={
            **_metadata(found[1], plan.served_vintage, str(run_dir), (run_dir / "timings.json").read_text()),
            **_lineage(context, scenario, run_dir, str(found[1]["experiment_hash"])), "reused": True})
    # An input whose latest blocking check failed counts as missing: never evaluated against (issue 22).
    missing = missing_inputs(session, plan, checks=blocking_checks(job_asset_graph(context.job_def)))
    if missing:
        listed = "\n  ".join(f"{m} ({why})" for m, why in missing.items())
        raise dg.Failure(f"eval_run {scenario.key}: {len(missing)} input partition(s) missing or not vouched for "
                         "by their blocking checks; under "
                         "`churnbench ui` the `scenario_inputs` sensor now launches `build_scenario`, which builds "
                         f"them and runs this partition again (from the CLI, `churnbench run` builds them first):"
                         f"\n  {listed}", metadata={MISSING_INPUTS: len(missing)}, allow_retries=False)
    tasks = read_tasks(paths.task_set_file(world, scenario.t))
    spec = RunSpec(scenario, config.config_hash, task_set_hash(tasks), plan)
    loaded = world_ledger(state, world)
    resolver = shared_resolver(loaded.records, format_version=loaded.format_version)  # shared by a worker's cells
    agent = None  # the deterministic agent
    if scenario.agent_id != DETERMINISTIC_AGENT:
        from churn_assets.arms.agents.llm import agent_for_scenario

        try:  # the environment's CHURNBENCH_LLM_* settings must still hash to the scenario's agent id
            agent = agent_for_scenario(scenario.agent_id, scenario.model_settings)
        except UserFacingError as e:
            raise dg.Failure(f"eval_run {scenario.key}: {e}") from e
    saas_key = saas_api_key(paths, scenario.saas_profile, world_id=world) if urls.saas else None
    with user_errors():
        warehouse_secret = arm_secret(paths.arm_secret_file)
        prepare_arm(urls.warehouse, world, warehouse_secret)
    sources = connect_sources(world, warehouse_url=urls.warehouse, mongo_url=urls.mongodb, saas_url=urls.saas,
                              saas_key=saas_key, documents_root=paths.contracts_root(world),
                              warehouse_secret=warehouse_secret)
    # The exposure (ledger gold and change rates: CPU) is computed in a thread while the arm answers (mostly
    # waiting on its stores and the SaaS API); answers are scored once it is known. Decision 199.
    exposures = ThreadPoolExecutor(1, thread_name_prefix="churnbench-exposure")
    try:
        with service_errors(paths):  # a store that died mid-run: its name, not a traceback
            arm = _ServiceGuard(make_arm(scenario, sources, served=plan.served_vintage, agent=agent), paths)
            exposure = exposures.submit(run_exposure, loaded.records, tasks, anchor=scenario.t,
                                        t_prime=scenario.t_prime, vintage=arm.planned_vintage, resolver=resolver)

            def progress(done: int, total: int) -> None:
                if done % 20 == 0 or done == total:
                    context.log.info(f"{scenario.key}: {done}/{total} tasks answered")

            saas = sources.saas
            summary = evaluate(arm, tasks, resolver, store, spec, exposure=exposure, progress=progress,
                               retry_transport=retry,
                               transport_counters=(lambda: saas.stats.as_dict()) if saas is not None else None,
                               catalog=urls.warehouse,  # the results catalog records running -> complete/failed
                               on_wait=lambda: context.log.info(f"{scenario.key}: another run of this experiment holds "
                                                                "its results folder; waiting to reuse or resume it"))
    except UserFacingError as e:
        raise dg.Failure(f"eval_run {scenario.key}: {e}") from e
    finally:
        # Not waited for: on success `evaluate` has its result; on a failure or a termination, a thread still
        # measuring must not hold the step's error back (it only reads the ledger and the locked resolver).
        exposures.shutdown(wait=False, cancel_futures=True)
        close_sources(sources)
    run_dir = _result_dir(store, spec, summary)
    timings = (run_dir / "timings.json").read_text()
    return dg.MaterializeResult(metadata={**_metadata(summary, plan.served_vintage, str(run_dir), timings),
                                          **_lineage(context, scenario, run_dir, None), "reused": False})


def _lineage(context: dg.AssetExecutionContext, scenario, run_dir: Path, reused_hash: str | None) -> dict:
    """What the evaluation read (`orchestration/lineage.py`), with the version of each input partition: now, for
    an evaluation that just ran; for a reused result, the versions its first materialization recorded (when the
    latest one holds them for the same experiment), so a reuse does not hide a rematerialized input."""
    import json

    from churn_assets.orchestration import lineage

    rows = [json.loads(line) for line in (run_dir / "tasks.jsonl").read_text().splitlines() if line.strip()]
    read = lineage.with_versions(context.instance, lineage.read_rows(rows, scenario.world_id, scenario.t.isoformat()))
    if reused_hash is not None:
        before = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=[context.partition_key]), limit=1)
        record = before.records[0] if before.records else None
        recorded = lineage.recorded_versions(record)
        experiment = (record.asset_materialization.metadata.get("experiment_hash") if record is not None else None)
        if recorded is not None and experiment is not None and str(experiment.value) == reused_hash:
            read = [dataclasses.replace(r, data_version=recorded.get(str(r.input), r.data_version)) for r in read]
    return lineage.metadata(read)


class _ServiceGuard:
    """The arm, with every answer that failed in transport checked against the embedded services: when one of
    them is gone the run stops with a `ServiceError` naming it, before the answer is recorded."""

    def __init__(self, arm, paths) -> None:
        self._arm, self._paths = arm, paths
        self.name = arm.name

    @property
    def planned_vintage(self) -> dict:
        return self._arm.planned_vintage

    def answer(self, task):
        from churn_assets.services import raise_if_a_service_died

        answer = self._arm.answer(task)
        if answer.transport_error is not None:
            raise_if_a_service_died(self._paths, settle_s=0.5)
        return answer

    def __getattr__(self, name: str):
        return getattr(self._arm, name)


def _result_dir(store: ResultsStore, spec: RunSpec, summary: dict) -> Path:
    """The folder of a finished summary: its code version's first folder, or the retry it names."""
    return store.run_dir(spec.key(summary["code_version"]).retried(int(summary.get("retry", 0))))


def _metadata(summary: dict, served: dict[str, dt.date], run_dir: str, timings_json: str) -> dict:
    import json

    timings = json.loads(timings_json)
    rows = [dg.TableRecord({"entity_class": c, "refresh_day": d.isoformat()}) for c, d in served.items()]
    verdicts = summary["verdicts"]
    return {
        "accuracy": dg.MetadataValue.float(float(summary["accuracy"] or 0.0)),
        "stale_answers": summary["stale_answers"],
        **{f"verdict/{k}": v for k, v in verdicts.items()},
        "exposure": summary["exposure"],
        "prediction": dg.MetadataValue.float(float(summary["prediction"] or 0.0)),
        "mean_cost_units": dg.MetadataValue.float(float(summary["mean_cost_units"] or 0.0)),
        "mean_latency_ms": dg.MetadataValue.float(float(timings.get("mean_latency_ms") or 0.0)),
        "saas_calls": int(timings.get("saas", {}).get("calls", 0)),
        "saas_429s_absorbed": int(timings.get("saas", {}).get("throttled", 0)),
        "route_mix": dg.MetadataValue.json(summary["route_mix"]),
        "refresh_day_per_entity_class": dg.MetadataValue.table(
            rows, schema=dg.TableSchema(columns=[dg.TableColumn("entity_class", "string"),
                                                 dg.TableColumn("refresh_day", "date")])),
        "experiment_hash": summary["experiment_hash"],
        "code_version": summary["code_version"],
        "transport_failures_retried": int(summary.get("transport_failures_retried", 0)),
        "retry": int(summary.get("retry", 0)),
        "results": dg.MetadataValue.path(run_dir),
    }
