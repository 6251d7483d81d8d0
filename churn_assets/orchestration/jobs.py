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
import dagster as dg
from pydantic import Field

from churn_assets.orchestration.assets.common import step_failure
from churn_assets.orchestration.resources import StateResource
from churn_assets.sweeps.presets import PRESETS
from churn_assets.sweeps.spec import SweepSpec

PRESET_HELP = "; ".join(f"{p.name}: {p.summary}" for p in PRESETS.values())


class SweepConfig(dg.Config):
    """A sweep's Launchpad config: a preset and what to change in it. Empty fields take the preset's values."""

    preset: str = Field("smoke", description=f"The preset to run ({PRESET_HELP}).")
    seeds: list[int] = Field(default_factory=list, description="World seeds (each a world made from the world "
                             "config and overrides); empty: the preset's seeds.")
    worlds: list[str] = Field(default_factory=list, description="Registered world ids to run instead of seeds.")
    world_config: str = Field("", description="A world config file (YAML) the seeded worlds start from; empty: the "
                              "default world config.")
    overrides: list[str] = Field(default_factory=list, description="`section.key=value` overrides of the world "
                                 "config, as `churnbench worlds add --set` takes them.")
    arms: list[str] = Field(default_factory=list, description="Arms (`churnbench run --help` lists them); empty: "
                            "the preset's.")
    policies: list[str] = Field(default_factory=list, description="Refresh policies (tiered, off, ttl:CLASS=DAYS, "
                                "rate[:CHANGES], uniform:N, proportional:N, rate-matched:N, tier-shaped:N); empty: "
                                "the preset's. An arm with a fixed policy runs that one.")
    t: str = Field("", description="T, the evaluation day (YYYY-MM-DD); empty: the preset's.")
    t_primes: list[str] = Field(default_factory=list, description="T' values (YYYY-MM-DD), the cache build days.")
    gaps: list[int] = Field(default_factory=list, description="Gaps T - T' in days (with t_primes: both; neither: "
                            "the preset's).")
    agent: str = Field("", description="deterministic or llm (the CHURNBENCH_LLM_* settings of the code "
                       "location's environment); empty: the preset's.")
    saas_profile: str = Field("", description="The SaaS API's plan (default, reference, or unlimited: no quota "
                              "and no latency); empty: the preset's.")
    parallelism: int = Field(1, ge=1, le=8, description="Cells evaluated at once (worker processes).")
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


def sweep_spec_of(config: SweepConfig) -> "SweepSpec":
    import datetime as dt

    from churn_assets.sweeps.presets import PresetArgs, customize, preset_spec
    from churn_assets.sweeps.spec import SweepError

    def day(text: str, what: str) -> dt.date:
        try:
            return dt.date.fromisoformat(text)
        except ValueError:
            raise SweepError(f"sweep config {what}: {text!r} is not a day YYYY-MM-DD") from None

    args = PresetArgs(tuple(config.seeds), tuple(config.worlds), config.world_config or None, tuple(config.overrides))
    spec = preset_spec(config.preset, args)
    return customize(spec, arms=config.arms, policies=config.policies, t=day(config.t, "t") if config.t else None,
                     t_primes=[day(d, "t_primes") for d in config.t_primes], gaps=config.gaps,
                     agent=config.agent or None, saas_profile=config.saas_profile or None,
                     repeats=config.repeats)


@dg.op(description="Register the sweep's worlds and scenarios, compute its exposure-only cells, evaluate every "
                   "other cell (inputs first; finished cells reused), then materialize its `sweep_report`.")
def run_sweep_cells(context: dg.OpExecutionContext, config: SweepConfig, state: StateResource) -> str:
    from churn_assets.errors import UserFacingError
    from churn_assets.orchestration.asset_graph import asset_defs_for
    from churn_assets.orchestration.materialize import Session
    from churn_assets.orchestration.sweeps import run_sweep

    paths = state.paths
    try:
        spec = sweep_spec_of(config)
        session = Session(paths, state.service_urls(), context.instance)
        record = run_sweep(session, asset_defs_for(str(paths.root)), spec, echo=context.log.info,
                           workers=config.parallelism, llm_budget_usd=config.llm_budget_usd,
                           llm_max_concurrent=config.llm_max_concurrent, retry_transport=config.retry_transport)
    except UserFacingError as e:
        raise step_failure(e) from None
    counts = record.status_counts()
    context.add_output_metadata({"sweep_id": record.sweep_id, "cells_done": counts["done"],
                                 "cells_failed": counts["failed"]})
    if counts["failed"] or counts["skipped"]:
        raise dg.Failure(description=f"sweep {record.sweep_id}: {counts['failed']} cell(s) failed, "
                                     f"{counts['skipped']} skipped at the LLM budget cap (the others and the report "
                                     "are done; see the run log and the report)", allow_retries=False)
    return record.sweep_id


@dg.job(name="sweep", description="A sweep: a preset grid of evaluation cells (worlds x arms x policies x T') and "
        "its report. Pick a preset in the Launchpad; every field is documented there.",
        tags={"churnbench/kind": "sweep"})
def sweep_job() -> None:
    run_sweep_cells()


class ScenarioConfig(dg.Config):
    scenario: str = Field(description="A defined scenario's key (an `eval_run` partition).")


@dg.op(description="Build every missing input of a defined scenario (one in-process run per partition), then "
                   "materialize its `eval_run` partition.")
def build_scenario_inputs(context: dg.OpExecutionContext, config: ScenarioConfig, state: StateResource) -> str:
    from churn_assets.errors import UserFacingError
    from churn_assets.freshness.scenario import DETERMINISTIC_AGENT
    from churn_assets.orchestration.asset_graph import asset_defs_for
    from churn_assets.orchestration.materialize import Session
    from churn_assets.orchestration.scenario_runs import run_scenario
    from churn_assets.orchestration.scenarios import load_scenario

    paths = state.paths
    try:
        scenario = load_scenario(paths, config.scenario)
        llm = None
        if scenario.agent_id != DETERMINISTIC_AGENT:
            from churn_assets.arms.agents.llm import LlmSettings

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


@dg.op(description="Run the `regression` sweep preset (finished cells reused), then materialize its "
                   "`regression_report`, whose blocking `regression_gate` check compares the figures and config "
                   "hashes with baselines/regression.json. Fails when the gate fails, naming what moved.")
def run_regression_gate(context: dg.OpExecutionContext, config: RegressionConfig, state: StateResource) -> str:
    from churn_assets.errors import UserFacingError
    from churn_assets.orchestration.asset_graph import asset_defs_for
    from churn_assets.orchestration.materialize import Session
    from churn_assets.orchestration.regression import run_regression

    paths = state.paths
    try:
        session = Session(paths, state.service_urls(), context.instance)
        outcome = run_regression(session, asset_defs_for(str(paths.root)), echo=context.log.info,
                                 workers=config.parallelism)
    except UserFacingError as e:
        raise step_failure(e) from None
    result = outcome.result
    context.add_output_metadata({"sweep_id": outcome.record.sweep_id, "gate_passed": result.passed,
                                 "figures_moved": len(result.moved), "hashes_changed": len(result.hash_changes)})
    if not result.passed:
        raise dg.Failure(description=result.summary() + "\n" + "\n".join(result.lines()), allow_retries=False)
    return outcome.record.sweep_id


@dg.job(name="regression", description="The nightly regression: the `regression` sweep preset (two 30-day worlds, "
        "grounding on and off and naive at T - 27, deterministic agent) and its gated `regression_report` against "
        "baselines/regression.json. The `nightly_regression` schedule launches it.",
        tags={"churnbench/kind": "regression"})
def regression_job() -> None:
    run_regression_gate()


JOBS: tuple[dg.JobDefinition, ...] = (sweep_job, build_scenario_job, regression_job)
