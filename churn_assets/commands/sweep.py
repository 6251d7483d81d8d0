"""`churnbench sweep`: run a sweep preset (the same code as the `sweep` job of the UI), list, show and remove
sweeps."""

from __future__ import annotations

import json
import time

import click

from churn_assets.commands.jobs import run_job
from churn_assets.commands.llm import GGUF_OPTION, agent_option, llm_settings
from churn_assets.fabric.saas_profiles import SAAS_PROFILES
from churn_assets.orchestration.sweep_records import list_sweeps, load_sweep, sweep_report_dir
from churn_assets.state import StatePaths
from churn_assets.sweeps.presets import PRESETS, PresetArgs, customize, exposure_only_spec, preset_spec
from churn_assets.unique_keys import load_json


def _ints(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers") from None


@click.group(invoke_without_command=True)
@click.option("--preset", type=click.Choice(list(PRESETS)), help="The preset: "
              + "; ".join(f"{p.name}: {p.summary}" for p in PRESETS.values()) + ".")
@click.option("--seeds", help="Comma-separated world seeds (worlds made from the world config); default: the "
              "preset's.")
@click.option("--world", "worlds", multiple=True, help="A registered world id instead of seeds (repeatable).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="The world config seeded worlds "
              "start from (default: the default config).")
@click.option("--set", "overrides", multiple=True, help="`section.key=value` override of the world config.")
@click.option("--arm", "arms", multiple=True, help="Arms instead of the preset's (repeatable).")
@click.option("--policy", "policies", multiple=True, help="Policies instead of the preset's (repeatable).")
@click.option("--gaps", help="Comma-separated gaps T - T' in days instead of the preset's.")
@click.option("--workers", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Cells evaluated at once; above 1 on the cell engine's workers (docs/deployment.md).")
@agent_option(default=None)
@GGUF_OPTION
@click.option("--saas-profile", type=click.Choice(SAAS_PROFILES), default=None,
              help="The SaaS API's plan (requests/min, latency); default: the preset's (the Launchpad's "
                   "`saas_profile`).")
@click.option("--llm-budget", "llm_budget", type=click.FloatRange(min=0), default=None,
              help="With --agent llm: stop starting cells once the spend plus a cell's estimate passes this (USD).")
@click.option("--llm-max-concurrent", type=click.IntRange(1, 8), default=2, show_default=True,
              help="With --agent llm: cells talking to the endpoint at once.")
@click.option("--exposure-only", "exposure_only", is_flag=True,
              help="Only the exposure-only cells (ttl-grid: every cell from the ledgers, no world evaluated).")
@click.option("--repeats", type=click.IntRange(1, 100), default=None,
              help="Answer every cell K times (each repeat its own results folder; `churnbench run --repeats`); "
                   "default: the preset's (1).")
@click.option("--json", "as_json", is_flag=True, help="Print the sweep's report data as one JSON object.")
@click.option("--retry-transport", is_flag=True,
              help="Answer again the transport failures (rate limit, outage) of cells already finished, into a retry "
                   "of the same experiment (as `churnbench run --retry-transport`); other cells are reused.")
@click.pass_context
def sweep(ctx: click.Context, preset: str | None, seeds: str | None, worlds: tuple[str, ...], config_path: str | None,
          overrides: tuple[str, ...], arms: tuple[str, ...], policies: tuple[str, ...], gaps: str | None,
          workers: int, agent: str | None, gguf: str | None, saas_profile: str | None,
          llm_budget: float | None,
          llm_max_concurrent: int, exposure_only: bool, repeats: int | None, as_json: bool,
          retry_transport: bool) -> None:
    """Run a sweep preset: worlds and scenarios registered, every missing input built, every cell evaluated
    (finished cells reused), the report written (`results/sweeps/<sweep id>/`) and materialized as the sweep's
    `sweep_report` partition. `churnbench sweep list|show|rm` manage sweeps."""
    if ctx.invoked_subcommand is not None:
        return
    if preset is None:
        raise click.UsageError("give --preset NAME (or a subcommand: list, show, rm)")
    from churn_assets.evaluation.requests import SWEEP_CLI_FIELDS
    from churn_assets.orchestration.requests import check_sweep_request

    if gguf:  # the sweep's settings are read from the environment once it knows its agent (`with_llm_settings`)

        llm_settings("llm", gguf, echo=lambda _m: None)
    spec = preset_spec(preset, PresetArgs(_ints(seeds), worlds, config_path, overrides))
    spec = customize(spec, arms=arms, policies=policies, gaps=_ints(gaps), agent=agent,
                     saas_profile=saas_profile, repeats=repeats)
    if exposure_only:
        spec = exposure_only_spec(spec)
    paths = StatePaths.resolve()
    # The one request check, before any service is opened or anything registered (the sweep's run repeats it).
    check_sweep_request(paths, spec, SWEEP_CLI_FIELDS)
    echo = (lambda m: click.echo(m, err=True)) if as_json else click.echo
    started = time.perf_counter()
    config = {"preset": preset, "seeds": list(_ints(seeds)), "worlds": list(worlds), "world_config": config_path or "",
              "overrides": list(overrides), "arms": list(arms), "policies": list(policies), "gaps": list(_ints(gaps)),
              "agent": agent, "saas_profile": saas_profile, "parallelism": workers,
              "llm_budget_usd": llm_budget,
              "llm_max_concurrent": llm_max_concurrent, "retry_transport": retry_transport,
              "exposure_only": exposure_only, "repeats": repeats or 1}
    outcome = run_job(paths, "sweep", {"run_sweep_cells": {"config": config}}, echo)
    record = load_sweep(paths, str(outcome.sweep_id))
    folder = sweep_report_dir(paths, record.sweep_id)
    if as_json:
        data = load_json((folder / "report.json").read_text(), str(folder / "report.json"))
        data["seconds"] = round(time.perf_counter() - started, 1)
        click.echo(json.dumps(data, indent=1, default=str))
    else:
        click.echo(f"report: {folder / 'report.md'}")
        click.echo(f"the sweep's run (Dagster UI, Runs): {outcome.run_id}")
    if outcome.failure:
        click.echo(outcome.failure, err=True)
        raise SystemExit(1)


@sweep.command("list")
def list_command() -> None:
    """Sweeps of the state folder, with their cells' status."""
    paths = StatePaths.resolve()
    ids = list_sweeps(paths)
    if not ids:
        click.echo("no sweeps")
    for sweep_id in ids:
        record = load_sweep(paths, sweep_id)
        c = record.status_counts()
        click.echo(f"{sweep_id}: {c['done']} done, {c['failed']} failed, {c['pending']} pending, "
                   f"{len(record.exposure_cells)} exposure-only; finished {record.finished or '-'}")


@sweep.command("show")
@click.argument("sweep_id")
def show_command(sweep_id: str) -> None:
    """Print a sweep's report (Markdown)."""
    paths = StatePaths.resolve()
    load_sweep(paths, sweep_id)
    report = sweep_report_dir(paths, sweep_id) / "report.md"
    if not report.exists():
        raise click.ClickException(f"sweep {sweep_id} has no report yet ({report})")
    click.echo(report.read_text())


@sweep.command("rm")
@click.argument("sweep_id")
@click.option("--yes", is_flag=True, help="Do not ask.")
def rm_command(sweep_id: str, yes: bool) -> None:
    """Remove a sweep: its record, report, its scenarios and their results, and the partitions no other sweep
    uses (worlds and their inputs stay: `churnbench gc` removes unregistered worlds)."""
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.sweeps import plan_removal, remove_sweep

    paths = StatePaths.resolve()
    with open_session(paths) as session:
        plan = plan_removal(session, sweep_id)
        click.echo(plan.describe())
        if not yes:
            click.confirm("remove?", abort=True)
        remove_sweep(session, plan)
    click.echo(f"sweep {sweep_id} removed")
