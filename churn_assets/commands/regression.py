"""`churnbench regression`: the nightly regression from the command line (the same code as the `regression` job):
the regression sweep preset, then its gate against the baseline; exits 1 when the gate fails, so any CI can run
it. With `--agent llm` the stochastic gate instead (a model's runs differ: per-task paired differences against a
per-model baseline, `sweeps/stochastic_gate.py`).

`churnbench gate-power`: measures that stochastic gate on K >= 10 repeats of one configuration (A/A false
alarms) and against another configuration (power)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from churn_assets.commands.jobs import run_job
from churn_assets.commands.results import catalog_of
from churn_assets.commands.run import REPEATS_OPTION
from churn_assets.errors import UserFacingError
from churn_assets.orchestration.sweep_records import regression_night, regression_night_dir
from churn_assets.state import StatePaths
from churn_assets.unique_keys import load_json


@click.command()
@click.option("--update-baseline", is_flag=True, help="Rewrite the baseline from this run's figures and today's "
              "config hashes (thresholds kept), then gate against it: commit the file with the change that moved "
              "the figures.")
@click.option("--baseline", "baseline", type=click.Path(dir_okay=False),
              help="The baseline file (default: baselines/regression.json of the clone, or "
                   "CHURNBENCH_REGRESSION_BASELINE; with --agent llm: baselines/regression-llm-<model>.json).")
@click.option("--workers", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Cells evaluated at once (worker processes).")
@click.option("--agent", type=click.Choice(["deterministic", "llm"]), default="deterministic", show_default=True,
              help="llm: the CHURNBENCH_LLM_* model, gated by the stochastic gate (paired per-task differences, "
                   "standard errors clustered by template, one-sided alpha 0.05 with Bonferroni over cells) "
                   "against a per-model baseline of every repeat's verdicts.")
@REPEATS_OPTION
def regression(update_baseline: bool, baseline: str | None, workers: int, agent: str, repeats: int) -> None:
    """Run the regression preset (two 30-day worlds, grounding on and off and naive at T - 27, deterministic
    agent; finished cells reused), materialize its `regression_report` and gate it: every figure (verdict
    counts, stale answers, exposure, accuracy per arm and cell) within the baseline's thresholds and the world
    config, registry and templates hashes unchanged. Prints every figure that moved; exits 1 when the gate fails.
    With --agent llm: the stochastic gate (docs/llm.md, "The statistical gate")."""
    from churn_assets.sweeps.regression import BASELINE_ENV, GateResult, baseline_path

    paths = StatePaths.resolve()
    if agent == "llm":
        from churn_assets.arms.agents.llm_settings import LlmSettings
        from churn_assets.orchestration.definitions import defs_for
        from churn_assets.orchestration.materialize import open_session
        from churn_assets.orchestration.regression import run_stochastic_regression

        LlmSettings.from_env()  # the endpoint's settings: one clear line before anything starts
        with open_session(paths) as session:
            stochastic = run_stochastic_regression(
                session, defs_for(str(paths.root)), echo=click.echo, update_baseline=update_baseline,
                workers=workers, repeats=repeats, baseline=Path(baseline).resolve() if baseline else None)
        for line in stochastic.result.lines():
            click.echo(f"  {line}")
        click.echo(stochastic.result.summary())
        click.echo(f"report: {stochastic.report_dir / 'regression-llm.md'} (baseline {stochastic.baseline}); "
                   f"{stochastic.seconds:.0f} s")
        if not stochastic.result.passed:
            raise SystemExit(1)
        return

    if baseline:
        os.environ[BASELINE_ENV] = os.path.abspath(baseline)  # the job, in this process, reads the same file
    if repeats != 1:
        raise click.UsageError("--repeats is for --agent llm: the deterministic agent's repeats answer alike, and its "
                               "gate compares exact figures")
    started, wall, night = time.perf_counter(), time.time(), regression_night()
    config = {"parallelism": workers, "update_baseline": update_baseline}
    outcome = run_job(paths, "regression", {"run_regression_gate": {"config": config}}, click.echo)
    report_dir = regression_night_dir(paths, str(outcome.sweep_id), night)  # this night's report (decision 251)
    gate_file = report_dir / "regression_gate.json"
    if outcome.failure and (not gate_file.exists() or gate_file.stat().st_mtime < wall):
        # it stopped before its gate (a missing baseline, a failed cell): no gate of this run to show
        raise UserFacingError(outcome.failure)
    result = GateResult.from_json(load_json(gate_file.read_text(), str(gate_file)))
    for line in result.lines():
        click.echo(f"  {line}")
    click.echo(result.summary())
    click.echo(f"report: {report_dir / 'regression.md'} (baseline {baseline_path()}); "
               f"{time.perf_counter() - started:.0f} s; the run in the Dagster UI: {outcome.run_id}")
    if not result.passed:
        raise SystemExit(1)


def _verdicts(ref: str) -> tuple[dict[str, list[str]], dict[str, str], int, str]:
    """(verdicts per task and repeat, templates, repeats, what was read) of an experiment named by a results
    folder (any of its repeats') or a catalog reference (`churnbench results show` takes the same)."""
    from churn_assets.evaluation.repeats import verdict_matrix

    folder = Path(ref)
    if not (folder / "summary.json").is_file():
        with catalog_of(StatePaths.resolve()) as catalog:
            run, _ = catalog.resolve(ref)
        folder = Path(run.results_dir)
    matrix, templates, k = verdict_matrix(folder)
    return matrix, templates, k, str(folder)


@click.command("gate-power")
@click.argument("run_ref", metavar="RUN")
@click.option("--against", "against", metavar="RUN", default=None,
              help="Another configuration's experiment on the same tasks (the `off` ablation of RUN's arm, say): "
                   "the power of the gate against it.")
@click.option("--comparisons", type=click.IntRange(200, 100_000), default=400, show_default=True,
              help="Random half-versus-half comparisons of each kind.")
@click.option("--alpha", type=click.FloatRange(0.0001, 0.5), default=0.05, show_default=True,
              help="The gate's one-sided level.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random splits.")
@click.option("--json", "as_json", is_flag=True, help="Print the measurement as one JSON object.")
def gate_power(run_ref: str, against: str | None, comparisons: int, alpha: float, seed: int, as_json: bool) -> None:
    """Measure the stochastic gate on K >= 10 repeats of one configuration (`run --repeats K`): split the repeats
    at random into two halves, gate one against the other, COMPARISONS times (A/A: every alarm is false), and
    report the false-alarm rate with its 90% interval (the A/A rule holds when it contains alpha or its upper
    bound is at most 2 alpha). With --against, the same halves against another configuration's repeats: the
    power. Says "GATE UNTESTED" when the repeats do not vary. Ends with the verdict: "acceptable" only when the
    A/A rule holds and the power is at least 0.8; otherwise "no power" (or "not acceptable": too many false
    alarms) and exit 1.

    RUN: a results folder of the experiment (any repeat's) or a catalog reference (`churnbench results show`)."""
    from churn_assets.sweeps.stochastic_gate import MIN_MEASURED_REPEATS, aa_false_alarms, gate_verdict, power_against

    matrix, templates, k, where = _verdicts(run_ref)
    if k < MIN_MEASURED_REPEATS:
        raise UserFacingError(f"gate-power: {where} has {k} complete repeat(s); the measurement needs at least "
                              f"{MIN_MEASURED_REPEATS} (`churnbench run ... --repeats {MIN_MEASURED_REPEATS}`)")
    aa = aa_false_alarms(matrix, templates, comparisons=comparisons, alpha=alpha, seed=seed)
    out: dict[str, Any] = {"run": where, "repeats": k, "tasks": len(matrix), "templates": len(set(templates.values())),
                           "alpha": alpha, "seed": seed, "aa": {**asdict(aa), "rule_holds": aa.aa_rule_holds}}
    lines = [f"A/A on {where} ({k} repeats, {len(matrix)} tasks): {aa.describe()}"]
    power = None
    if against is not None:
        other, _, k_other, other_where = _verdicts(against)
        power = power_against(matrix, other, templates, comparisons=comparisons, alpha=alpha, seed=seed)
        out["power"] = {**asdict(power), "against": other_where, "against_repeats": k_other}
        lines.append(f"power against {other_where} ({k_other} repeats): {power.describe()}")
    verdict = gate_verdict(aa, power)
    out["verdict"], out["verdict_reason"] = verdict.verdict, verdict.reason
    if as_json:
        click.echo(json.dumps(out, indent=1, default=str))
    else:
        for line in [*lines, verdict.describe()]:
            click.echo(line)
    if not verdict.acceptable:  # a CI step running gate-power fails on a gate that would not catch a drop
        raise SystemExit(1)
