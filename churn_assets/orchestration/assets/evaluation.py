"""The `eval_run` asset: one partition per scenario key; it answers a task set through an arm and scores it.

It does not build its inputs (docs/rules.md, "Evaluation wiring"): it reads the scenario's stored plan (planned
once, at its first materialization; refused when the registry changed since), checks that every partition
the plan names exists and fails listing the missing ones; `churnbench run` / `paper` call the scenario
materializer first. Lineage edges to its inputs use a mapping that needs no matching keys (all partitions).

A service of the state folder that dies during the evaluation fails the run naming it (`service_errors`), and
an answer that failed in transport while an embedded service is gone is not recorded: the SaaS API killed
mid-run is an outage of this machine, not a transport verdict to keep (a rate-limited or failing external API
still is one). The checkpoint then holds only real answers, and the run resumes once the services are up.

A finished result of the same identity is reused, unless the run carries `RETRY_TRANSPORT_TAG` and that result
has transport failures: then those tasks are answered again into a retry folder (`evaluation/runner.py`).

A run tagged `REPEATS_TAG` = K answers K repeats of the experiment (`evaluation/repeats.py`): each repeat its own
results folder, reused on its own, with a fresh arm (an LLM agent sampling with the repeat's seed); the exposure
is computed once. The metadata are repeat 0's figures (a single run's, unchanged) plus the experiment's:
efficiency, staleness awareness and, for K > 1, mean accuracy with its interval, pass^K, pass@K and stability.
The deterministic agent's repeats must answer alike: a difference fails the run, naming the tasks.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at decoration time.
import dataclasses
import datetime as dt
import functools
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg

from churn_assets.arms.registry import arm_spec, make_arm
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.exposure import run_exposure
from churn_assets.evaluation.repeats import compact, evaluate_repeats, finished_repeats, read_repeats
from churn_assets.evaluation.results import ResultsStore
from churn_assets.evaluation.runner import RunSpec, finished_run, transport_failures
from churn_assets.evaluation.seals import SEAL_METADATA
from churn_assets.fabric.roles import arm_secret, prepare_arm
from churn_assets.fabric.sources import close_sources, connect_sources
from churn_assets.fabric.warehouse_content import WarehouseCheck
from churn_assets.freshness.scenario import DETERMINISTIC_AGENT
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.routes import warehouse_views
from churn_assets.orchestration.assets.common import require_world, step_failure, user_errors, world_ledger
from churn_assets.orchestration.assets.documents import contract_documents
from churn_assets.orchestration.assets.index import rag_index, vector_index
from churn_assets.orchestration.assets.ledger import ledger
from churn_assets.orchestration.assets.operational import operational_store
from churn_assets.orchestration.assets.staging import STAGED_ASSETS
from churn_assets.orchestration.assets.tasks import task_set
from churn_assets.orchestration.assets.warehouse import warehouse_raw
from churn_assets.orchestration.dead_runs import has_process_tags, process_tags
from churn_assets.orchestration.materialize import MISSING_INPUTS, RETRY_TRANSPORT_TAG, Session, repeats_of
from churn_assets.orchestration.partitions import ANY_PARTITION, SCENARIO_PARTITIONS_NAME, scenario_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.orchestration.scenario_in_hand import in_hand
from churn_assets.orchestration.scenario_inputs import (
    blocking_checks,
    drawn_settings,
    job_asset_graph,
    missing_inputs,
    scenario_plan,
)
from churn_assets.orchestration.scenarios import StoredScenario, read_scenario
from churn_assets.orchestration.unbacked import Unbacked, refusal, scenario_problem
from churn_assets.orchestration.world_registry import using_world
from churn_assets.seal_key import seal_key
from churn_assets.services import raise_if_a_service_died, saas_api_key, service_errors
from churn_assets.services.llm import LlmServerConfig, ensure_llm_server, llm_server_failure
from churn_assets.state_locks import state_locks
from churn_assets.tasks.gold import shared_resolver
from churn_assets.tasks.task_set import read_tasks, task_set_hash
from churn_assets.unique_keys import load_json

_INPUTS = [ledger, warehouse_raw, operational_store, contract_documents, vector_index, rag_index, task_set,
           *STAGED_ASSETS]


def results_store(state: StateResource) -> ResultsStore:
    return ResultsStore(state.paths.results_root, state_locks(state.paths))


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
    if not has_process_tags(context.run.tags):  # launched from the UI: record which process runs it (dead_runs)
        context.instance.add_run_tags(context.run_id, process_tags())
    handed = in_hand(context.partition_key)
    if handed is not None:  # `run_scenario` read the scenario and holds its world's use lock for this run
        return _evaluate(context, state, handed.stored)
    problem = scenario_problem(state.paths, context.partition_key)
    if problem is not None:  # a key typed into "Add a partition": refused, and removed from the list
        raise refusal(Unbacked(SCENARIO_PARTITIONS_NAME, context.partition_key, problem))
    with user_errors():
        read = read_scenario(state.paths, context.partition_key)
    # Launched from the UI or by the daemon (no `run_scenario` around it): `worlds rm` refuses while this runs.
    with using_world(state.paths, read.scenario.world_id):
        return _evaluate(context, state, read)


def _evaluate(context: dg.AssetExecutionContext, state: StateResource, read: StoredScenario) -> dg.MaterializeResult:
    paths = state.paths
    scenario = read.scenario
    with user_errors():
        urls = state.service_urls()
        session = Session(paths, urls, context.instance)
        plan = scenario_plan(session, scenario, read=read)  # the stored plan (made now only if it never was)
    world = scenario.world_id
    config = require_world(state, world)
    retry = context.run.tags.get(RETRY_TRANSPORT_TAG) == "true"
    deterministic = scenario.agent_id == DETERMINISTIC_AGENT
    with user_errors():
        repeats = repeats_of(context.run.tags)
    store = results_store(state)
    # Seals are made, and the warehouse's content record checked, under this state folder's key (not the one
    # CHURNBENCH_STATE_DIR names, if they differ).
    state_key = seal_key(paths.root)
    catalog = RunCatalog(urls.warehouse, state_key)
    t_iso = scenario.t.isoformat()
    # A finished result of the same identity is looked up before the inputs are: reusing it reads no input
    # (decision 190). Its identity needs the task set, so a missing task set goes on to the check below.
    found = finished_run(store, scenario, config.config_hash, plan, paths.task_set_file(world, scenario.t),
                         drawn=drawn_settings(), catalog=catalog)
    keys = finished_repeats(store, found[0], repeats, code=found[1]["code_version"]) if found is not None else None
    if keys is not None and not (retry and any(transport_failures(store.read_summary(k)) for k in keys)):
        # every repeat of the same identity ran to the end before: reused, never run twice
        try:
            experiment = read_repeats(store, keys, t_iso, deterministic)
        except UserFacingError as e:
            raise step_failure(f"eval_run {scenario.key}: {e}") from e
        with user_errors():
            RunCatalog(urls.warehouse).record_experiment(scenario, keys[0], experiment)
        run_dir = store.run_dir(keys[0])
        context.log.info(f"{scenario.key}: reusing the finished result {run_dir}"
                         + (f" and its {repeats - 1} other repeat(s)" if repeats > 1 else ""))
        return dg.MaterializeResult(metadata={
            **_metadata(store.read_summary(keys[0]), plan.served_vintage, str(run_dir),
                        (run_dir / "timings.json").read_text()),
            **_experiment_metadata(experiment), **_seal_metadata(urls.warehouse, store, keys),
            **_lineage(context, scenario, run_dir, keys[0].experiment_hash), "reused": True})
    # An input whose latest blocking check failed counts as missing: never evaluated against (issue 22).
    missing = missing_inputs(session, plan, checks=blocking_checks(job_asset_graph(context.job_def)))
    if missing:
        listed = "; ".join(f"{m} ({why})" for m, why in missing.items())
        raise step_failure(f"eval_run {scenario.key}: {len(missing)} input partition(s) missing or not vouched for "
                           "by their blocking checks; under `churnbench ui` the `scenario_inputs` sensor now launches "
                           "`build_scenario`, which builds them and runs this partition again (from the CLI, "
                           f"`churnbench run` builds them first): {listed}", metadata={MISSING_INPUTS: len(missing)})
    tasks = read_tasks(paths.task_set_file(world, scenario.t))
    spec = RunSpec(scenario, config.config_hash, task_set_hash(tasks), plan)
    loaded = world_ledger(state, world)
    resolver = shared_resolver(loaded.records, format_version=loaded.format_version)  # shared by a worker's cells
    settings = agent = None  # the deterministic agent
    serve_here = functools.partial(serve_local, paths)  # (settings, gguf) -> this state folder's model server
    if not deterministic:
        from churn_assets.arms.agents.llm import agent_for_scenario
        from churn_assets.arms.agents.llm_settings import check_agent_settings

        try:  # an endpoint's: the environment's CHURNBENCH_LLM_* settings must still hash to the scenario's id;
            # a local model's: its GGUF file found by hash and served by this state folder's model server
            settings = check_agent_settings(scenario.agent_id, scenario.model_settings)
            agent = agent_for_scenario(scenario.agent_id, scenario.model_settings, serve_local=serve_here)
        except UserFacingError as e:
            raise step_failure(f"eval_run {scenario.key}: {e}") from e
    saas_key = saas_api_key(paths, scenario.saas_profile, world_id=world) if urls.saas else None
    with user_errors():
        warehouse_secret = arm_secret(paths.arm_secret_file)
        prepare_arm(urls.warehouse, world, warehouse_secret)
    sources = connect_sources(world, warehouse_url=urls.warehouse, mongo_url=urls.mongodb, saas_url=urls.saas,
                              saas_key=saas_key, documents_root=paths.contracts_root(world),
                              warehouse_secret=warehouse_secret)
    experiment_hash = spec.key().experiment_hash

    def arm_for(repeat: int):
        """A fresh arm per repeat; an LLM agent samples with the repeat's own seed (`LlmSettings.sampling`)."""
        agent = None
        if settings is not None:
            from churn_assets.arms.agents.llm import agent_for_scenario

            agent = agent_for_scenario(scenario.agent_id, scenario.model_settings, serve_local=serve_here,
                                       sampling=settings.sampling(experiment_hash, repeat))
        return _ServiceGuard(make_arm(scenario, sources, served=plan.served_vintage, agent=agent), paths)

    # What the arm's as-of views read, checked against the dbt build's record beside the answers and again once
    # every task is answered (a corpus arm reads no view). Decisions 240 and 252.
    views = frozenset() if arm_spec(scenario.arm).searches_corpus else warehouse_views(load_registry())
    warehouse_check: WarehouseCheck | None = None
    # The exposure (ledger gold and change rates: CPU) is computed in a thread while the arm answers (mostly
    # waiting on its stores and the SaaS API); answers are scored once it is known. Decision 199. One exposure
    # serves every repeat: it depends on the plan, not on the answers.
    exposures = ThreadPoolExecutor(1, thread_name_prefix="churnbench-exposure")
    try:
        with service_errors(paths):  # a store that died mid-run: its name, not a traceback
            if views:
                warehouse_check = WarehouseCheck(urls.warehouse, world, views, state_key)
                sources.warehouse_content = warehouse_check.hashes
            first = arm_for(0)
            exposure = exposures.submit(run_exposure, loaded.records, tasks, anchor=scenario.t,
                                        t_prime=scenario.t_prime, vintage=first.planned_vintage, resolver=resolver)

            def progress(repeat: int, done: int, total: int) -> None:
                if done % 20 == 0 or done == total:
                    which = f" (repeat {repeat + 1} of {repeats})" if repeats > 1 else ""
                    context.log.info(f"{scenario.key}: {done}/{total} tasks answered{which}")

            saas = sources.saas
            result = evaluate_repeats(
                lambda r: first if r == 0 else arm_for(r), tasks, resolver, store, spec, repeats,
                deterministic=deterministic, exposure=exposure, progress=progress, retry_transport=retry,
                dagster_run_id=context.run_id, content_check=warehouse_check,
                transport_counters=(lambda: saas.stats.as_dict()) if saas is not None else None,
                catalog=catalog,  # the results catalog records running -> complete/failed
                on_wait=lambda: context.log.info(f"{scenario.key}: another run of this experiment holds "
                                                 "its results folder; waiting to reuse or resume it"))
    except UserFacingError as e:
        raise step_failure(f"eval_run {scenario.key}: {_with_llm_server_state(paths, agent, e)}") from e
    finally:
        # Not waited for: on success `evaluate` has its result; on a failure or a termination, a thread still
        # measuring must not hold the step's error back (it only reads the ledger and the locked resolver).
        exposures.shutdown(wait=False, cancel_futures=True)
        if warehouse_check is not None:
            warehouse_check.close()
        close_sources(sources)
    run_dir = store.run_dir(result.keys[0])
    timings = (run_dir / "timings.json").read_text()
    return dg.MaterializeResult(metadata={**_metadata(result.summaries[0], plan.served_vintage, str(run_dir), timings),
                                          **_experiment_metadata(result.experiment),
                                          **_seal_metadata(urls.warehouse, store, result.keys),
                                          **_lineage(context, scenario, run_dir, None), "reused": False})


def _seal_metadata(catalog_url: str, store: ResultsStore, keys: list) -> dict:
    """`seal`: each repeat's results folder's seal as the catalog recorded it when the run completed
    (`evaluation/seals.py`), so that editing the files would have to edit this record too; {} for runs completed
    before seals."""
    catalog, seals = RunCatalog(catalog_url), {}
    for key in keys:
        row, name = catalog.get(key), store.run_dir(key).name
        sealed = (row.seal or {}).get(name) if row is not None else None
        if sealed:
            seals[name] = sealed
    return {SEAL_METADATA: dg.MetadataValue.json(seals)} if seals else {}


def serve_local(paths, settings, gguf) -> str:
    """The base URL of this state folder's model server serving `gguf` as the settings say (started if needed)."""
    return ensure_llm_server(paths, LlmServerConfig(gguf.path, gguf.sha256, gguf.name, settings.local.n_ctx,
                                                    settings.local.threads))


def _with_llm_server_state(paths, agent, error: Exception) -> str:
    """The run's error, or, when a local model's server stopped serving (it died: named with its log), that: the
    endpoint error it caused reads as a lost connection otherwise."""
    if agent is None or agent.settings.local is None:
        return str(error)

    failure = llm_server_failure(paths)
    if failure is None:
        return str(error)
    return (f"{failure}; the answers so far are checkpointed, and the run resumes (the server started again) "
            f"when run again")


def _lineage(context: dg.AssetExecutionContext, scenario, run_dir: Path, reused_hash: str | None) -> dict:
    """What the evaluation read (`orchestration/lineage.py`), with the version of each input partition: now, for
    an evaluation that just ran; for a reused result, the versions its first materialization recorded (when the
    latest one holds them for the same experiment), so a reuse does not hide a rematerialized input."""
    from churn_assets.orchestration import lineage

    tasks_file = run_dir / "tasks.jsonl"
    rows = [load_json(line, str(tasks_file)) for line in tasks_file.read_text().splitlines() if line.strip()]
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
        answer = self._arm.answer(task)
        if answer.transport_error is not None:
            raise_if_a_service_died(self._paths, settle_s=0.5)
        return answer

    def __getattr__(self, name: str):
        return getattr(self._arm, name)


def _metadata(summary: dict, served: dict[str, dt.date], run_dir: str, timings_json: str) -> dict:
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


def _experiment_metadata(experiment: dict) -> dict:
    """What the repeats add to the metadata (issue 33): efficiency (medians and p90) and staleness awareness for
    every run; with K > 1 the mean accuracy, its interval, pass^K, pass@K and answer stability."""
    eff = experiment["efficiency"]
    awareness = experiment["staleness_awareness"]
    out: dict = {
        "repeats": int(experiment["repeats"]),
        "efficiency": dg.MetadataValue.json(eff),
        "staleness_awareness": dg.MetadataValue.json(awareness),
        "repeat_folders": dg.MetadataValue.json(experiment["folders"]),
    }
    for name in ("tool_calls", "model_calls", "input_tokens", "output_tokens", "seconds"):
        if eff.get(name) is not None:  # absent figures stay absent (the deterministic agent has no tokens)
            out[f"median_{name}"] = dg.MetadataValue.float(float(eff[name]["median"]))
            out[f"p90_{name}"] = dg.MetadataValue.float(float(eff[name]["p90"]))
    if experiment["repeats"] > 1:
        k = str(experiment["repeats"])
        out.update({
            "accuracy_mean": dg.MetadataValue.float(float(experiment["accuracy_mean"] or 0.0)),
            "accuracy_interval_90": dg.MetadataValue.json(experiment["accuracy_interval_90"]),
            f"pass_hat_{k}": dg.MetadataValue.float(float(experiment["pass_hat_k"][k] or 0.0)),
            f"pass_at_{k}": dg.MetadataValue.float(float(experiment["pass_at_k"][k] or 0.0)),
            "stability": dg.MetadataValue.float(float(experiment["stability"] or 0.0)),
        })
    out["experiment"] = dg.MetadataValue.json(compact(experiment))  # `run_scenario` returns it
    return out
