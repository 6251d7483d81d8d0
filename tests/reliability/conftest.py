"""Fixtures of the reliability suite: `cli`, the real `churnbench` in a subprocess on the session's state folder,
with an optional `CHURNBENCH_FAULT` (churn_assets/faults.py) and a 20-task deployment (docs/rules.md, "Test budget");
and the window the suite evaluates on the session's `small_world`, whose day partitions at T no other test
builds (so a kill during input materialization finds them missing, while the world's warehouse and dbt build
are shared with the rest of the session)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from few_tasks import use_task_count

from churn_assets.deployment import DEPLOYMENT_ENV
from churn_assets.faults import FAULT_ENV

REPO = Path(__file__).resolve().parents[2]
TASKS = 20
# T' early, T late in the 30-day world (most classes change in between); no other test evaluates at this T.
T_PRIME, T = "2024-01-05", "2024-01-26"
Cli = Callable[..., subprocess.CompletedProcess[str]]


def scenario_key(world: str, arm: str = "naive") -> str:
    return f"{arm}__tiered__tp{T_PRIME.replace('-', '')}__t{T.replace('-', '')}__det__default__{world}"


@pytest.fixture(scope="session")
def cli_environ(state_dir: Path, cli_env: Callable[..., dict[str, str]],
                tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    deployment = tmp_path_factory.mktemp("deployment") / "deployment.yaml"
    deployment.write_text(f'calendar:\n  start: "2024-01-01"\n  days: 180\ntasks:\n  count: {TASKS}\n  seed: 0\n')
    env = cli_env(state_dir, **{DEPLOYMENT_ENV: str(deployment)})
    env.pop(FAULT_ENV, None)
    # This checkout's code, also when the venv's editable install points at another one.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="session")
def cli(churnbench_exe: str, cli_environ: dict[str, str]) -> Cli:
    """`cli(*args, fault=None, timeout=300, **env)`: run churnbench, return the finished process (with its `pid`)."""
    def run(*args: str, fault: str | None = None, timeout: float = 300, **extra: str
            ) -> subprocess.CompletedProcess[str]:
        env = {**cli_environ, **extra, **({FAULT_ENV: fault} if fault else {})}
        with subprocess.Popen([churnbench_exe, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as proc:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        done.pid = proc.pid  # type: ignore[attr-defined]  # the run tags and owner files name it
        return done
    return run


def run_args(world: str, arm: str = "naive") -> list[str]:
    return ["run", "--world", world, "--arm", arm, "--t-prime", T_PRIME, "--t", T]


@pytest.fixture
def cli_task_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process asks for the CLI's `TASKS`: an in-process run of the suite's window reads the task sets its CLI
    runs drew, and a set records the count it was drawn with (decision 306), so a process asking for another
    count would draw the day again instead of resuming the CLI's run."""
    use_task_count(monkeypatch, TASKS)
