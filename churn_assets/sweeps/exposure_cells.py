"""Exposure-only cells: a cell's plan, exposure and prediction from the world's ledger alone.

For the deterministic agent on `grounding` (and its off ablation) stale answers equal exposure exactly
(docs/rules.md, "Exposure and prediction"), so a grid of thousands of cells needs no store and no answer: the plan (the
same `plan_scenario` an evaluated cell stores), the task set the `task_set` asset would write (the same
generator, the deployment's count and seed), and `run_exposure`. The `ttl-grid` sweep evaluates one seed's
cells in full and checks the equality on them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from churn_assets.arms.registry import arm_spec, define_scenario
from churn_assets.evaluation.exposure import change_rates, run_exposure
from churn_assets.evaluation.window import askable
from churn_assets.freshness.planning import measured_change_rates
from churn_assets.freshness.scenario import ScenarioPlan, plan_scenario
from churn_assets.grounding.registry import Registry, load_registry
from churn_assets.sweeps.spec import Cell
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task
from churn_assets.world.config import WorldConfig
from churn_assets.world.ledger import load_ledger


def plan_cell(cell: Cell, config: WorldConfig, records: Sequence[Mapping[str, Any]], registry: Registry,
              rates_cache: dict[dt.date, dict[str, float]] | None = None) -> ScenarioPlan:
    """The cell's plan, as `scenario_inputs.make_plan` makes it for an evaluated cell."""
    scenario = define_scenario(cell.world_id, cell.arm, cell.policy, cell.t_prime, cell.t,
                               saas_profile=cell.saas_profile)
    reads = arm_spec(cell.arm).reads
    rates = None
    if reads.serves_policy and scenario.parsed_policy.needs_rates:
        cache = rates_cache if rates_cache is not None else {}
        if cell.t_prime not in cache:
            cache[cell.t_prime] = measured_change_rates(records, config.start, cell.t_prime, list(registry.classes))
        rates = cache[cell.t_prime]
    return plan_scenario(scenario, reads, registry, rates=rates, calendar_days=config.days)


def world_exposure(config: WorldConfig, records: Sequence[Mapping[str, Any]], cells: Sequence[Cell],
                   registry: Registry, *, task_count: int, task_seed: int, format_version: int = 2,
                   task_anchor: dt.date | None = None,
                   progress: Callable[[Cell, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Exposure, prediction and plan of every cell of one world (cells of other worlds are refused). `task_anchor`:
    the day the task set is sampled at for the cells before it (the sweep's T; None: each cell's own T)."""
    others = sorted({c.world_id for c in cells} - {config.world_id})
    if others:
        raise ValueError(f"world_exposure({config.world_id}) given cells of {', '.join(others)}")
    resolver = GoldResolver(records, format_version=format_version)
    sampled: dict[dt.date, list[Task]] = {}
    rates_cache: dict[dt.date, dict[str, float]] = {}

    def sample(day: dt.date) -> list[Task]:
        if day not in sampled:
            sampled[day] = generate_task_set(records, world_id=config.world_id, anchor=day, n=task_count,
                                             task_seed=task_seed, resolver=resolver,
                                             format_version=format_version).tasks
        return sampled[day]

    out = []
    for cell in cells:
        source = task_anchor if task_anchor is not None and cell.t < task_anchor else cell.t
        tasks = sample(source) if source == cell.t else askable(sample(source), cell.t, resolver, config.start)
        plan = plan_cell(cell, config, records, registry, rates_cache)
        stale = any(d < cell.t for d in plan.served_vintage.values())
        # Answer-change rates of every class, measured once per task set (to its T - 1) and shared by every cell
        # of the world: a rate at T' counts only days up to T', so one measurement serves every gap and, the task
        # ids and the entities they ask about being the same, every day the set is re-anchored to.
        rates = None
        if stale and cell.t_prime > config.start:
            rates = change_rates(records, sample(source), start=config.start, anchor=source,
                                 format_version=format_version)
        run = run_exposure(records, tasks, anchor=cell.t, t_prime=cell.t_prime, vintage=plan.served_vintage,
                           start=config.start, resolver=resolver, rates=rates)
        row = {
            "cell": cell.to_json(), "tasks": len(tasks), "exposure": run.exposure,
            "degenerate_exposure": run.degenerate_exposure, "prediction": round(run.prediction, 2),
            "prediction_interval_90": list(run.interval()), "prediction_history_days": run.history_days,
            "served_vintage": {c: d.isoformat() for c, d in sorted(plan.served_vintage.items())},
            "refresh_days": {c: [d.isoformat() for d in ds] for c, ds in sorted(plan.refresh_days.items())},
            "effective_ttls": dict(sorted(plan.effective_ttls.items())),
            "exposed_by_template": {k: v[0] for k, v in run.by_template().items() if v[0]},
            **({"task_anchor": source.isoformat()} if source != cell.t else {}),
        }
        out.append(row)
        if progress is not None:
            progress(cell, row)
    return out


def exposure_of_world(ledger_dir: str, config: WorldConfig, cells: Sequence[Cell], task_count: int,
                      task_seed: int, task_anchor: dt.date | None = None) -> list[dict[str, Any]]:
    """`world_exposure` of one world from its ledger folder (the sweeps' exposure-only job reads the ledger and
    the registry, CHURNBENCH_REGISTRY included, in its own process). The records are held packed
    (`world.packed`): a tenth of the memory, as fast from 10x on (a 1x world's cells about 10% slower)."""
    loaded = load_ledger(ledger_dir, packed=True)
    return world_exposure(config, loaded.records, cells, load_registry(), task_count=task_count,
                          task_seed=task_seed, format_version=loaded.format_version, task_anchor=task_anchor)
