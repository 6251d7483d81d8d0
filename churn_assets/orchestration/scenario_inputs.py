"""A scenario's inputs in a state folder: its plan (made once, stored, checked against the registry) and
which of its partitions exist.

- `scenario_plan(session, scenario)`: the stored plan, or the plan made now (`freshness.scenario.plan_scenario`,
  the one planning function) and stored, at the scenario's first materialization. A plan made from another
  registry than today's is refused in one line (`--replan` makes a new one), so a re-tiered registry never
  evaluates against an old plan silently. The plan needs the world's calendar, and for a policy that
  `needs_rates` the change rates measured on the world's ledger over [start, T'].
- `existing_inputs` / `missing_inputs`: "exists" is decided from the Dagster instance's materialization
  records, which every process on the state folder shares, so partitions made by an earlier scenario, in
  this process or another, are reused. Where it is cheap (one query or stat per asset and world) the data is
  looked at too: a partition whose record survives its data (e.g. a world removed and added again keeps its
  history) counts as missing. So does a partition whose latest blocking checks did not pass on its latest
  materialization (a blocking check that failed, with the run or later under `worlds check`, or never ran on
  it): it is rebuilt, never reused (`blocking_checks`, `unchecked_inputs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from churn_assets.arms.registry import arm_spec
from churn_assets.deployment import task_settings
from churn_assets.fabric.mongo import database_name, read_meta, world_databases
from churn_assets.fabric.postgres import connection, read_load_key, schema_name
from churn_assets.fabric.truth import META_TABLE as TRUTH_META_TABLE
from churn_assets.fabric.warehouse_content import stored_content
from churn_assets.fabric.warehouse_raw import META_TABLE as RAW_META_TABLE
from churn_assets.freshness.planning import measured_change_rates
from churn_assets.freshness.scenario import (
    CONTRACT_DOCUMENTS,
    DBT_BUILD,
    LEDGER,
    OPERATIONAL_STORE,
    RAG_INDEX,
    TASK_SET,
    VECTOR_INDEX,
    WAREHOUSE,
    Scenario,
    ScenarioError,
    ScenarioInput,
    ScenarioPlan,
    plan_scenario,
)
from churn_assets.grounding.rag_corpus import corpus_days
from churn_assets.grounding.registry import Registry, load_registry
from churn_assets.grounding.staging import staged_days, staged_specs
from churn_assets.grounding.vector_index import built_days
from churn_assets.orchestration.dbt_project import dbt_asset_keys
from churn_assets.orchestration.materialize import Session
from churn_assets.orchestration.partitions import world_day_key
from churn_assets.orchestration.scenarios import StoredScenario, scenario_lock, store_plan, stored_plan
from churn_assets.orchestration.world_registry import load_world_config
from churn_assets.services import mongo_client
from churn_assets.tasks.task_set import Drawn, drawn_of, drawn_with, in_current_format
from churn_assets.world.calendar import outside_calendar
from churn_assets.world.ledger import LEDGER_FILE, load_ledger
from contracts.store import stored_days

if TYPE_CHECKING:
    import dagster as dg
    from dagster._core.definitions.assets.graph.base_asset_graph import BaseAssetGraph

    from churn_assets.state import StatePaths

BlockingChecks = Mapping[str, tuple["dg.AssetCheckKey", ...]]  # asset key string -> its blocking checks


# ---------------------------------------------------------------------------------------------------
# The plan, made once
# ---------------------------------------------------------------------------------------------------


def needs_ledger_to_plan(scenario: Scenario) -> bool:
    """Whether planning measures change rates on the world's ledger (which must exist first)."""
    return arm_spec(scenario.arm).reads.serves_policy and scenario.parsed_policy.needs_rates


def make_plan(session: Session, scenario: Scenario, registry: Registry) -> ScenarioPlan:
    """Plan `scenario` now: days inside the world's calendar, rates measured on its ledger when needed."""
    config = load_world_config(session.paths, scenario.world_id)
    for name, day in (("T'", scenario.t_prime), ("T", scenario.t)):
        if not config.start <= day <= config.end:  # a ScenarioError, in the one phrasing of an outside day
            raise ScenarioError(str(outside_calendar(name, day, config.start, config.end,
                                                     f"world {scenario.world_id}")))
    rates = None
    if needs_ledger_to_plan(scenario):
        loaded = load_ledger(session.paths.ledger_dir(scenario.world_id))
        rates = measured_change_rates(loaded.records, config.start, scenario.t_prime, list(registry.classes))
    return plan_scenario(scenario, arm_spec(scenario.arm).reads, registry, rates=rates, calendar_days=config.days)


def scenario_plan(session: Session, scenario: Scenario, *, replan: bool = False,
                  registry: Registry | None = None, read: StoredScenario | None = None) -> ScenarioPlan:
    """The scenario's stored plan; planned and stored now when it has none (or `replan`). Refuses a plan
    made from another registry than today's. The scenario must be registered (`register_scenario`).
    `read`: the scenario's file as the caller read it; a plan it holds is the stored plan (a stored plan changes
    only by `replan`), so the file is not read again."""
    registry = registry or load_registry()
    if read is not None and read.plan is not None and not replan:
        return _current(scenario, read.plan, registry)
    # Under the scenario's lock: two processes planning it at once make it once (the second reads the first's).
    with scenario_lock(session.paths, scenario):
        stored = None if replan else stored_plan(session.paths, scenario.key)
        if stored is not None:
            return _current(scenario, stored, registry)
        plan = make_plan(session, scenario, registry)
        store_plan(session.paths, scenario.key, plan)
        return plan


def _current(scenario: Scenario, plan: ScenarioPlan, registry: Registry) -> ScenarioPlan:
    """A stored plan, refused when it was made from another registry than today's."""
    if plan.registry_hash != registry.content_hash:
        raise ScenarioError(
            f"scenario {scenario.key} was planned with registry {plan.registry_hash}, the registry is "
            f"now {registry.content_hash}: run it again with `--replan` to plan it with today's registry")
    return plan


# ---------------------------------------------------------------------------------------------------
# What exists
# ---------------------------------------------------------------------------------------------------


def asset_keys_of(item: ScenarioInput) -> tuple[str, ...]:
    """The Dagster asset keys (user strings) an input stands for."""
    return dbt_asset_keys() if item.asset == DBT_BUILD else (item.asset,)


def _partition_str(item: ScenarioInput) -> str:
    return item.world if item.day is None else world_day_key(item.world, item.day)


def recorded_inputs(instance: dg.DagsterInstance, inputs: Iterable[ScenarioInput]) -> set[ScenarioInput]:
    """Inputs whose every asset has a materialization of the partition in the instance's records."""
    import dagster as dg

    items = list(inputs)
    materialized: dict[str, set[str]] = {}
    for key in {k for i in items for k in asset_keys_of(i)}:
        materialized[key] = set(instance.get_materialized_partitions(dg.AssetKey.from_user_string(key)))
    return {i for i in items if all(_partition_str(i) in materialized[k] for k in asset_keys_of(i))}


def present_inputs(session: Session, inputs: Iterable[ScenarioInput]) -> set[ScenarioInput]:
    """Inputs whose data is really there, judged by one cheap probe per asset and world (a manifest, a
    build table, a meta row). Inputs of assets without a probe count as present."""
    items = list(inputs)
    by_world: dict[str, list[ScenarioInput]] = {}
    for i in items:
        by_world.setdefault(i.world, []).append(i)
    present: set[ScenarioInput] = set()
    specs = {s.asset_name: s for s in staged_specs(load_registry())}
    for world, world_items in by_world.items():
        assets = {i.asset for i in world_items}
        days: dict[str, set[Any]] = {}
        paths = session.paths
        if LEDGER in assets:
            days[LEDGER] = {None} if (paths.ledger_dir(world) / LEDGER_FILE).exists() else set()
        if CONTRACT_DOCUMENTS in assets:
            days[CONTRACT_DOCUMENTS] = set(stored_days(paths.contracts_root(world)))
        if TASK_SET in assets:
            days[TASK_SET] = {i.day for i in world_items if i.asset == TASK_SET
                              and i.day is not None and paths.task_set_file(world, i.day).exists()}
        if OPERATIONAL_STORE in assets:
            days[OPERATIONAL_STORE] = _complete_operational_days(session, world, world_items)
        if assets & {*WAREHOUSE, DBT_BUILD, VECTOR_INDEX, RAG_INDEX, *specs}:
            with connection(session.urls.warehouse) as conn:
                if "warehouse_truth" in assets:
                    days["warehouse_truth"] = {None} if read_load_key(
                        conn, schema_name(world, "truth"), TRUTH_META_TABLE) else set()
                if "warehouse_raw" in assets:
                    days["warehouse_raw"] = {None} if read_load_key(
                        conn, schema_name(world, "raw"), RAW_META_TABLE) else set()
                if DBT_BUILD in assets:
                    days[DBT_BUILD] = {None} if _dbt_built(conn, world) else set()
                if VECTOR_INDEX in assets:
                    days[VECTOR_INDEX] = set(built_days(conn, world))
                if RAG_INDEX in assets:
                    days[RAG_INDEX] = set(corpus_days(conn, world))
                for name in assets & specs.keys():
                    days[name] = set(staged_days(conn, world, specs[name].table))
        present |= {i for i in world_items if i.asset not in days or i.day in days[i.asset]}
    return present


def _dbt_built(conn: Any, world: str) -> bool:
    """Every model of the dbt project exists, and the build recorded the content hashes evaluations check their
    warehouse reads against (a build that did not finish recorded none: it is built again)."""
    return dbt_models_built(conn, world) and bool(stored_content(conn, world))  # its seals: checked by eval_run


def dbt_models_built(conn: Any, world: str) -> bool:
    """Every model of the dbt project exists as a relation in the world's analytics schema."""
    models = [k.split("/")[-1] for k in dbt_asset_keys()]
    row = conn.execute(
        """SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s AND c.relname = ANY(%s)""", (schema_name(world, "analytics"), models)).fetchone()
    return row is not None and int(row[0]) == len(models)


def _complete_operational_days(session: Session, world: str, items: list[ScenarioInput]) -> set[Any]:
    wanted = [i.day for i in items if i.asset == OPERATIONAL_STORE and i.day is not None]
    client = mongo_client(session.urls.mongodb)
    try:
        names = set(world_databases(client, world).get(world, []))
        out = set()
        for day in wanted:
            name = database_name(world, day)
            # `_meta` is written last (fabric/mongo.py): a database without `complete` was cut short.
            if name in names and (read_meta(client[name]) or {}).get("complete") is True:
                out.add(day)
        return out
    finally:
        client.close()


def blocking_checks(graph: BaseAssetGraph) -> dict[str, tuple[dg.AssetCheckKey, ...]]:
    """The blocking checks of every asset of an asset graph (`Definitions.resolve_asset_graph()`, or
    `job_asset_graph(context.job_def)` inside a run), by asset key string: the partitioned ones, whose
    evaluations Dagster records per partition. dagster-dbt records the dbt tests' evaluations without a
    partition (one record per test across worlds), so they cannot vouch for one world's build; they gate the
    build itself instead (`dbt build` fails on a failed test, and the step with it)."""
    out: dict[str, list[dg.AssetCheckKey]] = {}
    for key in sorted(graph.asset_check_keys, key=lambda k: (k.asset_key.to_user_string(), k.name)):
        node = graph.get(key)
        if node.blocking and node.partitions_def is not None:
            out.setdefault(key.asset_key.to_user_string(), []).append(key)
    return {asset: tuple(keys) for asset, keys in out.items()}


def job_asset_graph(job: dg.JobDefinition) -> BaseAssetGraph:
    """The whole asset graph a run's job was cut from: an asset run's job is a subset of the implicit asset
    job, whose own graph holds only the assets selected (eval_run's inputs and their checks are not in it)."""
    while job.asset_selection_data is not None:
        job = job.asset_selection_data.parent_job_def
    return job.asset_layer.asset_graph


def unchecked_inputs(instance: dg.DagsterInstance, inputs: Iterable[ScenarioInput], checks: BlockingChecks
                     ) -> dict[ScenarioInput, str]:
    """Inputs whose partition's latest materialization is not vouched for by every blocking check of its
    assets: input -> why (the check that failed, is still running, or never ran on that materialization)."""
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

    items = list(inputs)
    wanted = {k for i in items for a in asset_keys_of(i) for k in checks.get(a, ())}
    if not wanted:
        return {}
    partitions = sorted({_partition_str(i) for i in items})
    infos = {(info.check_key, info.partition_key): info for info in
             instance.event_log_storage.get_asset_check_partition_info(sorted(wanted, key=str),
                                                                       partition_keys=partitions)}
    out: dict[ScenarioInput, str] = {}
    for item in items:
        for check_key in (k for a in asset_keys_of(item) for k in checks.get(a, ())):
            info = infos.get((check_key, _partition_str(item)))
            status = info.latest_execution_status if info is not None else None
            if info is None or not info.is_current:
                out[item] = f"its blocking check {check_key.name} did not run on its latest materialization"
            elif status is AssetCheckExecutionRecordStatus.FAILED:
                out[item] = f"its blocking check {check_key.name} failed"
            elif status is not AssetCheckExecutionRecordStatus.SUCCEEDED:
                out[item] = f"its blocking check {check_key.name} has not finished"
            else:
                continue
            break
    return out


def drawn_settings() -> Drawn:
    """(count, seed, per_template) the deployment draws each day's task set with (what a task set's `drawn_with`
    must be); with `per_template` k the count is k tasks of each template."""
    settings = task_settings()
    return drawn_of(settings.count, settings.seed, settings.per_template)


def _describe(drawn: Drawn) -> str:
    count, seed, per_template = drawn
    return f"{count} tasks{'' if per_template is None else f' ({per_template} per template)'}, seed {seed}"


def outdated_task_sets(paths: StatePaths, inputs: Iterable[ScenarioInput]) -> dict[ScenarioInput, str]:
    """Task-set inputs recorded as drawn with another task count, seed or per-template count than the deployment
    asks for now -> why: they are drawn again (a day's task set is one file per world and T, so a changed
    deployment would otherwise reuse the old questions without a word). A set with no record (written before the
    record existed) is taken as it is, as before: its count and seed cannot be known without drawing it again. A
    set whose file is not in today's format (`in_current_format`) is drawn again too."""
    wanted = drawn_settings()
    out = {}
    for i in inputs:
        if i.asset != TASK_SET or i.day is None:
            continue
        path = paths.task_set_file(i.world, i.day)
        was = drawn_with(path)
        if was is not None and was != wanted:
            out[i] = f"drawn with {_describe(was)}; the deployment asks for {_describe(wanted)}"
        elif path.exists() and not in_current_format(path):
            out[i] = "written in an earlier task format (its templates' fields changed since)"
    return out


def existing_inputs(session: Session, inputs: Iterable[ScenarioInput], *, checks: BlockingChecks,
                    check_data: bool = True) -> tuple[set[ScenarioInput], dict[ScenarioInput, str]]:
    """(existing, recorded but not reusable -> why): existing = recorded in the instance, vouched for by the
    latest evaluations of its blocking `checks` and, when `check_data`, with its data present."""
    recorded = recorded_inputs(session.instance, inputs)
    refused = unchecked_inputs(session.instance, recorded, checks)
    checked = recorded - refused.keys()
    if check_data:
        present = present_inputs(session, checked)
        refused |= {i: "recorded as materialized but its data is gone" for i in checked - present}
        refused |= outdated_task_sets(session.paths, present)
        checked = present - refused.keys()
    return checked, refused


def missing_inputs(session: Session, plan: ScenarioPlan, *, checks: BlockingChecks,
                   check_data: bool = True) -> dict[ScenarioInput, str]:
    """The inputs of a planned scenario that do not exist or may not be reused -> why (what `eval_run`
    refuses to start without), in plan order."""
    existing, refused = existing_inputs(session, plan.inputs, checks=checks, check_data=check_data)
    return {i: refused.get(i, "not materialized") for i in plan.inputs if i not in existing}
