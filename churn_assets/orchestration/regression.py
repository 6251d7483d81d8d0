"""The nightly regression on a state folder: the one code path behind `churnbench regression` and the `regression`
job (which the `nightly_regression` schedule launches).

`run_regression(session, definitions)` runs the `regression` sweep preset through `run_sweep` (finished cells
reused), optionally rewrites the baseline from its figures, then materializes the sweep's `regression_report`
partition, whose blocking `regression_gate` check compares the figures and config hashes with the baseline. It
returns the gate's result; a failed gate fails the check (and so the report's run) on purpose.

A registry edit makes every stored plan of the preset's scenarios stale (a plan records the registry it was made
from and `eval_run` refuses another): the regression measures today's configuration, so it replans those
scenarios first (their earlier results stay, keyed by their experiment hash).

`run_stochastic_regression` is the gate of an LLM agent (`churnbench regression --agent llm`, issue 33): the
same preset with the LLM agent and K repeats per cell, each cell's per-task verdicts of every repeat (read from
its repeats' folders) against a per-model baseline file (`sweeps/stochastic_gate.py`); its report goes beside
the sweep's (`regression-llm.md`, `regression-llm.json`). The deterministic gate and its `regression_report`
asset are not involved: nothing of the nightly regression changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from churn_assets.arms.agents.llm_settings import LlmSettings
from churn_assets.arms.registry import ARMS
from churn_assets.evaluation.repeats import verdict_matrix
from churn_assets.evaluation.results import code_version
from churn_assets.files import atomic_write_text
from churn_assets.grounding.registry import load_registry
from churn_assets.orchestration.launches import Launch
from churn_assets.orchestration.materialize import MaterializationError, Session, materialize
from churn_assets.orchestration.partitions import REGRESSION_PARTITIONS_NAME, SWEEP_PARTITIONS_NAME
from churn_assets.orchestration.scenario_inputs import scenario_plan
from churn_assets.orchestration.scenarios import load_scenario, stored_plan
from churn_assets.orchestration.sweep_records import (
    NIGHT_TAG,
    SweepRecord,
    regression_night,
    regression_night_dir,
    scenario_key_of,
    sweep_report_dir,
)
from churn_assets.orchestration.sweeps import run_sweep, with_llm_settings
from churn_assets.sweeps.presets import customize, preset_spec
from churn_assets.sweeps.regression import (
    COMMITTED_BASELINE,
    BaselineError,
    GateResult,
    baseline_path,
    cell_label,
    current_hashes,
    figures_of,
    gate,
    load_baseline,
    make_baseline,
    write_baseline,
)
from churn_assets.sweeps.spec import LLM, cells, resolve_worlds
from churn_assets.sweeps.stochastic_gate import (
    ALPHA,
    StochasticGateError,
    llm_baseline_path,
    load_stochastic_baseline,
    make_stochastic_baseline,
    report_markdown,
    stochastic_gate,
)

Echo = Callable[[str], None]
REGRESSION_PRESET = "regression"
REGRESSION_TAG = "churnbench/regression"


@contextlib.contextmanager
def _logging_disabled(level: int) -> Iterator[None]:
    previous = logging.root.manager.disable
    logging.disable(level)
    try:
        yield
    finally:
        logging.disable(previous)


@dataclass(frozen=True)
class RegressionOutcome:
    record: SweepRecord
    result: GateResult
    baseline: Path
    report_dir: Path
    baseline_updated: bool
    seconds: float


def replan_stale_plans(session: Session, spec: Any, echo: Echo) -> int:
    """Replan the preset's scenarios whose stored plan was made from another registry than today's (an LLM
    spec: its scenarios under the agent id of today's CHURNBENCH_LLM_* settings)."""
    registry = load_registry()
    evaluated, _ = cells(spec, resolve_worlds(spec), {name: a.only_policy for name, a in ARMS.items()})
    model_settings = None
    if spec.agent == LLM:
        _, settings = with_llm_settings(spec)
        model_settings = settings.to_json()
        evaluated = [dataclasses.replace(c, agent=settings.agent_id) for c in evaluated]
    replanned = 0
    for cell in evaluated:
        key = scenario_key_of(cell, model_settings)
        if not session.paths.scenario_file(key).exists():  # never defined: it is planned when it first runs
            continue
        plan = stored_plan(session.paths, key)
        if plan is not None and plan.registry_hash != registry.content_hash:
            scenario_plan(session, load_scenario(session.paths, key), replan=True, registry=registry)
            replanned += 1
    if replanned:
        echo(f"registry {registry.content_hash}: {replanned} scenario(s) planned with another registry, replanned")
    return replanned


def _leave_sweep_partitions(session: Session, sweep_id: str) -> None:
    """A regression sweep registered by an older version sits in `sweep_report`'s partitions too, where it shows
    as "Missing": it leaves them, unless a `sweep_report` was materialized for it (then it was run as a sweep)."""
    instance = session.instance
    if instance.has_dynamic_partition(SWEEP_PARTITIONS_NAME, sweep_id) and sweep_id not in \
            instance.get_materialized_partitions(dg.AssetKey("sweep_report")):
        instance.delete_dynamic_partition(SWEEP_PARTITIONS_NAME, sweep_id)


def run_regression(session: Session, definitions: Any, *, echo: Echo = print, update_baseline: bool = False,
                   workers: int = 1, spec: Any = None, launch: Any = None) -> RegressionOutcome:
    """The regression (see the module doc). `spec`: another `SweepSpec` than the preset's (tests run a smaller
    one against a baseline of their own). `launch`: who launched it and its own run (`launches.Launch`), as for
    `run_sweep`."""
    started = time.perf_counter()
    night = regression_night()
    spec = spec or preset_spec(REGRESSION_PRESET)
    path = baseline_path()
    if not update_baseline:
        load_baseline(path)  # a missing or broken baseline fails before anything runs
    replan_stale_plans(session, spec, echo)
    launch = launch or Launch()
    record = run_sweep(session, definitions, spec, echo=echo, workers=workers, report=False, launch=launch,
                       partition_set=REGRESSION_PARTITIONS_NAME)
    _leave_sweep_partitions(session, record.sweep_id)
    figures, hashes = figures_of(record.to_json()), current_hashes(spec)
    if update_baseline:
        try:
            thresholds = load_baseline(path).get("thresholds")
        except BaselineError:
            thresholds = None
        write_baseline(path, make_baseline(figures, hashes, sweep_id=record.sweep_id, spec=spec.to_json(),
                                           thresholds=thresholds, code_version=code_version()))
        echo(f"baseline {path} written: {len(figures)} cell(s)")
    result = gate(load_baseline(path), figures, hashes)
    try:
        # A failed gate fails the report's run on its blocking check, on purpose; the caller prints the findings,
        # so Dagster's own log of that expected failure (with its stack trace) is not shown.
        with _logging_disabled(logging.ERROR) if not result.passed else contextlib.nullcontext():
            materialize(session, definitions, ["regression_report"], [record.sweep_id],
                        tags={**launch.run_tags(record.sweep_id), REGRESSION_TAG: "gate", NIGHT_TAG: night.isoformat()})
    except MaterializationError:
        if result.passed:  # the report itself broke: not the gate's verdict
            raise
    return RegressionOutcome(record, result, path, regression_night_dir(session.paths, record.sweep_id, night),
                             update_baseline, time.perf_counter() - started)


# ---------------------------------------------------------------------------------------------------
# the stochastic gate (an LLM agent)
# ---------------------------------------------------------------------------------------------------

LLM_REPORT = "regression-llm"


@dataclass(frozen=True)
class StochasticRegressionOutcome:
    record: SweepRecord
    result: Any  # sweeps.stochastic_gate.StochasticGateResult
    baseline: Path
    report_dir: Path
    baseline_updated: bool
    seconds: float


def cell_verdicts_of(record: SweepRecord, repeats: int) -> dict[str, dict[str, Any]]:
    """Cell label -> {"tasks": {task: {"template", "verdicts"}}} of every finished cell, the verdicts of its
    first `repeats` repeats read from their results folders."""
    out: dict[str, dict[str, Any]] = {}
    for outcome in record.outcomes.values():
        if outcome.get("status") != "done" or not outcome.get("results"):
            continue
        matrix, templates, found = verdict_matrix(Path(str(outcome["results"])), limit=repeats)
        if found < repeats:
            continue  # not every repeat finished: the gate reports the cell missing
        out[cell_label(outcome["cell"])] = {"tasks": {t: {"template": templates[t], "verdicts": v}
                                                      for t, v in matrix.items()}}
    return dict(sorted(out.items()))


def run_stochastic_regression(session: Session, definitions: Any, *, echo: Echo = print,
                              update_baseline: bool = False, workers: int = 1, repeats: int = 1,
                              baseline: Path | None = None, spec: Any = None) -> StochasticRegressionOutcome:
    """The regression preset with the LLM agent (CHURNBENCH_LLM_*) and `repeats` repeats per cell, gated by
    `sweeps.stochastic_gate` against `baseline` (default `baselines/regression-llm-<model>.json`); with
    `update_baseline` the file is rewritten from this run first (its `alpha` kept). `spec`: another
    `SweepSpec` (tests)."""
    started = time.perf_counter()
    settings = LlmSettings.from_env()  # a clear error, before anything runs, when the endpoint is not set
    spec = spec or customize(preset_spec(REGRESSION_PRESET), agent=LLM, repeats=repeats)
    path = Path(baseline) if baseline else llm_baseline_path(settings.model, COMMITTED_BASELINE.parent)
    if not update_baseline:
        load_stochastic_baseline(path)  # a missing or broken baseline fails before any model is asked
    replan_stale_plans(session, spec, echo)
    record = run_sweep(session, definitions, spec, echo=echo, workers=workers, report=False, partition_set=None)
    cells = cell_verdicts_of(record, spec.repeats)
    hashes = current_hashes(spec)
    agent_id = str(record.spec.options.get("agent_id") or settings.agent_id)
    if update_baseline:
        try:
            alpha = float(load_stochastic_baseline(path).get("alpha") or ALPHA)
        except StochasticGateError:
            alpha = ALPHA
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(make_stochastic_baseline(
            cells, hashes, agent_id=agent_id, model=settings.model, model_settings=settings.to_json(),
            repeats=spec.repeats, sweep_id=record.sweep_id, spec=spec.to_json(), alpha=alpha,
            code_version=code_version()), indent=1, sort_keys=True) + "\n")
        echo(f"stochastic baseline {path} written: {len(cells)} cell(s), {spec.repeats} repeat(s) each")
    result = stochastic_gate(load_stochastic_baseline(path), cells, hashes, agent_id)
    report_dir = sweep_report_dir(session.paths, record.sweep_id)
    report_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(report_dir / f"{LLM_REPORT}.md", report_markdown(result, str(path)))
    atomic_write_text(report_dir / f"{LLM_REPORT}.json", json.dumps(
        {**result.to_json(), "baseline": str(path), "agent_id": agent_id, "repeats": spec.repeats,
         "sweep_id": record.sweep_id}, indent=1, sort_keys=True, default=str) + "\n")
    return StochasticRegressionOutcome(record, result, path, report_dir, update_baseline,
                                       time.perf_counter() - started)
