"""The scenario materializer: build, in process on the persistent instance, every missing input of a scenario.

`materialize_scenario(session, defs, scenario)` gets the scenario's plan (made once and stored:
`scenario_inputs.scenario_plan`), finds which inputs already exist (`scenario_inputs.existing_inputs`:
recorded, their latest blocking checks passed, their data present), materializes the others in dependency
order, and returns the served-vintage map with what it built and reused. `churnbench run` / `paper` call it
before `eval_run`, which reads the same stored plan and only checks that its inputs exist (docs/rules.md,
"Evaluation wiring").

One in-process run per (asset, partition), except the warehouse pair (truth + raw) and the dbt build (every
model), which run together as `churnbench project` runs them. A failed run does not stop independent
ones; at the end a `ScenarioMaterializationError` lists what failed (with the step's own message) and what
was skipped because it depends on a failure.

Several processes may build the inputs of their scenarios on one state folder at once (parallel cells,
`orchestration/cells.py`). Each run holds the step's lock (`<world>/inputs/<step>`, a Postgres advisory lock:
`state_locks.py`) and looks again, under it, whether the inputs exist: a step another process built meanwhile is
reused, not built twice (a second dbt build of a world would drop the views a running evaluation reads).

The definitions come from the caller (this module sits below `definitions.py` and never imports an asset).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from churn_assets.errors import UserFacingError
from churn_assets.files import LockTimeoutError
from churn_assets.freshness.scenario import LEDGER, WAREHOUSE, Scenario, ScenarioInput, ScenarioPlan
from churn_assets.orchestration.materialize import LAUNCHED_BY_TAG, MaterializationError, Session, materialize
from churn_assets.orchestration.partitions import world_day_key
from churn_assets.orchestration.scenario_inputs import (
    asset_keys_of,
    blocking_checks,
    existing_inputs,
    needs_ledger_to_plan,
    scenario_plan,
)
from churn_assets.progress import partition_label
from churn_assets.state import StatePaths
from churn_assets.state_locks import state_locks
from churn_assets.world.ledger import LEDGER_FILE

if TYPE_CHECKING:
    import dagster as dg

SCENARIO_TAG = "churnbench/scenario"
# What started an input build (the launcher, `churnbench/launched_by`, comes from the caller's tags: ui, cli, ...).
STARTED_BY_TAG = "churnbench/started_by"
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
        return partition_label(" + ".join(sorted({i.asset for i in self.inputs})), self.world, self.day)

    @property
    def partition_key(self) -> str:
        return self.world if self.day is None else world_day_key(self.world, self.day)


@dataclass(frozen=True)
class StepResult:
    step: Step
    seconds: float
    run_id: str = ""
    error: str = ""  # "" when it succeeded
    built_elsewhere: bool = False  # another process built the inputs while this one waited for the step's lock
    busy: bool = False  # not run: another process holds the step's lock (`build_step(..., wait=False)`)

    @property
    def ok(self) -> bool:
        return not self.error and not self.busy


@dataclass
class ScenarioBuild:
    """What `materialize_scenario` did."""

    scenario: Scenario
    plan: ScenarioPlan
    reused: list[ScenarioInput]
    rebuilt: dict[ScenarioInput, str]  # recorded as materialized, not reusable -> why (data gone, check failed)
    results: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def served_vintage(self) -> dict[str, dt.date]:
        return self.plan.served_vintage

    @property
    def built(self) -> list[ScenarioInput]:
        return [i for r in self.results if r.ok and not r.built_elsewhere for i in r.step.inputs]

    @property
    def built_elsewhere(self) -> list[ScenarioInput]:
        """Inputs missing at the start that another process built meanwhile (reused, not built here)."""
        return [i for r in self.results if r.built_elsewhere for i in r.step.inputs]

    def seconds_per_asset(self) -> dict[str, list[float]]:
        """Run seconds by asset (the warehouse pair and the dbt build count as one)."""
        out: dict[str, list[float]] = {}
        for r in self.results:
            out.setdefault(" + ".join(sorted({i.asset for i in r.step.inputs})), []).append(r.seconds)
        return out


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
# Planning and running
# ---------------------------------------------------------------------------------------------------


def materialize_scenario(
    session: Session,
    definitions: dg.Definitions,
    scenario: Scenario,
    *,
    replan: bool = False,
    check_data: bool = True,
    echo: Echo | None = None,
    tags: dict[str, str] | None = None,
) -> ScenarioBuild:
    """Plan `scenario` (once: `scenario_inputs.scenario_plan`) and materialize every missing input; returns
    the build, whose `served_vintage` is the map the arm serves. The scenario must be registered. Raises
    `ScenarioMaterializationError` listing failures. `tags`: added to every run it launches."""
    started = time.perf_counter()
    say = echo or (lambda _: None)
    world = scenario.world_id
    run_tags = {LAUNCHED_BY_TAG: "cli", **(tags or {}), SCENARIO_TAG: scenario.key, STARTED_BY_TAG: LAUNCHED_BY}
    if needs_ledger_to_plan(scenario) and not (session.paths.ledger_dir(world) / LEDGER_FILE).exists():
        # Rates are measured on the ledger: build it first.
        build_step(session, definitions, Step((LEDGER,), (ScenarioInput(LEDGER, world),), world, None), run_tags,
                   say)
    plan = scenario_plan(session, scenario, replan=replan)
    existing, refused = existing_inputs(session, plan.inputs, checks=blocking_checks(definitions.resolve_asset_graph()),
                                        check_data=check_data)
    missing = [i for i in plan.inputs if i not in existing]
    build = ScenarioBuild(scenario, plan, [i for i in plan.inputs if i in existing], dict(sorted(refused.items())))
    tag = scenario.key
    say(f"scenario {scenario.label}: {len(plan.inputs)} inputs, {len(build.reused)} reused, {len(missing)} to build")
    for item, why in build.rebuilt.items():
        say(f"  {item}: {why}; rebuilding")
    ancestors = asset_ancestors(definitions)
    steps = plan_steps(missing, ancestors)
    failed: list[StepResult] = []
    skipped: list[Step] = []
    for n, step in enumerate(steps, 1):
        blocker = next((f for f in failed if depends_on(step, f.step, ancestors)), None)
        if blocker is not None:
            skipped.append(step)
            say(f"  [{n}/{len(steps)}] {step.label}: skipped ({blocker.step.label} failed)")
            continue
        result = build_step(session, definitions, step, run_tags, say, prefix=f"[{n}/{len(steps)}] ")
        build.results.append(result)
        if not result.ok:
            failed.append(result)
    build.seconds = time.perf_counter() - started
    if failed or skipped:
        lines = [f"scenario {tag}: {len(failed)} run(s) failed" + (f", {len(skipped)} skipped" if skipped else "")
                 + ":"]
        lines += [f"  failed  {r.step.label}: {r.error}" for r in failed]
        lines += [f"  skipped {s.label} (needs a failed input)" for s in skipped]
        raise ScenarioMaterializationError("\n".join(lines))
    elsewhere = f" ({len(build.built_elsewhere)} more built meanwhile by another process)" \
        if build.built_elsewhere else ""
    say(f"scenario {scenario.label}: built {len(build.built)} input(s){elsewhere} in {build.seconds:.1f} s; served "
        + ", ".join(f"{c} {d}" for c, d in plan.served_vintage.items()))
    return build


def step_lock(session: Session, step: Step) -> str:
    """The lock of a step: one per (world, assets, day), shared by every process on the state folder."""
    return input_lock(session.paths, step.world, {i.asset for i in step.inputs}, step.day)


def input_lock(paths: StatePaths, world: str, assets: Iterable[str], day: dt.date | None = None) -> str:
    """The lock of building `assets` (input names: `analytics_dbt` for the dbt build) of a world (and day):
    `churnbench project` and `worlds materialize` take the same ones as the materializer, so a build of one
    never runs beside another build of the same partitions."""
    name = "+".join(sorted(set(assets))).replace("/", "-") + ("" if day is None else f"@{day}")
    return paths.lock_name(world, "inputs", name)


def build_step(session: Session, definitions: dg.Definitions, step: Step, tags: dict[str, str], say: Echo,
               prefix: str = "", *, wait: bool = True) -> StepResult:
    """Run one step under its lock, unless another process built its inputs meanwhile (then reuse them).
    `wait` False: when another process holds the lock, return at once with `busy` set (a scheduler with other
    work to give this process asks again later instead of idling a worker on the lock)."""
    started = time.perf_counter()
    try:
        with state_locks(session.paths).hold(
                step_lock(session, step), what=f"the build of {step.label}", timeout=None if wait else 0,
                on_wait=lambda: say(f"  {prefix}{step.label}: another process is building it; waiting")
                if wait else None):
            # Looked at again under the lock: another process may have built it since this one planned.
            existing, _ = existing_inputs(session, step.inputs,
                                          checks=blocking_checks(definitions.resolve_asset_graph()))
            if existing >= set(step.inputs):
                result = StepResult(step, time.perf_counter() - started, built_elsewhere=True)
                say(f"  {prefix}{step.label}: built meanwhile by another process; reused")
                return result
            return _materialize_step(session, definitions, step, tags, say, prefix, started)
    except LockTimeoutError:
        if wait:
            raise
        return StepResult(step, time.perf_counter() - started, busy=True)


def _materialize_step(session: Session, definitions: dg.Definitions, step: Step, tags: dict[str, str],
                      say: Echo, prefix: str, started: float) -> StepResult:
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
