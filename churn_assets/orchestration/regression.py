"""The nightly regression on a state folder: the one code path behind `churnbench regression` and the `regression`
job (which the `nightly_regression` schedule launches).

`run_regression(session, definitions)` runs the `regression` sweep preset through `run_sweep` (finished cells
reused), optionally rewrites the baseline from its figures, then materializes the sweep's `regression_report`
partition, whose blocking `regression_gate` check compares the figures and config hashes with the baseline. It
returns the gate's result; a failed gate fails the check (and so the report's run) on purpose.

A registry edit makes every stored plan of the preset's scenarios stale (a plan records the registry it was made
from and `eval_run` refuses another): the regression measures today's configuration, so it replans those
scenarios first (their earlier results stay, keyed by their experiment hash).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from churn_assets.orchestration.materialize import MaterializationError, Session, materialize
from churn_assets.orchestration.sweep_records import SweepRecord
from churn_assets.orchestration.sweeps import run_sweep
from churn_assets.sweeps.regression import GateResult

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
    """Replan the preset's scenarios whose stored plan was made from another registry than today's."""
    from churn_assets.arms.registry import ARMS
    from churn_assets.grounding.registry import load_registry
    from churn_assets.orchestration.scenario_inputs import scenario_plan
    from churn_assets.orchestration.scenarios import load_scenario, stored_plan
    from churn_assets.orchestration.sweep_records import scenario_key_of
    from churn_assets.sweeps.spec import cells, resolve_worlds

    registry = load_registry()
    evaluated, _ = cells(spec, resolve_worlds(spec), {name: a.fixed_policy for name, a in ARMS.items()})
    replanned = 0
    for cell in evaluated:
        key = scenario_key_of(cell)
        if not session.paths.scenario_file(key).exists():  # never defined: it is planned when it first runs
            continue
        plan = stored_plan(session.paths, key)
        if plan is not None and plan.registry_hash != registry.content_hash:
            scenario_plan(session, load_scenario(session.paths, key), replan=True, registry=registry)
            replanned += 1
    if replanned:
        echo(f"registry {registry.content_hash}: {replanned} scenario(s) planned with another registry, replanned")
    return replanned


def run_regression(session: Session, definitions: Any, *, echo: Echo = print, update_baseline: bool = False,
                   workers: int = 1, spec: Any = None, launch: Any = None) -> RegressionOutcome:
    """The regression (see the module doc). `spec`: another `SweepSpec` than the preset's (tests run a smaller
    one against a baseline of their own). `launch`: who launched it and its own run (`launches.Launch`), as for
    `run_sweep`."""
    from churn_assets.evaluation.results import code_version
    from churn_assets.orchestration.launches import Launch
    from churn_assets.sweeps.presets import preset_spec
    from churn_assets.sweeps.regression import (
        BaselineError,
        baseline_path,
        current_hashes,
        figures_of,
        gate,
        load_baseline,
        make_baseline,
        write_baseline,
    )

    started = time.perf_counter()
    spec = spec or preset_spec(REGRESSION_PRESET)
    path = baseline_path()
    if not update_baseline:
        load_baseline(path)  # a missing or broken baseline fails before anything runs
    replan_stale_plans(session, spec, echo)
    launch = launch or Launch()
    record = run_sweep(session, definitions, spec, echo=echo, workers=workers, report=False, launch=launch)
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
                        tags={**launch.run_tags(record.sweep_id), REGRESSION_TAG: "gate"})
    except MaterializationError:
        if result.passed:  # the report itself broke: not the gate's verdict
            raise
    from churn_assets.orchestration.sweep_records import sweep_report_dir

    return RegressionOutcome(record, result, path, sweep_report_dir(session.paths, record.sweep_id),
                             update_baseline, time.perf_counter() - started)
