"""`churnbench run` (one scenario) and `churnbench paper` (the reference's 2x2 reproduced, every arm run).

Both build the scenario's inputs first with the scenario materializer, in process on the persistent
instance, then materialize the `eval_run` partition; results land under `<state>/results/<world>/`.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import click

from churn_assets.evaluation.paper import REFERENCE_STALE, WINDOWS, T
from churn_assets.fabric.saas_profiles import SAAS_PROFILES
from churn_assets.orchestration.scenario_runs import run_scenario
from churn_assets.state import StatePaths
from churn_assets.sweeps.spec import AGENTS, DETERMINISTIC


def _day(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a day YYYY-MM-DD") from None


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


def _line(s: dict[str, Any]) -> str:
    v = s["verdicts"]
    return (f"accuracy {100 * (s['accuracy'] or 0):5.1f}%  correct {v['correct']:3d}  "
            f"freshness {v['freshness_error']:3d}  "
            f"mixed {v['mixed_vintage_error']:3d}  reasoning {v['reasoning_error']:3d}  parse {v['parse_failure']:2d}  "
            f"transport {v['transport_failure']:2d}  unattributed {v['unattributed_error']:2d}  "
            f"exposure {s['exposure']}  prediction {s['prediction']} {_interval(s)}")


def _retry_line(s: dict[str, Any]) -> str:
    """What `--retry-transport` did: nothing to retry, or how many failures were asked again and how many remain."""
    left = s["verdicts"]["transport_failure"]
    if s.get("reused") or not s.get("retry"):
        return f"retry-transport: nothing re-asked ({left} transport failure(s) in the finished result)"
    return (f"retry-transport: retry {s['retry']} of {s['retry_of']}: {s['transport_failures_retried']} transport "
            f"failure(s) asked again, {left} left")


def _interval(s: dict[str, Any]) -> str:
    """The prediction's 90% interval; `*` when it rests on too short a history (`exposure.MIN_HISTORY_DAYS`)."""
    from churn_assets.evaluation.exposure import MIN_HISTORY_DAYS

    lo_hi, history = s.get("prediction_interval_90"), s.get("prediction_history_days")
    short = "*" if history is not None and history < MIN_HISTORY_DAYS else ""
    return f"[{lo_hi[0]}-{lo_hi[1]}]{short}" if lo_hi else ""


@click.command()
@click.option("--world", "world_id", required=True, help="A registered world.")
@click.option("--arm", required=True, type=ArmChoice(), cls=ArmOption)
@click.option("--t-prime", "t_prime", required=True, help="T': the cache build day.")
@click.option("--t", "t", required=True, help="T: the evaluation day.")
@click.option("--policy", default="tiered", show_default=True,
              help="tiered, off, ttl:CLASS=DAYS[,..], rate[:CHANGES], uniform:N, proportional:N.")
@click.option("--agent", type=click.Choice(AGENTS), default=DETERMINISTIC, show_default=True,
              help="llm: a model on the OpenAI-compatible endpoint of CHURNBENCH_LLM_BASE_URL / CHURNBENCH_LLM_MODEL.")
@SAAS_PROFILE_OPTION
@REPLAN_OPTION
@RETRY_TRANSPORT_OPTION
def run(world_id: str, arm: str, t_prime: str, t: str, policy: str, agent: str, saas_profile: str,
        replan: bool, retry_transport: bool) -> None:
    """Evaluate one scenario: build its inputs, then materialize its `eval_run` partition."""
    from churn_assets.evaluation.requests import Request
    from churn_assets.orchestration.requests import check_run

    llm = None
    if agent == "llm":  # settings from CHURNBENCH_LLM_*: a clear error, before anything starts, when unset
        from churn_assets.arms.agents.llm import LlmSettings

        llm = LlmSettings.from_env()
    paths = StatePaths.resolve()
    # The one request check, before any service is opened or anything written (`run_scenario` repeats it).
    check_run(paths, Request(world_id, arm, policy, _day(t_prime), _day(t), llm.agent_id if llm else "",
                             saas_profile, llm.to_json() if llm else None))
    from churn_assets.orchestration.definitions import defs_for  # imports Dagster and the code location: after
    from churn_assets.orchestration.materialize import open_session

    with open_session(paths) as session:
        summary = run_scenario(session, defs_for(str(paths.root)), world_id, arm, _day(t_prime), _day(t), policy,
                               saas_profile, click.echo, llm=llm, replan=replan, retry_transport=retry_transport)
    click.echo(f"{summary['scenario_key']}: {_line(summary)}")
    if retry_transport:
        click.echo(_retry_line(summary))
    click.echo(f"results: {summary['results']}")


def default_workers() -> int:
    """Worker processes for the cells and their inputs: one per core, at most two (`run_cells` measured on the
    2-core machines; a third worker only adds contention)."""
    import os

    return max(1, min(2, len(os.sched_getaffinity(0))))


WORKERS_OPTION = click.option("--workers", type=click.IntRange(1, 8), default=None,
                              help="Worker processes building inputs and evaluating cells at once (default: one "
                                   "per core, at most 2; 1 runs everything in this process, one at a time).")


@click.command()
@click.option("--world", "world_id", default=None, help="A registered world (default: the default world, "
              "registered and built if needed).")
@SAAS_PROFILE_OPTION
@REPLAN_OPTION
@WORKERS_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with a `runs` list.")
def paper(world_id: str | None, saas_profile: str, replan: bool, workers: int | None, as_json: bool) -> None:
    """Reproduce the reference's 2x2 (D+1 / D+28, tiered / off) and run every arm at D+28 (T = 2024-04-27).
    The cells' missing inputs are built once, independent ones at the same time, and the cells evaluated as
    their inputs are ready, in `--workers` processes (`orchestration/cells.run_cells`)."""
    from churn_assets.errors import UserFacingError
    from churn_assets.orchestration.cells import Cell, run_cells
    from churn_assets.orchestration.world_registry import add_world, is_registered
    from churn_assets.world.config import load_config

    paths = StatePaths.resolve()
    echo = (lambda _msg: None) if as_json else click.echo
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
        # section 10's fixed dates: a world without them is refused before any cell starts
        from churn_assets.orchestration.world_registry import load_world_config
        from churn_assets.world.calendar import require_in_calendar

        config = load_world_config(paths, world_id)
        for name, day in (("the paper's D+28 T'", WINDOWS["D+28"]), ("the paper's T", T)):
            require_in_calendar(name, day, config.start, config.end, f"world {world_id}")
    cells = paper_cells()
    results = run_cells(paths, [Cell(world_id, arm, policy, WINDOWS[window], T, saas_profile)
                                for arm, policy, window in cells],
                        workers=workers or default_workers(), progress=echo, replan=replan)
    failed = [r for r in results if not r.ok]
    if failed:
        raise UserFacingError("paper: " + "; ".join(f"{r.cell.label}: {r.error}" for r in failed))
    runs: list[dict[str, Any]] = []
    for (arm, policy, window), result in zip(cells, results, strict=True):
        s = dict(result.summary or {})
        s.update(arm=arm, policy=policy, t_prime=WINDOWS[window].isoformat(), t=T.isoformat(), window=window)
        runs.append(s)
        echo(f"== {arm} ({policy}) T'={s['t_prime']} T={T}\n   {_line(s)}")
    elapsed = time.perf_counter() - started
    if as_json:
        click.echo(json.dumps({"world": world_id, "t": T.isoformat(), "seconds": round(elapsed, 1),
                               "saas_profile": saas_profile, "runs": [_json_run(r) for r in runs]}, indent=2))
        return
    _print_report(world_id, runs, elapsed)


def paper_cells() -> list[tuple[str, str, str]]:
    """(arm, policy, window) of the paper's runs: the 2x2 (the grounding arm tiered and its off ablation, at
    D+1 and D+28), then every other registered arm at D+28, tiered."""
    from churn_assets.arms.registry import TIERED_ARM, UNTIERED_ARM, arm_names

    cells = [(arm, policy, window) for window in WINDOWS for arm, policy in ((TIERED_ARM, "tiered"),
                                                                           (UNTIERED_ARM, "off"))]
    cells += [(arm, "tiered", "D+28") for arm in arm_names() if arm not in (TIERED_ARM, UNTIERED_ARM)]
    return cells


def _json_run(r: dict[str, Any]) -> dict[str, Any]:
    return {"arm": r["arm"], "policy": r["policy"], "t_prime": r["t_prime"], "t": r["t"], **r["verdicts"],
            "stale_answers": r["stale_answers"], "exposure": r["exposure"],
            "degenerate_exposure": r["degenerate_exposure"], "prediction": r["prediction"],
            "prediction_interval_90": r["prediction_interval_90"],
            "prediction_history_days": r["prediction_history_days"],
            "accuracy": r["accuracy"], "mean_cost": r["mean_cost_units"], "mean_latency_ms": r["mean_latency_ms"],
            "route_mix": r["route_mix"], "saas_calls": r["saas"].get("calls"), "saas_429s": r["saas"].get("throttled"),
            "results": r["results"]}


def _print_report(world_id: str, runs: list[dict[str, Any]], elapsed: float) -> None:
    click.echo(f"\nchurnbench paper: world {world_id}, T = {T}, {runs[0]['tasks']} tasks, {elapsed / 60:.1f} min\n")
    click.echo("Stale answers (freshness + mixed-vintage errors), grounding arm, deterministic agent; reference in ()")
    click.echo(f"{'':14}{'D+1 (control)':>18}{'D+28':>14}")
    from churn_assets.arms.registry import TIERED_ARM, UNTIERED_ARM

    cell = {(r["policy"], r["window"]): r for r in runs if r["arm"] in (TIERED_ARM, UNTIERED_ARM)}
    for policy, label in (("tiered", "tiering on"), ("off", "tiering off")):
        row = [f"{cell[(policy, w)]['stale_answers']:>4} ({REFERENCE_STALE[(policy, w)]:>2})" for w in ("D+1", "D+28")]
        click.echo(f"{label:14}{row[0]:>18}{row[1]:>14}")
    click.echo("D+1 is a control: with T' = T - 1 nothing is refreshed under the staleness rule, so on = off.\n")
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
                   f"{r['prediction']:6.1f} {_interval(r):>8}{r['mean_cost_units']:7.2f}"
                   f"{(r['mean_latency_ms'] or 0):8.1f}  {routes}")
    if any(_interval(r).endswith("*") for r in runs):
        from churn_assets.evaluation.exposure import MIN_HISTORY_DAYS

        click.echo(f"* the prediction rests on fewer than {MIN_HISTORY_DAYS} measured days before T'.")
