"""Running a sweep on a state folder: the one code path behind `churnbench sweep` and the `sweep` job.

`run_sweep(session, definitions, spec, workers=N)`:

1. registers the sweep (a `sweep` dynamic partition, its record `<state>/sweeps/<sweep id>.json`) and its worlds
   (recipes are added as `churnbench worlds add` adds them; the ledger of each world with evaluated cells is
   materialized if missing);
2. computes the exposure-only cells from the ledgers (`sweeps/exposure_cells.py`), one world per worker job
   (a missing ledger materialized first);
3. evaluates every other cell through `cells.run_cells` (the union of missing inputs built once, then each
   cell's `eval_run`, in `workers` processes), reusing a finished cell (same experiment hash and code version)
   and saying so; a failed cell is recorded with its error and fails alone;
4. records, per evaluated cell, the rows its planned refreshes copied (from the stores' own meta tables);
5. materializes the sweep's `sweep_report` partition.

The record is rewritten after every cell, so the UI (the report's metadata, `churnbench sweep status`) and a
rerun see how far it got; a rerun reuses every finished cell.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import time
from collections.abc import Callable
from concurrent.futures import as_completed
from dataclasses import dataclass
from typing import Any

from churn_assets.arms.agents.llm_settings import LlmSettings
from churn_assets.deployment import task_settings
from churn_assets.evaluation.catalog_removal import delete_scenario_runs
from churn_assets.evaluation.requests import LAUNCHPAD_FIELDS, Fields
from churn_assets.fabric.postgres import connection
from churn_assets.grounding.refresh_cost import refresh_rows
from churn_assets.orchestration import cells as parallel
from churn_assets.orchestration.cells import cell_pool, worker_session
from churn_assets.orchestration.launches import SWEEP_TAG as SWEEP_TAG  # the tag's one home; re-exported
from churn_assets.orchestration.launches import Launch, ensure_sweep_runs
from churn_assets.orchestration.materialize import RETRY_TRANSPORT_TAG, Session, materialize, repeats_tags
from churn_assets.orchestration.partitions import (
    REGRESSION_PARTITIONS_NAME,
    SCENARIO_PARTITIONS_NAME,
    SWEEP_PARTITIONS_NAME,
)
from churn_assets.orchestration.requests import check_sweep_request
from churn_assets.orchestration.scenarios import stored_plan
from churn_assets.orchestration.sweep_records import (
    DONE,
    FAILED,
    SKIPPED,
    SweepRecord,
    list_sweeps,
    load_sweep,
    sweep_file,
    sweep_report_dir,
)
from churn_assets.orchestration.world_registry import add_world, is_registered, load_world_config
from churn_assets.sweeps.exposure_cells import exposure_of_world
from churn_assets.sweeps.llm_budget import BudgetGuard, estimate
from churn_assets.sweeps.spec import LLM, Cell, SweepError, SweepSpec, resolve_worlds

Echo = Callable[[str], None]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------------------


def with_llm_settings(spec: SweepSpec) -> tuple[SweepSpec, Any]:
    """An LLM sweep's spec with the endpoint's model settings and agent id in its options (so a sweep with
    other settings is another sweep), and the settings (from CHURNBENCH_LLM_*: a clear error when unset)."""
    settings = LlmSettings.from_env()
    options = {**spec.options, "model_settings": settings.to_json(), "agent_id": settings.agent_id}
    return dataclasses.replace(spec, options=options), settings


def register_sweep(session: Session, definitions: Any, spec: SweepSpec, echo: Echo, *,
                   checked: tuple[list[Cell], list[Cell]], tags: dict[str, str] | None = None,
                   partition_set: str | None = SWEEP_PARTITIONS_NAME) -> SweepRecord:
    """Register the sweep's worlds (ledgers materialized when missing) and the sweep; return its record (the
    stored one when the sweep ran before: its outcomes are kept). `checked`: its cells, as the request check
    returned them (nothing is registered before that check). `partition_set`: the dynamic partitions of the
    report asset the sweep gets (`sweep_report`'s, or `regression_report`'s for a regression; None: neither)."""
    worlds = resolve_worlds(spec)
    for w in worlds:
        if w.config is not None:
            if add_world(session.paths, session.instance, w.config):
                echo(f"world {w.world_id} ({w.label}) registered")
        elif not is_registered(session.instance, w.world_id):
            raise SweepError(f"sweep {spec.preset}: world {w.world_id!r} is not registered (add it with "
                             "`churnbench worlds add`, or give seeds instead of world ids)")
    evaluated, exposure = checked
    # The worlds of evaluated cells get their ledgers here; a world with exposure-only cells alone gets its
    # ledger from its exposure job, in parallel with the others (`compute_exposure_cells`).
    for world_id in dict.fromkeys(c.world_id for c in evaluated):
        if not (session.paths.ledger_dir(world_id) / "ledger.jsonl").exists():
            echo(f"world {world_id}: materializing its ledger")
            materialize(session, definitions, ["ledger"], [world_id], tags=tags)
    if spec.agent == LLM:
        agent_id = str(spec.options["agent_id"])
        evaluated = [dataclasses.replace(c, agent=agent_id) for c in evaluated]
    path = sweep_file(session.paths, spec.sweep_id)
    record = load_sweep(session.paths, spec.sweep_id) if path.exists() else SweepRecord(spec, evaluated, exposure)
    record.cells, record.exposure_cells = evaluated, exposure
    if partition_set is not None and not session.instance.has_dynamic_partition(partition_set, spec.sweep_id):
        session.instance.add_dynamic_partitions(partition_set, [spec.sweep_id])
    record.save(session.paths)
    return record


def compute_exposure_cells(session: Session, definitions: Any, record: SweepRecord, echo: Echo, *,
                           workers: int = 1, tags: dict[str, str] | None = None) -> None:
    """Exposure and prediction of the exposure-only cells from the ledgers alone, one world per job in
    `workers` processes (each world is independent: its ledger, task set and rates); a job first materializes
    its world's ledger when it is missing, so the worlds' ledgers are generated in parallel too. The rows come
    back in world order whatever order the worlds finish in, so the record is the same for any `workers`."""
    if not record.exposure_cells:
        return
    settings = task_settings()
    worlds = list(dict.fromkeys(c.world_id for c in record.exposure_cells))
    jobs = {w: (w, load_world_config(session.paths, w), [c for c in record.exposure_cells if c.world_id == w],
                settings.count, settings.seed, record.spec.t, tags or {}) for w in worlds}
    rows_of: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    workers = max(1, min(workers, len(worlds)))
    with cell_pool(session, workers, echo) as pool:
        pool.definitions = definitions
        futures = {pool.submit(exposure_job, job): w for w, job in jobs.items()}
        for n, future in enumerate(as_completed(futures), 1):
            world_id = futures[future]
            rows, seconds, ledger_built = future.result()
            rows_of[world_id] = rows
            made = " (its ledger materialized first)" if ledger_built else ""
            echo(f"exposure-only: world {n}/{len(worlds)} {world_id}: {len(rows)} cells in {seconds:.1f} s{made}")
    echo(f"exposure-only: {len(record.exposure_cells)} cells of {len(worlds)} world(s) in "
         f"{time.perf_counter() - started:.1f} s ({workers} worker{'s' if workers > 1 else ''})")
    record.exposure_rows = [row for w in worlds for row in rows_of[w]]
    record.save(session.paths)


def exposure_job(world_id: str, config: Any, cells: list[Cell], task_count: int, task_seed: int,
                 task_anchor: dt.date | None = None, tags: dict[str, str] | None = None
                 ) -> tuple[list[dict[str, Any]], float, bool]:
    """One world of `compute_exposure_cells`, in an engine worker or the caller: its ledger materialized when missing,
    then `exposure_of_world`; the rows, the seconds it all took and whether the ledger was materialized."""
    started = time.perf_counter()
    session, definitions = worker_session()
    ledger_dir = session.paths.ledger_dir(world_id)
    built = not (ledger_dir / "ledger.jsonl").exists()
    if built:
        materialize(session, definitions, ["ledger"], [world_id], tags=tags or None)
    rows = exposure_of_world(str(ledger_dir), config, cells, task_count, task_seed, task_anchor)
    return rows, time.perf_counter() - started, built


def evaluate_cells(session: Session, definitions: Any, record: SweepRecord, echo: Echo, *, workers: int = 1,
                   llm: Any = None, budget: BudgetGuard | None = None, retry_transport: bool = False,
                   tags: dict[str, str] | None = None, on_record: Callable[[SweepRecord], None] | None = None
                   ) -> None:
    """Every evaluated cell through `run_cells` (`workers` processes; the union of missing inputs built once),
    the record saved as each cell ends; a failed cell is recorded and the others go on. `llm`: the
    `LlmSettings` of an LLM sweep; `budget`: its spend cap, checked before each batch of `workers` cells (a
    batch that would take the spend past it is skipped, and so is every later one). `retry_transport`: a cell
    whose finished result has transport failures answers those again (`churnbench run --retry-transport`).
    `tags`: on every run started (the sweep's, `launches.Launch.run_tags`); `on_record`: called with the record
    each time a cell ends (the sweep run's progress table)."""
    del definitions  # run_cells loads the code location in each process
    total = len(record.cells)
    finished = 0
    by_identity = {(c.world_id, c.arm, c.policy, c.t_prime, c.t, c.saas_profile): c for c in record.cells}

    def on_cell(result: parallel.CellResult) -> None:
        nonlocal finished
        finished += 1
        c = result.cell
        cell = by_identity[(c.world, c.arm, c.policy, c.t_prime, c.t, c.saas_profile)]
        key = record.key_of(cell)
        if result.summary is None:
            record.outcomes[key] = {"status": FAILED, "error": result.error or "failed", "cell": cell.to_json()}
            echo(f"[{finished}/{total}] {key}: FAILED: {record.outcomes[key]['error']}")
        else:
            summary = result.summary
            record.outcomes[key] = outcome_of(cell, summary, result.seconds, result.worker)
            verb = "reused" if summary.get("reused") else "evaluated"
            echo(f"[{finished}/{total}] {key}: {verb}, stale {summary['stale_answers']}, "
                 f"exposure {summary['exposure']}")
            if budget is not None:
                budget.add(summary.get("llm_usage"))
                echo(f"  {budget.describe()}")
        record.save(session.paths)
        if on_record is not None:
            on_record(record)

    def progress(line: str) -> None:
        if not line.lstrip().startswith("cell ["):  # on_cell says it with the sweep's key
            echo(line)

    pending = list(record.cells)
    batch_size = len(pending) if budget is None else max(1, workers)
    while pending:
        if budget is not None and not budget.allows_next():
            for cell in pending:
                key = record.key_of(cell)
                record.outcomes[key] = {"status": SKIPPED, "error": f"not started: {budget.describe()}",
                                        "cell": cell.to_json()}
                finished += 1
                echo(f"[{finished}/{total}] {key}: skipped ({budget.describe()})")
            record.save(session.paths)
            return
        batch, pending = pending[:batch_size], pending[batch_size:]
        results = parallel.run_cells(session.paths, [parallel.Cell(c.world_id, c.arm, c.policy, c.t_prime, c.t,
                                                                   c.saas_profile, llm) for c in batch],
                                     workers=workers, progress=progress,
                                     tags={SWEEP_TAG: record.sweep_id, **repeats_tags(record.spec.repeats),
                                           **(tags or {}),
                                           **({RETRY_TRANSPORT_TAG: "true"} if retry_transport else {})},
                                     on_cell=on_cell)
        for cell, result in zip(batch, results, strict=True):  # a cell that never reached the pool
            if record.outcomes.get(record.key_of(cell), {}).get("status") not in (DONE, FAILED):
                on_cell(result)


def outcome_of(cell: Cell, summary: dict[str, Any], seconds: float, worker: str = "") -> dict[str, Any]:
    """A finished cell's outcome in the sweep record; `worker`: the engine worker that ran it ("" in the caller)."""
    keep = ("scenario_key", "experiment_hash", "code_version", "tasks", "verdicts", "stale_answers", "accuracy",
            "exposure", "degenerate_exposure", "prediction", "prediction_interval_90", "mean_cost_units",
            "route_mix", "planned_vintage", "results", "reused", "inputs_built", "llm_usage",
            "repeats")  # the experiment over the cell's repeats (efficiency, awareness; K > 1: pass^K, ...)
    return {"status": DONE, "cell": cell.to_json(), "seconds": round(seconds, 1),
            **{k: summary.get(k) for k in keep}, **({"worker": worker} if worker else {})}


def record_refresh_rows(session: Session, record: SweepRecord) -> None:
    """Rows each evaluated cell's planned refreshes copy over (T', T] (`grounding/refresh_cost.py`)."""
    with connection(session.urls.warehouse) as conn:
        for key, outcome in record.outcomes.items():
            if outcome.get("status") != DONE:
                continue
            plan = stored_plan(session.paths, key)
            if plan is None:
                continue
            cell = Cell.from_json(outcome["cell"])
            outcome["refresh_rows"] = refresh_rows(conn, cell.world_id, plan.refresh_days, cell.t_prime,
                                                   session.paths.contracts_root(cell.world_id))
            outcome["refreshes"] = sum(len([d for d in days if d > cell.t_prime])
                                       for days in plan.refresh_days.values())
    record.save(session.paths)


def run_sweep(session: Session, definitions: Any, spec: SweepSpec, *, echo: Echo = print, workers: int = 1,
              report: bool = True, partition_set: str | None = SWEEP_PARTITIONS_NAME,
              llm_budget_usd: float | None = None, llm_max_concurrent: int = 2,
              retry_transport: bool = False, fields: Fields = LAUNCHPAD_FIELDS, launch: Launch | None = None,
              on_record: Callable[[SweepRecord], None] | None = None,
              checked: tuple[list[Cell], list[Cell]] | None = None) -> SweepRecord:
    """Register, compute, evaluate and report a sweep (see the module doc). An LLM sweep (`spec.agent` "llm")
    takes its settings from CHURNBENCH_LLM_*, prints its estimate before any cell starts, stops starting cells
    at `llm_budget_usd`, and runs at most `llm_max_concurrent` cells (each one model call at a time) at once.
    `retry_transport`: finished cells with transport failures answer those again (a retry of the same
    experiment); the others are reused as always. The request is checked first, nothing registered before
    (`orchestration/requests.check_sweep_request`; `fields`: how its refusals name the fields). `launch`: who
    launched it and its own run (`launches.Launch`): every run it starts carries its sweep id and launcher, and is
    filed under the sweep-runs backfill when the sweep has a run of its own. `on_record`: see `evaluate_cells`.
    `partition_set`: where the sweep is registered as a partition (`register_sweep`); `report` materializes
    `sweep_report`, which needs the default. `checked`: the caller's own request check of this spec (not
    repeated)."""
    started = time.perf_counter()
    checked = checked if checked is not None else check_sweep_request(session.paths, spec, fields)
    llm = budget = None
    if spec.agent == LLM:
        spec, llm = with_llm_settings(spec)
        workers = min(workers, llm_max_concurrent)
    launch = launch or Launch()
    tags = launch.run_tags(spec.sweep_id)
    if launch.run_id is not None:
        ensure_sweep_runs(session.instance)
    record = register_sweep(session, definitions, spec, echo, checked=checked, tags=tags,
                            partition_set=partition_set)
    if llm is not None:
        # each repeat of a cell costs what one answering of it does
        est = estimate(llm, len(record.cells) * spec.repeats, task_settings().count, today=spec.t)
        echo(est.describe())
        per_answering = est.per_cell_typical_usd()
        budget = BudgetGuard(llm_budget_usd, None if per_answering is None else per_answering * spec.repeats)
        for outcome in record.outcomes.values():  # what earlier launches of this sweep spent counts too
            if outcome.get("status") == DONE and not outcome.get("reused"):
                budget.add(outcome.get("llm_usage"))
    record.started, record.finished = _now(), ""
    counts = f"{len(record.cells)} evaluated cell(s), {len(record.exposure_cells)} exposure-only"
    echo(f"sweep {record.sweep_id}: {counts}")
    compute_exposure_cells(session, definitions, record, echo, workers=workers, tags=tags)
    evaluate_cells(session, definitions, record, echo, workers=workers, llm=llm, budget=budget,
                   retry_transport=retry_transport, tags=tags, on_record=on_record)
    record_refresh_rows(session, record)
    record.finished = _now()
    record.save(session.paths)
    if report:
        materialize(session, definitions, ["sweep_report"], [record.sweep_id], tags=tags)
    status = record.status_counts()
    echo(f"sweep {record.sweep_id}: {status[DONE]} done, {status[FAILED]} failed, in "
         f"{time.perf_counter() - started:.0f} s")
    return record


# ---------------------------------------------------------------------------------------------------
# Removal
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Removal:
    sweep_id: str
    scenarios: list[str]  # the sweep's scenarios no other sweep has
    kept: list[str]  # the sweep's scenarios another sweep also has (left in place)
    folders: list[Any]  # results folders and the report folder

    def describe(self) -> str:
        return (f"sweep {self.sweep_id}: removes its record and report, {len(self.scenarios)} scenario(s) "
                f"(definitions, eval_run partitions, results folders, catalog rows); keeps {len(self.kept)} "
                "scenario(s) another sweep also runs, and every world and input partition (caches other "
                "scenarios share; `churnbench worlds rm` removes a world with its data)")


def plan_removal(session: Session, sweep_id: str) -> Removal:
    record = load_sweep(session.paths, sweep_id)
    mine = {record.key_of(c): c for c in record.cells}
    others: set[str] = set()
    for other in list_sweeps(session.paths):
        if other != sweep_id:
            other_record = load_sweep(session.paths, other)
            others |= {other_record.key_of(c) for c in other_record.cells}
    gone = sorted(k for k in mine if k not in others)
    folders = [session.paths.results_dir(mine[k].world_id) / k for k in gone]
    folders = [f for f in folders if f.exists()]
    report = sweep_report_dir(session.paths, sweep_id)
    return Removal(sweep_id, gone, sorted(set(mine) & others), [*folders, *([report] if report.exists() else [])])


def remove_sweep(session: Session, removal: Removal) -> None:
    """Remove what `plan_removal` listed: catalog rows first (the only step that needs the database), then the
    partitions, then the files, the record last (a rerun finds what is left). Materialization history stays:
    Dagster's SQL event storage cannot wipe single partitions (as for `worlds rm`, `world_registry.py`); a
    removed partition no longer shows in the UI's partition lists."""
    with connection(session.urls.warehouse, autocommit=True) as conn:
        delete_scenario_runs(conn, removal.scenarios)
    instance = session.instance
    existing = [k for k in removal.scenarios if instance.has_dynamic_partition(SCENARIO_PARTITIONS_NAME, k)]
    for key in existing:
        instance.delete_dynamic_partition(SCENARIO_PARTITIONS_NAME, key)
    for partition_set in (SWEEP_PARTITIONS_NAME, REGRESSION_PARTITIONS_NAME):
        if instance.has_dynamic_partition(partition_set, removal.sweep_id):
            instance.delete_dynamic_partition(partition_set, removal.sweep_id)
    for folder in removal.folders:
        shutil.rmtree(folder, ignore_errors=True)
    for key in removal.scenarios:
        session.paths.scenario_file(key).unlink(missing_ok=True)
    sweep_file(session.paths, removal.sweep_id).unlink(missing_ok=True)
