"""The scenario materializer: build, in process on the persistent instance, every missing input of a scenario.

`materialize_scenario(session, defs, world, T', T, policy, arm=...)` plans the scenario
(`freshness/scenario.py`: its inputs and served-vintage map; `arm_plan` for an arm that serves no staged
cache), finds which inputs already exist, materializes the others in dependency
order, and returns the served-vintage map with what it built and reused. `churnbench run` / `paper` call it
before `eval_run`, which only checks that its inputs exist (ARCHITECTURE.md section 10, "Evaluation wiring").

"Exists" is decided from the Dagster instance's materialization records, which every process on the state
folder shares, so partitions made by an earlier scenario, in this process or another, are reused. Where it
is cheap (one query or stat per asset and world) the data is looked at too: a partition whose record
survives its data (e.g. a world removed and added again keeps its history) is rebuilt.

One in-process run per (asset, partition), except the warehouse pair (truth + raw) and the dbt build (every
model), which run together as `churnbench project` runs them. A failed run does not stop independent
ones; at the end a `ScenarioMaterializationError` lists what failed (with the step's own message) and what
was skipped because it depends on a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import io
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from churn_assets.assets.dbt import analytics_dbt
from churn_assets.assets.documents import contracts_root
from churn_assets.assets.tasks import task_set_file
from churn_assets.errors import UserFacingError
from churn_assets.fabric.mongo import database_name, read_meta, world_databases
from churn_assets.fabric.postgres import connection, read_load_key, schema_name
from churn_assets.fabric.truth import META_TABLE as TRUTH_META_TABLE
from churn_assets.fabric.warehouse_raw import META_TABLE as RAW_META_TABLE
from churn_assets.freshness.planning import measured_change_rates
from churn_assets.freshness.policies import Budget, Policy, RateMatched
from churn_assets.freshness.scenario import (
    CONTRACT_DOCUMENTS,
    DBT_BUILD,
    LEDGER,
    OPERATIONAL_STORE,
    RAG_INDEX,
    TASK_SET,
    WAREHOUSE,
    ScenarioInput,
    ScenarioPlan,
    scenario_inputs,
)
from churn_assets.grounding.rag_corpus import corpus_days
from churn_assets.grounding.registry import Registry, load_registry
from churn_assets.grounding.staging import staged_days, staged_specs
from churn_assets.grounding.vector_index import built_days
from churn_assets.materialize import LAUNCHED_BY_TAG, MaterializationError, Session, materialize
from churn_assets.partitions import world_day_key
from churn_assets.world.ledger import LEDGER_FILE, load_ledger
from churn_assets.world_registry import load_world_config
from contracts.store import stored_days

if TYPE_CHECKING:
    import dagster as dg

SCENARIO_TAG = "churnbench/scenario"
LAUNCHED_BY = "scenario_materializer"
VECTOR_INDEX = "vector_index"

Echo = Callable[[str], None]


class ScenarioMaterializationError(UserFacingError):
    """Some inputs of a scenario could not be built; the message lists what failed and what was skipped."""


# ---------------------------------------------------------------------------------------------------
# Steps: one in-process run each
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One run: `assets` (asset key strings) for one partition, covering `inputs`."""

    assets: tuple[str, ...]
    inputs: tuple[ScenarioInput, ...]
    world: str
    day: dt.date | None

    @property
    def label(self) -> str:
        names = sorted({i.asset for i in self.inputs})
        what = " + ".join(names)
        return f"{what} [{self.world}]" if self.day is None else f"{what} [{self.day}]"

    @property
    def partition_key(self) -> str | dg.MultiPartitionKey:
        return self.world if self.day is None else world_day_key(self.world, self.day)


@dataclass(frozen=True)
class StepResult:
    step: Step
    seconds: float
    run_id: str = ""
    error: str = ""  # "" when it succeeded

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class ScenarioBuild:
    """What `materialize_scenario` did."""

    plan: ScenarioPlan
    reused: list[ScenarioInput]
    rebuilt: list[ScenarioInput]  # recorded as materialized, but the data was gone
    results: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def served_vintage(self) -> dict[str, dt.date]:
        return self.plan.served_vintage

    @property
    def built(self) -> list[ScenarioInput]:
        return [i for r in self.results if r.ok for i in r.step.inputs]

    def seconds_per_asset(self) -> dict[str, list[float]]:
        """Run seconds by asset (the warehouse pair and the dbt build count as one)."""
        out: dict[str, list[float]] = {}
        for r in self.results:
            out.setdefault(" + ".join(sorted({i.asset for i in r.step.inputs})), []).append(r.seconds)
        return out


def dbt_asset_keys() -> tuple[str, ...]:
    return tuple(sorted(k.to_user_string() for k in analytics_dbt.keys))


def asset_keys_of(item: ScenarioInput) -> tuple[str, ...]:
    """The Dagster asset keys (user strings) an input stands for."""
    return dbt_asset_keys() if item.asset == DBT_BUILD else (item.asset,)


def asset_ancestors(definitions: dg.Definitions) -> Callable[[str], frozenset[str]]:
    """`ancestors(asset key string)`: every asset upstream of it in the definitions' asset graph."""
    import dagster as dg

    graph = definitions.resolve_asset_graph()
    memo: dict[str, frozenset[str]] = {}

    def ancestors(asset: str) -> frozenset[str]:
        if asset not in memo:
            parents = [p for p in graph.get(dg.AssetKey.from_user_string(asset)).parent_keys if graph.has(p)]
            found: set[str] = set()
            for p in parents:
                name = p.to_user_string()
                found |= {name, *ancestors(name)}
            memo[asset] = frozenset(found)
        return memo[asset]

    return ancestors


def depends_on(step: Step, other: Step, ancestors: Callable[[str], frozenset[str]]) -> bool:
    """Whether `step` reads, directly or not, a partition `other` makes: an asset of `other` is upstream of
    one of `step`'s, in the same world, and `other` is per world or of the same day."""
    if step is other or step.world != other.world or (other.day is not None and other.day != step.day):
        return False
    upstream = set().union(*(ancestors(a) for a in step.assets))
    return not upstream.isdisjoint(other.assets)


def plan_steps(missing: Iterable[ScenarioInput], ancestors: Callable[[str], frozenset[str]]) -> list[Step]:
    """Group missing inputs into runs, each after every run it depends on (ties: by day, then label)."""
    groups: dict[tuple[str, str, dt.date | None], list[ScenarioInput]] = {}
    for item in missing:
        # The warehouse pair loads together (one ledger read), as `churnbench project` does.
        group = "warehouse" if item.asset in WAREHOUSE else item.asset
        groups.setdefault((group, item.world, item.day), []).append(item)
    steps = []
    for (_, world, day), items in groups.items():
        assets = tuple(k for i in sorted(items) for k in asset_keys_of(i))
        steps.append(Step(assets, tuple(sorted(items)), world, day))
    pending = sorted(steps, key=lambda s: (s.day or dt.date.min, s.label))
    needs = {s: {o for o in steps if depends_on(s, o, ancestors)} for s in steps}
    ordered: list[Step] = []
    while pending:
        # Kahn's algorithm; the asset graph is acyclic, so some pending step is always ready.
        ready = next(s for s in pending if needs[s] <= set(ordered))
        ordered.append(ready)
        pending.remove(ready)
    return ordered


# ---------------------------------------------------------------------------------------------------
# What exists
# ---------------------------------------------------------------------------------------------------


def _partition_str(item: ScenarioInput) -> str:
    return item.world if item.day is None else str(world_day_key(item.world, item.day))


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
            days[CONTRACT_DOCUMENTS] = set(stored_days(contracts_root(paths, world)))
        if TASK_SET in assets:
            days[TASK_SET] = {i.day for i in world_items if i.asset == TASK_SET
                              and i.day is not None and task_set_file(paths, world, i.day).exists()}
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
    """Every model of the dbt project exists as a relation in the world's analytics schema."""
    models = [k.split("/")[-1] for k in dbt_asset_keys()]
    row = conn.execute(
        """SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s AND c.relname = ANY(%s)""", (schema_name(world, "analytics"), models)).fetchone()
    return row is not None and int(row[0]) == len(models)


def _complete_operational_days(session: Session, world: str, items: list[ScenarioInput]) -> set[Any]:
    from churn_assets.services import mongo_client

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


def existing_inputs(session: Session, inputs: Iterable[ScenarioInput], *, check_data: bool = True
                    ) -> tuple[set[ScenarioInput], set[ScenarioInput]]:
    """(existing, recorded but without data): existing = recorded in the instance and, when `check_data`,
    with its data present."""
    recorded = recorded_inputs(session.instance, inputs)
    if not check_data:
        return recorded, set()
    present = present_inputs(session, recorded)
    return present, recorded - present


# ---------------------------------------------------------------------------------------------------
# Planning and running
# ---------------------------------------------------------------------------------------------------


# The inputs of arms that serve no staged cache, by day: (asset, "t_prime" | "t"). Besides these, every arm
# needs the world-level inputs (the ledger for gold, the warehouse pair and the dbt build: the SaaS mock reads
# truth, the as-of views are dbt's, and the arm role's grants on `_staging`, where the indexes live, are made
# with the dbt build) and the task set at T. Other arms need the policy's plan (`freshness/scenario.py`).
ARM_DAY_INPUTS: dict[str, tuple[tuple[str, str], ...]] = {
    # live stores at T: Mongo and the documents of T (the as-of views are the dbt build)
    "naive": ((OPERATIONAL_STORE, "t"), (CONTRACT_DOCUMENTS, "t")),
    # the RAG corpus built at T' (after the documents and the index of T', whose chunks it states)
    "classic_rag": ((CONTRACT_DOCUMENTS, "t_prime"), (VECTOR_INDEX, "t_prime"), (RAG_INDEX, "t_prime")),
    "grounding_no_source_routing": ((CONTRACT_DOCUMENTS, "t_prime"), (VECTOR_INDEX, "t_prime"),
                                    (RAG_INDEX, "t_prime")),
    # live stores at T (Mongo; the as-of views are the dbt build), contract terms from the index of T'
    "hierarchical": ((OPERATIONAL_STORE, "t"), (CONTRACT_DOCUMENTS, "t_prime"), (VECTOR_INDEX, "t_prime")),
}


def arm_vintage(arm: str, t_prime: dt.date, t: dt.date) -> dict[str, dt.date]:
    """The planned vintage of an arm of `ARM_DAY_INPUTS`, as the arm itself declares it."""
    if arm in ("classic_rag", "grounding_no_source_routing"):
        from churn_assets.arms.corpus import corpus_vintage

        return corpus_vintage(t_prime)
    if arm == "naive":
        from churn_assets.arms.naive import naive_vintage

        return naive_vintage(t)
    if arm == "hierarchical":
        from churn_assets.arms.hierarchical import hierarchical_vintage

        return hierarchical_vintage(t_prime, t)
    raise ScenarioMaterializationError(f"arm {arm!r} has inputs in ARM_DAY_INPUTS but no planned vintage here")


def arm_plan(arm: str, world: str, t_prime: dt.date, t: dt.date, policy_id: str) -> ScenarioPlan:
    """The plan of a scenario of an arm of `ARM_DAY_INPUTS`: the world-level inputs, the arm's own partitions
    and the task set, no refresh days (the policy plans none for it), its planned vintage as the served map."""
    days = {"t_prime": t_prime, "t": t}
    inputs = [ScenarioInput(LEDGER, world), *(ScenarioInput(a, world) for a in WAREHOUSE),
              ScenarioInput(DBT_BUILD, world)]
    inputs += [ScenarioInput(asset, world, days[when]) for asset, when in ARM_DAY_INPUTS[arm]]
    inputs.append(ScenarioInput(TASK_SET, world, t))
    return ScenarioPlan(world, t_prime, t, policy_id, {}, arm_vintage(arm, t_prime, t), tuple(inputs))


def needs_rates(policy: Policy) -> bool:
    return isinstance(policy, RateMatched) or (isinstance(policy, Budget) and policy.allocation == "proportional")


def plan_scenario(session: Session, world: str, t_prime: dt.date, t: dt.date, policy: Policy, *,
                  registry: Registry | None = None, rates: Mapping[str, float] | None = None,
                  arm: str | None = None) -> ScenarioPlan:
    """The scenario's plan (`arm_plan` for an arm that serves no staged cache); refuses days outside the world's
    calendar. A policy that needs change rates gets them measured on the world's ledger over [start, T']
    (the ledger must exist)."""
    registry = registry or load_registry()
    config = load_world_config(session.paths, world)
    for name, day in (("T'", t_prime), ("T", t)):
        if not config.start <= day <= config.end:
            raise ScenarioMaterializationError(f"{name} = {day} is outside the calendar of world {world} "
                                               f"({config.start}..{config.end})")
    if arm in ARM_DAY_INPUTS:  # the arm serves no staged cache: the policy plans nothing for it
        return arm_plan(arm, world, t_prime, t, policy.policy_id)
    if rates is None and needs_rates(policy):
        loaded = load_ledger(session.paths.ledger_dir(world))
        rates = measured_change_rates(loaded.records, config.start, t_prime, list(registry.classes))
    plan = scenario_inputs(registry, world, t_prime, t, policy, rates, calendar_days=config.days)
    if arm is None:  # every input the policy's plan names, the RAG corpus included
        return plan
    # An arm of the registry (grounding and its router ablations) never reads the RAG corpus: the corpus of
    # T' is by far the dearest input (minutes, its embeddings), so it is built only for the arms that read it.
    return dataclasses.replace(plan, inputs=tuple(i for i in plan.inputs if i.asset != RAG_INDEX))


def scenario_tag(plan: ScenarioPlan) -> str:
    return f"{plan.world}__{plan.policy_id}__tp{plan.t_prime}__t{plan.t}"


def materialize_scenario(
    session: Session,
    definitions: dg.Definitions,
    world: str,
    t_prime: dt.date,
    t: dt.date,
    policy: Policy,
    *,
    registry: Registry | None = None,
    rates: Mapping[str, float] | None = None,
    check_data: bool = True,
    echo: Echo | None = None,
    arm: str | None = None,
) -> ScenarioBuild:
    """Materialize every missing input of scenario (world, T', T, policy) for `arm` (None: every input the
    policy's plan names); returns the build, whose `served_vintage` is the map the router serves. Raises
    `ScenarioMaterializationError` listing failures."""
    started = time.perf_counter()
    say = echo or (lambda _: None)
    if needs_rates(policy) and rates is None and arm not in ARM_DAY_INPUTS \
            and not (session.paths.ledger_dir(world) / LEDGER_FILE).exists():
        # Rates are measured on the ledger: build it first.
        _run(session, definitions, Step((LEDGER,), (ScenarioInput(LEDGER, world),), world, None), {}, say)
    plan = plan_scenario(session, world, t_prime, t, policy, registry=registry, rates=rates, arm=arm)
    existing, vanished = existing_inputs(session, plan.inputs, check_data=check_data)
    missing = [i for i in plan.inputs if i not in existing]
    build = ScenarioBuild(plan, [i for i in plan.inputs if i in existing], sorted(vanished))
    say(f"scenario {scenario_tag(plan)}: {len(plan.inputs)} inputs, {len(build.reused)} reused, "
        f"{len(missing)} to build")
    for item in build.rebuilt:
        say(f"  {item}: recorded as materialized but its data is gone; rebuilding")
    ancestors = asset_ancestors(definitions)
    steps = plan_steps(missing, ancestors)
    tags = {SCENARIO_TAG: scenario_tag(plan), LAUNCHED_BY_TAG: LAUNCHED_BY}
    failed: list[StepResult] = []
    skipped: list[Step] = []
    for n, step in enumerate(steps, 1):
        blocker = next((f for f in failed if depends_on(step, f.step, ancestors)), None)
        if blocker is not None:
            skipped.append(step)
            say(f"  [{n}/{len(steps)}] {step.label}: skipped ({blocker.step.label} failed)")
            continue
        result = _run(session, definitions, step, tags, say, prefix=f"[{n}/{len(steps)}] ")
        build.results.append(result)
        if not result.ok:
            failed.append(result)
    build.seconds = time.perf_counter() - started
    if failed or skipped:
        lines = [f"scenario {scenario_tag(plan)}: {len(failed)} run(s) failed"
                 + (f", {len(skipped)} skipped" if skipped else "") + ":"]
        lines += [f"  failed  {r.step.label}: {r.error}" for r in failed]
        lines += [f"  skipped {s.label} (needs a failed input)" for s in skipped]
        raise ScenarioMaterializationError("\n".join(lines))
    say(f"scenario {scenario_tag(plan)}: built {len(build.built)} input(s) in {build.seconds:.1f} s; served "
        + ", ".join(f"{c} {d}" for c, d in plan.served_vintage.items()))
    return build


def _run(session: Session, definitions: dg.Definitions, step: Step, tags: dict[str, str], say: Echo,
         prefix: str = "") -> StepResult:
    started = time.perf_counter()
    # dagster-dbt echoes dbt's whole log to stdout: keep it for an error message instead.
    captured = io.StringIO()
    quiet = contextlib.redirect_stdout(captured) if any(a.startswith("analytics/") for a in step.assets) \
        else contextlib.nullcontext()
    try:
        with quiet:
            [run] = materialize(session, definitions, list(step.assets), [step.partition_key], tags=tags)
    except MaterializationError as e:
        tail = [ln for ln in captured.getvalue().splitlines() if "ERROR" in ln or "FAIL" in ln][-5:]
        error = str(e) + ("".join(f"\n      {ln.strip()}" for ln in tail) if tail else "")
        result = StepResult(step, time.perf_counter() - started, error=error)
        say(f"  {prefix}{step.label}: FAILED after {result.seconds:.1f} s")
        return result
    result = StepResult(step, time.perf_counter() - started, run.run_id)
    say(f"  {prefix}{step.label}: {result.seconds:.1f} s")
    return result


def missing_inputs(session: Session, plan: ScenarioPlan, *, check_data: bool = True) -> list[ScenarioInput]:
    """The inputs of a planned scenario that do not exist (what `eval_run` refuses to start without)."""
    existing, _ = existing_inputs(session, plan.inputs, check_data=check_data)
    return [i for i in plan.inputs if i not in existing]

