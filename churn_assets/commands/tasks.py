"""`churnbench tasks` (write a task set to a file) and `churnbench exposure` (how many of its answers a
served vintage would leave stale, measured and predicted), outside Dagster."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click

from churn_assets.commands.days import cli_day
from churn_assets.errors import UserFacingError
from churn_assets.evaluation import paper
from churn_assets.state import StatePaths
from churn_assets.world.calendar import require_in_calendar
from churn_assets.world.ledger import load_ledger


def _load(world_id: str | None, ledger_path: Path | None) -> tuple[str, Any]:
    """(world id, loaded ledger) of a registered world's ledger in the state folder, or of a ledger path."""
    if (world_id is None) == (ledger_path is None):
        raise click.UsageError("give one of --world ID or --ledger PATH")
    if world_id is not None:
        ledger_dir = StatePaths.resolve().ledger_dir(world_id)
        if not ledger_dir.is_dir():
            raise UserFacingError(f"world {world_id} has no ledger in {ledger_dir.parent}: register and "
                                  f"materialize it (`churnbench worlds add --materialize`), or pass --ledger")
        return world_id, load_ledger(ledger_dir)
    assert ledger_path is not None
    loaded = load_ledger(ledger_path)
    # A manifest without a world id (older manifests; the field is optional) is named like a ledger without one.
    named = loaded.manifest.world_id if loaded.manifest is not None else None
    name = named or ledger_path.stem.split(".")[0]
    return name, loaded


def _require_inside(loaded: Any, day: dt.date, what: str, name: str) -> None:
    first, last = _calendar(loaded)
    require_in_calendar(what, day, first, last, f"world {name}")


def _calendar(loaded: Any) -> tuple[dt.date, dt.date]:
    """(first day, last day) of a loaded ledger (never empty: the loader refuses an empty one)."""
    return dt.date.fromisoformat(loaded.first_day), dt.date.fromisoformat(loaded.last_day)


def _default_days(loaded: Any, at: str | None, t_prime: str | None) -> tuple[dt.date, dt.date]:
    """T and T' as given, else from the world's own calendar: the paper's T when the world has it (else its
    last day), and T' the paper's D+28 gap before T, not before the world's second day (change rates are
    measured on the days before T')."""
    first, last = _calendar(loaded)
    anchor = cli_day(at, "--at") if at is not None else (paper.T if first <= paper.T <= last else last)
    gap = paper.T - paper.D28
    build = cli_day(t_prime, "--t-prime") if t_prime is not None else max(first + dt.timedelta(days=1), anchor - gap)
    return anchor, build


@click.command()
@click.option("--world", "world_id", help="A registered world (its ledger in the state folder).")
@click.option("--ledger", "ledger_path", type=click.Path(path_type=Path), help="A ledger file or folder instead.")
@click.option("--at", "at", default=None, help=f"T: the day the questions are asked (default: {paper.T} when the "
              "world's calendar has it, else the world's last day).")
@click.option("--n", "n", type=click.IntRange(1, 10_000), help="Number of tasks (default: deployment config).")
@click.option("--seed", "task_seed", type=click.IntRange(0), help="Task seed (default: deployment config).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the task set (default: <state folder>/task-files/<world>/<T>-n<N>-seed<S>.jsonl).")
def tasks(world_id: str | None, ledger_path: Path | None, at: str | None, n: int | None, task_seed: int | None,
          out: Path | None) -> None:
    """Sample a task set from a world at T and write tasks.jsonl; prints its task-set hash."""
    from churn_assets.deployment import task_settings
    from churn_assets.tasks.generator import generate_task_set
    from churn_assets.tasks.task_set import task_set_counts, write_tasks

    name, loaded = _load(world_id, ledger_path)
    anchor, _ = _default_days(loaded, at, None)
    _require_inside(loaded, anchor, "--at", name)
    settings = task_settings()
    count, seed = n or settings.count, settings.seed if task_seed is None else task_seed
    generated = generate_task_set(loaded.records, world_id=name, anchor=anchor, n=count, task_seed=seed,
                                  format_version=loaded.format_version)
    if out is None:
        out = StatePaths.resolve().written_tasks_file(name, anchor, count, seed)
        out.parent.mkdir(parents=True, exist_ok=True)
    digest = write_tasks(generated.tasks, out)
    counts = task_set_counts(generated.tasks)
    click.echo(f"world {name} at T={anchor}: {len(generated.tasks)} tasks -> {out}")
    click.echo("task_tier: " + ", ".join(f"{k}: {v}" for k, v in counts["task_tier"].items()))
    click.echo("intent:    " + ", ".join(f"{k}: {v}" for k, v in counts["intent"].items()))
    click.echo(f"templates: {len(counts['template'])}, degenerate answers (zero/empty): {generated.degenerate}")
    click.echo(f"task-set hash {digest}")


@click.command()
@click.option("--world", "world_id", help="A registered world (its ledger in the state folder).")
@click.option("--ledger", "ledger_path", type=click.Path(path_type=Path), help="A ledger file or folder instead.")
@click.option("--tasks", "tasks_file", type=click.Path(dir_okay=False, path_type=Path),
              help="A tasks.jsonl (default: the world's default task set at T, sampled now).")
@click.option("--at", "at", default=None, help=f"T: the evaluation day (default: {paper.T} when the world's calendar "
              "has it, else the world's last day).")
@click.option("--t-prime", "t_prime", default=None, help="T': the cache build day (default: the paper's D+28 gap, "
              f"{(paper.T - paper.D28).days} days, before T, and not before the world's second day).")
@click.option("--policy", "policies", multiple=True, default=("tiered", "off"), show_default=True,
              help="Refresh policy (tiered, off, ttl:CLASS=DAYS, rate, uniform:N, proportional:N, rate-matched:N, "
                   "tier-shaped:N); repeatable.")
@click.option("--window", "window_days", type=click.IntRange(1, 366), default=None,
              help="Average over the N evaluation days ending at --at (T' fixed; the task set sampled at --at and "
                   "re-anchored to each day): mean, 90% interval and range per policy.")
@click.option("-v", "--verbose", is_flag=True, help="Per template: exposed, predicted, tasks (with --window: each "
              "day's exposure).")
def exposure(world_id: str | None, ledger_path: Path | None, tasks_file: Path | None, at: str | None,
             t_prime: str | None,
             policies: tuple[str, ...], window_days: int | None, verbose: bool) -> None:
    """Exposure (tasks whose gold at T differs from gold under the served vintage) and its prediction; with
    --window N, their means over the N days ending at T (docs/tasks.md, "Windows of arrival days")."""
    from churn_assets.deployment import task_settings
    from churn_assets.evaluation.exposure import MIN_HISTORY_DAYS, change_rates, run_exposure
    from churn_assets.freshness.planning import measured_change_rates, served_vintage
    from churn_assets.freshness.policies import parse_policy
    from churn_assets.freshness.scenario import check_days
    from churn_assets.grounding.registry import load_registry
    from churn_assets.tasks.generator import generate_task_set
    from churn_assets.tasks.gold import GoldResolver
    from churn_assets.tasks.task_set import read_tasks

    name, loaded = _load(world_id, ledger_path)
    anchor, build = _default_days(loaded, at, t_prime)
    _require_inside(loaded, anchor, "--at", name)
    _require_inside(loaded, build, "--t-prime", name)
    check_days(build, anchor)
    for text in policies:  # a malformed policy is refused before any work
        parse_policy(text)
    if window_days is not None:
        from churn_assets.evaluation.window import Window

        window = Window(build, window_days, anchor)  # refused when it starts before T'
    records = loaded.records
    if tasks_file is not None:
        task_list = read_tasks(tasks_file)
    else:
        settings = task_settings()
        task_list = generate_task_set(records, world_id=name, anchor=anchor, n=settings.count,
                                      task_seed=settings.seed, format_version=loaded.format_version).tasks
    registry = load_registry()
    start = dt.date.fromisoformat(records[0]["at"])
    resolver = GoldResolver(records, format_version=loaded.format_version)
    rates = change_rates(records, task_list, start=start, anchor=anchor, format_version=loaded.format_version)
    calendar_days = (dt.date.fromisoformat(loaded.last_day) - start).days + 1
    if window_days is not None:
        _print_windows(records, task_list, window, policies, registry, start=start, calendar_days=calendar_days,
                       resolver=resolver, rates=rates, name=name, verbose=verbose)
        return
    class_rates = measured_change_rates(records, start, build, registry.classes)
    click.echo(f"world {name}: {len(task_list)} tasks, T={anchor}, T'={build}")
    for text in policies:
        policy = parse_policy(text)
        vintage = served_vintage(registry, build, anchor, policy, rates=class_rates, calendar_days=calendar_days)
        run = run_exposure(records, task_list, anchor=anchor, t_prime=build, vintage=vintage, start=start,
                           resolver=resolver, rates=rates)
        served = ", ".join(f"{c} {d}" for c, d in vintage.items() if d != anchor) or "every class at T"
        lo, hi = run.interval()
        click.echo(f"{policy.policy_id:>10}: exposure {run.exposure:3d}, prediction {run.prediction:6.1f} "
                   f"(90% interval {lo}-{hi}), degenerate {run.degenerate_exposure} (served: {served})")
        if run.short_history:
            click.echo(f"{'':12}the prediction rests on {run.history_days} measured day(s) before T' (fewer than "
                       f"{MIN_HISTORY_DAYS}): too short a history to trust")
        if verbose:
            for template_id, (exposed, predicted, count) in run.by_template().items():
                if exposed or predicted >= 0.05:
                    click.echo(f"{'':12}{template_id:<38} {exposed:3d} {predicted:6.2f} / {count}")


def _print_windows(records: Any, task_list: Any, window: Any, policies: tuple[str, ...], registry: Any, *,
                   start: dt.date, calendar_days: int, resolver: Any, rates: Any, name: str, verbose: bool) -> None:
    from churn_assets.evaluation.window import WINDOW_INTERVAL_LABEL, policy_windows

    found = policy_windows(records, task_list, window, policies, registry, start=start, calendar_days=calendar_days,
                           resolver=resolver, rates=rates)
    asked = [d.asked for d in found[0].days]
    click.echo(f"world {name}: {len(task_list)} tasks sampled at {window.t_end}, re-anchored to each day "
               f"({min(asked)}-{max(asked)} askable a day); window {window.describe()}")
    # The exposure's interval is a bootstrap of what was measured; the prediction's is a forecast, whose label
    # carries its measured coverage (it holds fewer windows than 90%).
    click.echo(f"{'policy':>14}  exposure mean [90% interval] (range)        prediction mean "
               f"[{WINDOW_INTERVAL_LABEL}]")
    for w in found:
        lo, hi = w.prediction_interval_90 or (0.0, 0.0)
        predicted = f"{w.prediction:5.1f} [{lo:.1f}-{hi:.1f}]" if w.prediction is not None else "-"
        click.echo(f"{w.policy_id:>14}  {w.exposure.describe():<40} {predicted}")
        if verbose:
            click.echo(f"{'':16}per day: " + " ".join(f"{d.anchor:%m-%d} {d.run.exposure}" for d in w.days))
