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
@click.option("--agent", type=click.Choice(["deterministic", "llm"]), default="deterministic", show_default=True,
              help="llm: refused until the statistical gate of a stochastic agent exists (docs/llm.md); "
                   "`churnbench sweep --preset regression --agent llm` runs the same cells.")
def regression(update_baseline: bool, baseline: str | None, workers: int, agent: str) -> None:
    """Run the regression preset (two 30-day worlds, grounding on and off and naive at T - 27, deterministic
    agent; finished cells reused), materialize its `regression_report` and gate it: every figure (verdict
    counts, stale answers, exposure, accuracy per arm and cell) within the baseline's thresholds and the world
    config, registry and templates hashes unchanged. Prints every figure that moved; exits 1 when the gate fails."""
    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.regression import run_regression
    from churn_assets.state import StatePaths
    from churn_assets.sweeps.regression import BASELINE_ENV

    if agent == "llm":
        from churn_assets.errors import UserFacingError

        # The baseline gate compares exact figures: right for the deterministic agent, wrong for a sampling model,
        # whose gate (repeats, paired differences against a per-model baseline) is issue 33's second part.
        raise UserFacingError("regression --agent llm: no gate for a stochastic agent yet (exact figures cannot "
                              "gate a sampling model); `churnbench sweep --preset regression --agent llm` runs the "
                              "same cells and reports their figures")
    if baseline:
        os.environ[BASELINE_ENV] = os.path.abspath(baseline)  # the report asset (in process) reads the same file
    paths = StatePaths.resolve()
    with open_session(paths) as session:
        outcome = run_regression(session, defs_for(str(paths.root)), echo=click.echo,
                                 update_baseline=update_baseline, workers=workers)
    result = outcome.result
    for line in result.lines():
        click.echo(f"  {line}")
    click.echo(result.summary())
    click.echo(f"report: {outcome.report_dir / 'regression.md'} (baseline {outcome.baseline}); "
               f"{outcome.seconds:.0f} s")
    if not result.passed:
        raise SystemExit(1)
