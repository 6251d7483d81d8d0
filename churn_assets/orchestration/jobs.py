"""Jobs of the code location: `sweep` (a grid of evaluation cells and its report, launched from the Launchpad),
`regression` (the regression preset and its gate; the `nightly_regression` schedule launches it)
and `build_scenario` (a defined scenario's missing inputs, then its `eval_run`; the `scenario_inputs` sensor
launches it when an `eval_run` launched from the UI finds inputs missing). `definitions.py` registers `JOBS`.

Both run their work in process inside the job's run, through the same functions as the CLI
(`orchestration/sweeps.run_sweep`, `orchestration/scenario_runs.run_scenario`): every input partition and
every cell is its own in-process run on the same instance, so the UI shows each cell's `eval_run` partition as
done, running or failed while the sweep runs, and the sweep run's log lists the cells as they finish
(decision 98).
"""

# No `from __future__ import annotations`: Dagster reads the config and resource annotations at decoration time.
import contextlib
import contextvars
import enum
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Optional

import dagster as dg
from pydantic import Field

from churn_assets.arms.registry import arm_names
from churn_assets.errors import UserFacingError
from churn_assets.fabric.saas_profiles import SAAS_PROFILES
from churn_assets.freshness.scenario import DETERMINISTIC_AGENT
from churn_assets.orchestration.asset_graph import asset_defs_for
from churn_assets.orchestration.assets.common import step_failure
from churn_assets.orchestration.dead_runs import has_process_tags, process_tags
from churn_assets.orchestration.materialize import Session
from churn_assets.orchestration.metadata import table_metadata
from churn_assets.orchestration.refusal import StepRefusal
from churn_assets.orchestration.resources import StateResource
from churn_assets.orchestration.scenarios import load_scenario
from churn_assets.sweeps.presets import PRESETS, PresetArgs, customize, exposure_only_spec, preset_spec
from churn_assets.sweeps.spec import AGENTS, SweepSpec

if TYPE_CHECKING:
    from churn_assets.orchestration.launches import Launch
    from churn_assets.orchestration.sweep_records import SweepRecord

PRESET_HELP = "; ".join(f"{p.name}: {p.summary}" for p in PRESETS.values())


def _choices(name: str, values: tuple[str, ...]) -> type[enum.Enum]:
    """An enumerated Launchpad type whose values are a source of truth's (the editor offers them and refuses any
    other before a run starts); read when the code location loads, so a new arm, preset, agent or SaaS profile
    shows by itself."""
    return enum.Enum(name, {v: v for v in values})  # type: ignore[return-value]


Preset = _choices("Preset", tuple(PRESETS))
Arm = _choices("Arm", arm_names())
Agent = _choices("Agent", AGENTS)
SaasProfile = _choices("SaasProfile", SAAS_PROFILES)

# The CLI runs the `sweep` and `regression` jobs in its own process; their progress lines go to its terminal too.
_CONSOLE: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar("churnbench_console",
                                                                                      default=None)


@contextlib.contextmanager
def console(echo: Callable[[str], None]) -> Iterator[None]:
    """Print the progress lines of the jobs run in this process (in process, by the CLI) with `echo` too."""
    token = _CONSOLE.set(echo)
    try:
        yield
    finally:
        _CONSOLE.reset(token)


def _echo(context: dg.OpExecutionContext) -> Callable[[str], None]:
    printer = _CONSOLE.get()

    def echo(line: str) -> None:
        context.log.info(line)
        if printer is not None:
            printer(line)

    return echo


class SweepConfig(dg.Config):
    """A sweep's Launchpad config: a preset and what to change in it. Empty fields take the preset's values;
    changing the grid (arms, policies, T, T' or gaps, agent) makes a custom sweep, `custom-<hash>`."""

    preset: Preset = Field(Preset["smoke"], description=f"The preset to run ({PRESET_HELP}).")  # type: ignore[valid-type]
    seeds: list[int] = Field(default_factory=list, description="World seeds (each a world made from the world "
                             "config and overrides); empty: the preset's seeds.")
    worlds: list[str] = Field(default_factory=list, description="Registered world ids to run instead of seeds "
                              "(`churnbench worlds list`; `churnbench worlds add` registers one).")
    world_config: str = Field("", description="A world config file (YAML) the seeded worlds start from; empty: the "
                              "default world config.")
    overrides: list[str] = Field(default_factory=list, description="`section.key=value` overrides of the world "
                                 "config, as `churnbench worlds add --set` takes them.")
    arms: list[Arm] = Field(default_factory=list, description="Arms; empty: the preset's.")  # type: ignore[valid-type]
    policies: list[str] = Field(default_factory=list, description="Refresh policies (tiered, off, ttl:CLASS=DAYS, "
                                "rate[:CHANGES], uniform:N, proportional:N, rate-matched:N, tier-shaped:N; TTLs and N "
                                ">= 0, CHANGES > 0); empty: the preset's. An arm with a fixed policy runs that one. "
                                "Checked when the run starts, before anything is registered.")
    t: str = Field("", description="T, the evaluation day (YYYY-MM-DD, inside every world's calendar); empty: the "
                   "preset's. Checked when the run starts, before anything is registered.")
    t_primes: list[str] = Field(default_factory=list, description="T' values (YYYY-MM-DD, inside the calendar, not "
                                "after T), the cache build days.")
    gaps: list[int] = Field(default_factory=list, description="Gaps T - T' in days (0 up to T minus the calendar's "
                            "first day; with t_primes: both; neither: the preset's).")
    agent: Optional[Agent] = Field(None, description="The agent (llm: the CHURNBENCH_LLM_* settings of "  # type: ignore[valid-type]  # noqa: UP045
                                   "the code location's environment); empty: the preset's.")
    saas_profile: Optional[SaasProfile] = Field(None, description="The SaaS API's plan (unlimited: no quota and "  # type: ignore[valid-type]  # noqa: UP045
                                                "no latency); empty: the preset's.")
    parallelism: int = Field(1, ge=1, le=8, description="Cells evaluated at once; above 1 on the cell engine's "
                             "workers (local ones started as services, and any worker of another host on its "
                             "broker: docs/deployment.md).")
    llm_budget_usd: float | None = Field(None, ge=0, description="With agent llm: stop starting cells once the "
                                         "reported spend plus a cell's estimate would pass this (US dollars).")
    llm_max_concurrent: int = Field(2, ge=1, le=8, description="With agent llm: cells (each one model call at a "
                                    "time) talking to the endpoint at once.")
    repeats: int = Field(1, ge=1, le=100, description="Answer every cell K times, each repeat its own results "
                         "folder (an LLM agent samples with each repeat's seed; the deterministic agent must "
                         "answer alike); the report adds mean accuracy with its interval, pass^K, pass@K and "
                         "stability.")
    retry_transport: bool = Field(False, description="Answer again the transport failures (rate limit, outage) of "
                                  "cells already finished, into a retry of the same experiment; other cells are "
                                  "reused as always.")
    exposure_only: bool = Field(False, description="Only the exposure-only cells (ttl-grid: every cell from the "
                                "ledgers, no world evaluated).")


def _value(choice: enum.Enum | None) -> str | None:
    return None if choice is None else str(choice.value)


def sweep_spec_of(config: SweepConfig) -> "SweepSpec":
    """The sweep a config asks for; a day that is not one is refused naming its field (the rest of the request is
    checked by `run_sweep` before anything is registered)."""
    from churn_assets.evaluation.requests import LAUNCHPAD_FIELDS, day_text

    args = PresetArgs(tuple(config.seeds), tuple(config.worlds), config.world_config or None, tuple(config.overrides))
    spec = preset_spec(str(_value(config.preset)), args)
    spec = customize(spec, arms=[str(_value(a)) for a in config.arms], policies=config.policies,
                     t=day_text(config.t, LAUNCHPAD_FIELDS.t) if config.t else None,
                     t_primes=[day_text(d, LAUNCHPAD_FIELDS.t_prime) for d in config.t_primes], gaps=config.gaps,
                     agent=_value(config.agent), saas_profile=_value(config.saas_profile), repeats=config.repeats)
    return exposure_only_spec(spec) if config.exposure_only else spec


class _Progress:
    """The sweep run's table of cells, as an observation of its `sweep_report` partition each time cells end
    (at most one per `EVERY_S`, and the last one always): the run's log shows it as it grows."""

    EVERY_S = 15.0

    def __init__(self, context: dg.OpExecutionContext) -> None:
        self.context, self.last = context, 0.0

    def __call__(self, record: "SweepRecord", *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < self.EVERY_S:
            return
        self.last = now
        self.context.log_event(dg.AssetObservation(asset_key="sweep_report", partition=record.sweep_id,
                                                   metadata=_cells_metadata(record)))


def _cells_metadata(record: "SweepRecord") -> dict:
    from churn_assets.orchestration.launches import SWEEP_RUNS

    counts = record.status_counts()
    columns = (*record.PROGRESS_COLUMNS, "error")
    return {"cells": table_metadata(record.progress_rows(), columns),
            **{f"cells_{k}": v for k, v in counts.items()},
            "runs_it_started": dg.MetadataValue.url(f"/runs/b/{SWEEP_RUNS}?tab=runs")}


def _launch(context: dg.OpExecutionContext, sweep_id: str) -> "Launch":
    """This run as a sweep's launch: its launcher (UI, schedule, CLI) and id, written on the run itself."""
    from churn_assets.orchestration.launches import Launch, launcher_of, tag_sweep_run

    launched_by = launcher_of(dict(context.run.tags))
    tag_sweep_run(context.instance, context.run_id, sweep_id, launched_by)
    if not has_process_tags(context.run.tags):  # launched from the UI: record which process runs it (dead_runs)
        context.instance.add_run_tags(context.run_id, process_tags())
    return Launch(launched_by, context.run_id)


@dg.op(description="Check the config (before anything is registered), register the sweep's worlds and scenarios, "
                   "compute its exposure-only cells, evaluate every other cell (inputs first; finished cells "
                   "reused), then materialize its `sweep_report`. The runs it starts are filed under the "
                   "`sweep-runs` backfill, each tagged with the sweep's id.")
def run_sweep_cells(context: dg.OpExecutionContext, config: SweepConfig, state: StateResource) -> str:
    from churn_assets.evaluation.requests import LAUNCHPAD_FIELDS, SWEEP_CLI_FIELDS
    from churn_assets.orchestration.launches import CLI, launcher_of
    from churn_assets.orchestration.requests import check_sweep_request
    from churn_assets.orchestration.sweeps import run_sweep

    paths = state.paths
    try:
        spec = sweep_spec_of(config)
        fields = SWEEP_CLI_FIELDS if launcher_of(dict(context.run.tags)) == CLI else LAUNCHPAD_FIELDS
        # Checked before the run is tagged with the sweep's id: a refused launch names no sweep that never existed.
        checked = check_sweep_request(paths, spec, fields)
        launch = _launch(context, spec.sweep_id)
        session = Session(paths, state.service_urls(), context.instance)
        progress = _Progress(context)
        record = run_sweep(session, asset_defs_for(str(paths.root)), spec, echo=_echo(context),
                           workers=config.parallelism, llm_budget_usd=config.llm_budget_usd,
                           llm_max_concurrent=config.llm_max_concurrent, retry_transport=config.retry_transport,
                           fields=fields, launch=launch, on_record=progress, checked=checked)
    except UserFacingError as e:
        raise step_failure(e) from None
    progress(record, final=True)
    counts = record.status_counts()
    context.add_output_metadata({"sweep_id": record.sweep_id, **_cells_metadata(record)})
    if counts["failed"] or counts["skipped"]:
        raise step_failure(f"sweep {record.sweep_id}: {counts['failed']} cell(s) failed, {counts['skipped']} skipped "
                           "at the LLM budget cap (the others and the report are done; see the run log and the report)")
    return record.sweep_id


@dg.job(name="sweep", description="A sweep: a preset grid of evaluation cells (worlds x arms x policies x T') and "
        "its report. Pick a preset in the Launchpad; every field is documented there. The run is the sweep's one "
        "entry in the Runs list; the runs it starts are in the `sweep-runs` backfill.",
        tags={"churnbench/kind": "sweep"})
def sweep_job() -> None:
    run_sweep_cells()


class ScenarioConfig(dg.Config):
    scenario: str = Field(description="A defined scenario's key (an `eval_run` partition).")


@dg.op(description="Build every missing input of a defined scenario (one in-process run per partition), then "
                   "materialize its `eval_run` partition.")
def build_scenario_inputs(context: dg.OpExecutionContext, config: ScenarioConfig, state: StateResource) -> str:
    from churn_assets.orchestration.scenario_runs import run_scenario

    paths = state.paths
    try:
        scenario = load_scenario(paths, config.scenario)
        llm = None
        if scenario.agent_id != DETERMINISTIC_AGENT:
            from churn_assets.arms.agents.llm_settings import LlmSettings

            llm = LlmSettings.from_env()
        session = Session(paths, state.service_urls(), context.instance)
        summary = run_scenario(session, asset_defs_for(str(paths.root)), scenario.world_id, scenario.arm,
                               scenario.t_prime, scenario.t, scenario.policy, scenario.saas_profile,
                               context.log.info, llm=llm)
    except UserFacingError as e:
        raise step_failure(e) from None
    context.log.info(f"{config.scenario}: {summary['inputs_built']} input(s) built, stale answers "
                     f"{summary['stale_answers']}, exposure {summary['exposure']}")
    return str(summary["results"])


@dg.job(name="build_scenario", description="A defined scenario's missing inputs, then its eval_run partition "
        "(what `churnbench run` does; the `scenario_inputs` sensor launches it for an eval_run launched from the UI "
        "with inputs missing).", tags={"churnbench/kind": "build_scenario"})
def build_scenario_job() -> None:
    build_scenario_inputs()


class RegressionConfig(dg.Config):
    parallelism: int = Field(1, ge=1, le=8, description="Cells evaluated at once (worker processes).")
    update_baseline: bool = Field(False, description="Rewrite the baseline from this run's figures and today's "
                                  "config hashes (thresholds kept), then gate against it.")


@dg.op(description="Run the `regression` sweep preset (finished cells reused), then materialize its "
                   "`regression_report`, whose blocking `regression_gate` check compares the figures and config "
                   "hashes with baselines/regression.json. Fails when the gate fails, naming what moved.")
def run_regression_gate(context: dg.OpExecutionContext, config: RegressionConfig, state: StateResource) -> str:
    from churn_assets.orchestration.regression import REGRESSION_PRESET, run_regression

    paths = state.paths
    try:
        spec = preset_spec(REGRESSION_PRESET)
        launch = _launch(context, spec.sweep_id)
        session = Session(paths, state.service_urls(), context.instance)
        outcome = run_regression(session, asset_defs_for(str(paths.root)), echo=_echo(context),
                                 workers=config.parallelism, update_baseline=config.update_baseline, spec=spec,
                                 launch=launch)
    except UserFacingError as e:
        raise step_failure(e) from None
    result = outcome.result
    context.add_output_metadata({"sweep_id": outcome.record.sweep_id, "gate_passed": result.passed,
                                 "figures_moved": len(result.moved), "hashes_changed": len(result.hash_changes),
                                 **_cells_metadata(outcome.record)})
    if not result.passed:
        # its lines kept apart (one per figure moved), with no stack like every other user-facing failure
        raise StepRefusal(result.summary() + "\n" + "\n".join(result.lines()))
    return outcome.record.sweep_id


@dg.job(name="regression", description="The nightly regression: the `regression` sweep preset (two 30-day worlds, "
        "grounding on and off and naive at T - 27, deterministic agent) and its gated `regression_report` against "
        "baselines/regression.json. The `nightly_regression` schedule launches it.",
        tags={"churnbench/kind": "regression"})
def regression_job() -> None:
    run_regression_gate()


JOBS: tuple[dg.JobDefinition, ...] = (sweep_job, build_scenario_job, regression_job)
