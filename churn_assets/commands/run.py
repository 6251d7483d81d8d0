"""`churnbench run` (one scenario) and `churnbench paper` (the reference's 2x2 reproduced, every arm run).

Both build the scenario's inputs first with the scenario materializer, in process on the persistent
instance, then materialize the `eval_run` partition; results land under `<state>/results/<world>/`.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import click

from churn_assets.commands.days import cli_day
from churn_assets.commands.experiment_lines import experiment_lines, interval, result_line
from churn_assets.commands.llm import GGUF_OPTION, agent_option, llm_settings
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.paper import REFERENCE_STALE, WINDOWS, T, paper_cells
from churn_assets.fabric.saas_profiles import SAAS_PROFILES
from churn_assets.orchestration.scenario_runs import run_scenario
from churn_assets.state import StatePaths
from churn_assets.world.calendar import require_in_calendar
from churn_assets.world.config import load_config


class ArmChoice(click.Choice):
    """The registered arms, read from the arm registry when the CLI parses or prints help (so `--help`
    stays fast and an arm registered later shows up)."""

    def __init__(self) -> None:
        super().__init__([])

    @property
    def choices(self) -> tuple[str, ...]:
        from churn_assets.arms.registry import arm_names

        return arm_names()

    @choices.setter
    def choices(self, _value: Any) -> None:
        pass


class ArmOption(click.Option):
    """`--arm`, whose help lists every registered arm with its one-line description."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from churn_assets.arms.registry import arms_help

        self.help = f"The arm: {arms_help()}."
        return super().get_help_record(ctx)


SAAS_PROFILE_OPTION = click.option("--saas-profile", type=click.Choice(SAAS_PROFILES), default="default",
                                   show_default=True, help="The SaaS API's plan (requests/min, latency).")
RETRY_TRANSPORT_OPTION = click.option(
    "--retry-transport", is_flag=True,
    help="Answer again the transport failures (rate limit, outage) of a finished run of this scenario, into a "
         "retry folder of the same experiment; its other answers are kept. Without it a finished run is reused.")
REPLAN_OPTION = click.option("--replan", is_flag=True, help="Plan the scenario again with today's registry (a "
                             "stored plan made from another registry is refused otherwise).")
REPEATS_OPTION = click.option(
    "--repeats", type=click.IntRange(1, 100), default=1, show_default=True,
    help="Answer each scenario K times, each repeat its own results folder reused on its own (an LLM agent "
         "samples with each repeat's seed); prints mean accuracy with its 90% interval, pass^K, pass@K and "
         "answer stability (docs/llm.md). The deterministic agent's repeats must answer alike, else the run fails.")


def _retry_line(s: dict[str, Any]) -> str:
    """What `--retry-transport` did: nothing to retry, or how many failures were asked again and how many remain."""
    left = s["verdicts"]["transport_failure"]
    if s.get("reused") or not s.get("retry"):
        return f"retry-transport: nothing re-asked ({left} transport failure(s) in the finished result)"
    return (f"retry-transport: retry {s['retry']} of {s['retry_of']}: {s['transport_failures_retried']} transport "
            f"failure(s) asked again, {left} left")


@click.command()
@click.option("--world", "world_id", required=True, help="A registered world.")
@click.option("--arm", required=True, type=ArmChoice(), cls=ArmOption)
@click.option("--t-prime", "t_prime", required=True, help="T': the cache build day.")
@click.option("--t", "t", required=True, help="T: the evaluation day.")
@click.option("--policy", default="tiered", show_default=True,
              help="tiered, off, ttl:CLASS=DAYS[,..], rate[:CHANGES], uniform:N, proportional:N.")
@agent_option()
@GGUF_OPTION
@SAAS_PROFILE_OPTION
@REPLAN_OPTION
@RETRY_TRANSPORT_OPTION
@REPEATS_OPTION
def run(world_id: str, arm: str, t_prime: str, t: str, policy: str, agent: str, gguf: str | None,
        saas_profile: str, replan: bool, retry_transport: bool, repeats: int) -> None:
    """Evaluate one scenario: build its inputs, then materialize its `eval_run` partition."""
    from churn_assets.arms.registry import check_arm_policy
    from churn_assets.evaluation.requests import Request
    from churn_assets.orchestration.requests import check_run

    check_arm_policy(arm, policy)  # before anything is opened: a policy-free arm refuses a policy in one line
    # settings from CHURNBENCH_LLM_* (or the local model): a clear error, before anything starts, when missing
    llm = llm_settings(agent, gguf)
    paths = StatePaths.resolve()
    # The one request check, before any service is opened or anything written (`run_scenario` takes its result).
    build_day, eval_day = cli_day(t_prime, "--t-prime"), cli_day(t, "--t")
    scenario = check_run(paths, Request(world_id, arm, policy, build_day, eval_day, llm.agent_id if llm else "",
                             saas_profile, llm.to_json() if llm else None))
    from churn_assets.orchestration.definitions import defs_for  # imports Dagster and the code location: after
    from churn_assets.orchestration.materialize import open_session

    with open_session(paths) as session:
        summary = run_scenario(session, defs_for(str(paths.root)), world_id, arm, build_day, eval_day, policy,
                               saas_profile, click.echo, llm=llm, replan=replan, retry_transport=retry_transport,
                               repeats=repeats, checked=scenario)
    click.echo(f"{summary['scenario_key']}: {result_line(summary)}" + (" (repeat 0)" if repeats > 1 else ""))
    resumed = summary.get("resumed_tasks") or 0
    if resumed and not summary.get("reused"):
        click.echo(f"resumed: {resumed} of {sum(summary['verdicts'].values())} answers kept from the interrupted "
                   "run's checkpoint, the others answered now")
    for line in experiment_lines(summary.get("repeats")):
        click.echo(line)
    if retry_transport:
        click.echo(_retry_line(summary))
    click.echo(f"results: {summary['results']}"
               + (f" (and its {repeats - 1} sibling repeat folder(s) `...__rep<r>`)" if repeats > 1 else ""))


def default_workers() -> int:
    """Worker processes for the cells and their inputs: one per core, at most two (`run_cells` measured on the
    2-core machines; a third worker only adds contention)."""
    return max(1, min(2, len(os.sched_getaffinity(0))))


WORKERS_OPTION = click.option("--workers", type=click.IntRange(1, 8), default=None,
                              help="Input builds and cells at once (default: one per core, at most 2). Above 1 they "
                                   "run on the cell engine: local celery workers started as services, and any "
                                   "worker of another host on its broker (docs/deployment.md); 1 runs everything "
                                   "in this process, one at a time.")


@click.command()
@click.option("--world", "world_id", default=None, help="A registered world (default: the default world, "
              "registered and built if needed).")
@SAAS_PROFILE_OPTION
@REPLAN_OPTION
@WORKERS_OPTION
@agent_option()
@GGUF_OPTION
@REPEATS_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with a `runs` list.")
def paper(world_id: str | None, saas_profile: str, replan: bool, workers: int | None, agent: str,
          gguf: str | None, repeats: int, as_json: bool) -> None:
    """Reproduce the reference's 2x2 (D+1 / D+28, tiered / off) and run every arm at D+28 (T = 2024-04-27).
    The cells' missing inputs are built once, independent ones at the same time, and the cells evaluated as
    their inputs are ready, `--workers` at once (`orchestration/cells.run_cells`)."""
    echo = (lambda _msg: None) if as_json else click.echo
    llm = llm_settings(agent, gguf, echo)  # a bad --gguf is refused before the code location is imported
    workers = workers or default_workers()
    from churn_assets.orchestration.cells import Cell, run_cells
    from churn_assets.orchestration.materialize import repeats_tags
    from churn_assets.orchestration.world_registry import add_world, is_registered

    paths = StatePaths.resolve()
    started = time.perf_counter()
    if world_id is None:
        from churn_assets.orchestration.materialize import open_session

        config = load_config()
        world_id = config.world_id
        with open_session(paths) as session:  # run_cells builds the ledger with the other inputs
            add_world(paths, session.instance, config)
    else:
        from churn_assets.orchestration.materialize import open_session

        with open_session(paths) as session:
            if not is_registered(session.instance, world_id):
                raise UserFacingError(f"world {world_id!r} is not registered (churnbench worlds add)")
        # the paper's fixed dates (docs/rules.md, "The paper's windows"): a world without them is refused first
        from churn_assets.orchestration.world_registry import load_world_config

        config = load_world_config(paths, world_id)
        for name, day in (("the paper's D+28 T'", WINDOWS["D+28"]), ("the paper's T", T)):
            require_in_calendar(name, day, config.start, config.end, f"world {world_id}")
    cells = paper_cells()
    # The D+28 window's exposure-only means come from the ledger alone: computed beside the cells when the ledger
    # exists (the cells mostly wait on their inputs and the SaaS API), after them when they build it.
    ledger_dir = paths.ledger_dir(world_id)
    with ThreadPoolExecutor(max_workers=1) as pool:
        early = pool.submit(paper_window, paths, world_id, echo) if (ledger_dir / "ledger.jsonl").exists() \
            else None
        results = run_cells(paths, [Cell(world_id, arm, policy, WINDOWS[window], T, saas_profile, llm=llm)
                                    for arm, policy, window in cells],
                            workers=workers, progress=echo, replan=replan,
                            tags=repeats_tags(repeats) or None)
        failed = [r for r in results if not r.ok]
        if failed:
            raise UserFacingError("paper: " + "; ".join(f"{r.cell.label}: {r.error}" for r in failed))
        arrival = early.result() if early is not None and early.exception() is None \
            else paper_window(paths, world_id, echo)  # (a ledger the cells had to rebuild is read again)
    runs: list[dict[str, Any]] = []
    for (arm, policy, window), result in zip(cells, results, strict=True):
        s = dict(result.summary or {})
        s.update(arm=arm, policy=policy, t_prime=WINDOWS[window].isoformat(), t=T.isoformat(), window=window)
        runs.append(s)
        echo(f"== {arm} ({policy}) T'={s['t_prime']} T={T}\n   {result_line(s)}")
        for line in experiment_lines(s.get("repeats")) if repeats > 1 else []:
            echo(f"   {line}")
    elapsed = time.perf_counter() - started
    if as_json:
        # With one repeat the JSON is what it always was (`bench/compare_paper.py` compares it field by field).
        click.echo(json.dumps({"world": world_id, "t": T.isoformat(), "seconds": round(elapsed, 1),
                               "agent_id": llm.agent_id if llm else "det",
                               "saas_profile": saas_profile,
                               **({"repeats": repeats} if repeats > 1 else {}),
                               "runs": [{**_json_run(r), **({"repeats": r.get("repeats")} if repeats > 1 else {})}
                                        for r in runs],
                               "window": arrival}, indent=2))
        return
    _print_report(world_id, runs, elapsed, llm.agent_id if llm else "deterministic agent", arrival)


def paper_window(paths: StatePaths, world_id: str, echo: Any) -> dict[str, Any]:
    """The D+28 window of grounding tiered and off, exposure only (for the deterministic agent on `grounding`
    stale answers equal exposure), computed once per world and kept (`evaluation/paper_window.py`)."""
    from churn_assets.deployment import task_settings
    from churn_assets.evaluation.paper_window import PAPER_WINDOW, paper_window_figures

    started = time.perf_counter()
    settings = task_settings()
    figures, kept = paper_window_figures(paths.ledger_dir(world_id), paths.world_dir(world_id), world_id,
                                         task_count=settings.count, task_seed=settings.seed)
    how = "kept from an earlier paper" if kept else "computed"
    echo(f"D+28 window ({PAPER_WINDOW.describe()}): exposure of tiered and off {how} "
         f"in {time.perf_counter() - started:.1f} s")
    return figures


def _json_run(r: dict[str, Any]) -> dict[str, Any]:
    return {"arm": r["arm"], "policy": r["policy"], "t_prime": r["t_prime"], "t": r["t"], **r["verdicts"],
            "stale_answers": r["stale_answers"], "exposure": r["exposure"],
            "degenerate_exposure": r["degenerate_exposure"], "prediction": r["prediction"],
            "prediction_interval_90": r["prediction_interval_90"],
            "prediction_history_days": r["prediction_history_days"],
            "accuracy": r["accuracy"], "mean_cost": r["mean_cost_units"], "mean_latency_ms": r["mean_latency_ms"],
            "route_mix": r["route_mix"], "saas_calls": r["saas"].get("calls"), "saas_429s": r["saas"].get("throttled"),
            "results": r["results"]}


def window_lines(window: dict[str, Any]) -> list[str]:
    """The 2x2's D+28 window rows (`paper_window`'s figures): mean, 90% interval and range of tiered and off."""
    out = [f"D+28 over {window['days']} arrival days ({window['first']} .. {window['t']}, T' = {window['t_prime']} "
           "fixed; exposure only, = stale answers here):", f"{'':14}{'mean [90% interval]':>26}{'range':>10}"]
    for policy, label in (("tiered", "tiering on"), ("off", "tiering off")):
        w = window["policies"][policy]
        lo, hi = w["interval_90"]
        out.append(f"{label:14}{w['mean']:>12.1f} [{lo:.1f}-{hi:.1f}]{'':>2}{w['min']:>6}-{w['max']:<3}")
    return out


def _print_report(world_id: str, runs: list[dict[str, Any]], elapsed: float, agent: str,
                  window: dict[str, Any]) -> None:
    click.echo(f"\nchurnbench paper: world {world_id}, T = {T}, {runs[0]['tasks']} tasks, {elapsed / 60:.1f} min\n")
    click.echo(f"Stale answers (freshness + mixed-vintage errors), grounding arm, {agent}; reference in ()")
    click.echo(f"{'':14}{'D+1 (control)':>18}{'D+28':>14}")
    from churn_assets.arms.registry import TIERED_ARM, UNTIERED_ARM

    cell = {(r["policy"], r["window"]): r for r in runs if r["arm"] in (TIERED_ARM, UNTIERED_ARM)}
    for policy, label in (("tiered", "tiering on"), ("off", "tiering off")):
        row = [f"{cell[(policy, w)]['stale_answers']:>4} ({REFERENCE_STALE[(policy, w)]:>2})" for w in ("D+1", "D+28")]
        click.echo(f"{label:14}{row[0]:>18}{row[1]:>14}")
    click.echo("D+1 is a control: with T' = T - 1 nothing is refreshed under the staleness rule, so on = off.")
    for line in window_lines(window):
        click.echo(line)
    click.echo("")
    click.echo(f"{'arm (D+28)':32}{'acc':>7}{'ok':>5}{'fresh':>6}{'mixed':>6}{'reas':>5}{'parse':>6}{'trans':>6}"
               f"{'unat':>5}{'expo':>6}{'pred (90%)':>15}{'cost':>7}{'lat ms':>8}  routes")
    for r in runs:
        if r["window"] != "D+28":
            continue
        v = r["verdicts"]
        name = r["arm"] + (" (off)" if r["policy"] == "off" else "")
        routes = ", ".join(f"{k} {n}" for k, n in sorted(r["route_mix"].items(), key=lambda kv: -kv[1])[:3])
        click.echo(f"{name:32}{100 * (r['accuracy'] or 0):6.1f}%{v['correct']:5d}{v['freshness_error']:6d}"
                   f"{v['mixed_vintage_error']:6d}{v['reasoning_error']:5d}{v['parse_failure']:6d}"
                   f"{v['transport_failure']:6d}{v['unattributed_error']:5d}{r['exposure']:6d}"
                   f"{r['prediction']:6.1f} {interval(r):>8}{r['mean_cost_units']:7.2f}"
                   f"{(r['mean_latency_ms'] or 0):8.1f}  {routes}")
    if any(interval(r).endswith("*") for r in runs):
        from churn_assets.evaluation.exposure import MIN_HISTORY_DAYS

        click.echo(f"* the prediction rests on fewer than {MIN_HISTORY_DAYS} measured days before T'.")
