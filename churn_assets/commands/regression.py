"""`churnbench regression`: the nightly regression from the command line (the same code as the `regression` job):
the regression sweep preset, then its gate against the baseline; exits 1 when the gate fails, so any CI can run
it."""

from __future__ import annotations

import os

import click


@click.command()
@click.option("--update-baseline", is_flag=True, help="Rewrite the baseline from this run's figures and today's "
              "config hashes (thresholds kept), then gate against it: commit the file with the change that moved "
              "the figures.")
@click.option("--baseline", "baseline", type=click.Path(dir_okay=False),
              help="The baseline file (default: baselines/regression.json of the clone, or "
                   "CHURNBENCH_REGRESSION_BASELINE).")
@click.option("--workers", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Cells evaluated at once (worker processes).")
def regression(update_baseline: bool, baseline: str | None, workers: int) -> None:
    """Run the regression preset (two 30-day worlds, grounding on and off and naive at T - 27, deterministic
    agent; finished cells reused), materialize its `regression_report` and gate it: every figure (verdict
    counts, stale answers, exposure, accuracy per arm and cell) within the baseline's thresholds and the world
    config, registry and templates hashes unchanged. Prints every figure that moved; exits 1 when the gate fails."""
    import json
    import time

    from churn_assets.commands.jobs import run_job
    from churn_assets.errors import UserFacingError
    from churn_assets.orchestration.sweep_records import sweep_report_dir
    from churn_assets.state import StatePaths
    from churn_assets.sweeps.regression import BASELINE_ENV, GateResult, baseline_path

    if baseline:
        os.environ[BASELINE_ENV] = os.path.abspath(baseline)  # the job, in this process, reads the same file
    paths = StatePaths.resolve()
    started, wall = time.perf_counter(), time.time()
    config = {"parallelism": workers, "update_baseline": update_baseline}
    outcome = run_job(paths, "regression", {"run_regression_gate": {"config": config}}, click.echo)
    report_dir = sweep_report_dir(paths, str(outcome.sweep_id))
    gate_file = report_dir / "regression_gate.json"
    if outcome.failure and (not gate_file.exists() or gate_file.stat().st_mtime < wall):
        # it stopped before its gate (a missing baseline, a failed cell): no gate of this run to show
        raise UserFacingError(outcome.failure)
    result = GateResult.from_json(json.loads(gate_file.read_text()))
    for line in result.lines():
        click.echo(f"  {line}")
    click.echo(result.summary())
    click.echo(f"report: {report_dir / 'regression.md'} (baseline {baseline_path()}); "
               f"{time.perf_counter() - started:.0f} s; the run in the Dagster UI: {outcome.run_id}")
    if not result.passed:
        raise SystemExit(1)
