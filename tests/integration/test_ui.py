"""`churnbench ui`: answers on its port, shows the CLI's partitions through GraphQL (same instance),
and stops on SIGINT within 20 s leaving no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from churn_assets.commands.ui import service_processes
from churn_assets.services import free_port
from churn_assets.services.engine import EngineWorkerService
from churn_assets.state import StatePaths

pytestmark = pytest.mark.integration

STARTUP_TIMEOUT_S = 300  # `dagster dev` answers in ~7-16 s idle; 86 s and over 120 s measured at load 12
STOP_LIMIT_S = 20


def graphql(port: int, query: str) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def wait_until_answering(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"churnbench ui exited early:\n{log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"the UI did not answer within {STARTUP_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def wait_for_asset_nodes(port: int, proc: subprocess.Popen[bytes], log: Path) -> dict[tuple[str, ...], Any]:
    """The webserver answers before its code location has loaded the definitions: poll until it has."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    nodes: dict[tuple[str, ...], Any] = {}
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"churnbench ui exited early:\n{log.read_text()[-3000:]}"
        entries = graphql(port, "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }")
        loaded = [e["loadStatus"] == "LOADED"
                  for e in entries["data"]["workspaceOrError"]["locationEntries"]]  # type: ignore[index]
        data = graphql(port, "{ assetNodes { assetKey { path } partitionKeys } }")
        nodes = {tuple(n["assetKey"]["path"]): n for n in data["data"]["assetNodes"]}  # type: ignore[index]
        if nodes and loaded and all(loaded):  # every code location of workspace.yaml, not just the first
            return nodes
        time.sleep(1)
    status = graphql(port, "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus "
                           "locationOrLoadError { __typename ... on PythonError { message } } } } } }")
    raise AssertionError(f"no assets after {STARTUP_TIMEOUT_S} s; workspace: {status}\n{log.read_text()[-3000:]}")


def test_ui_serves_the_shared_instance_and_stops_on_sigint(
        small_world: str, state_dir: Path, tmp_path: Path, churnbench_exe: str,
        cli_env: Callable[..., dict[str, str]]) -> None:
    port = free_port()
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([churnbench_exe, "ui", "--port", str(port)], env=cli_env(state_dir),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    family: list[psutil.Process] = []
    try:
        wait_until_answering(port, proc, log)
        nodes = wait_for_asset_nodes(port, proc, log)
        assert ("ledger",) in nodes
        # The world registered and materialized from the CLI is a partition in the UI too.
        assert small_world in nodes[("ledger",)]["partitionKeys"]

        # The run worker `churnbench ui` starts (decision 333) is a service: it outlives the UI, as Postgres does.
        paths = StatePaths.resolve(state_dir)
        run_worker = EngineWorkerService(None).status(paths)
        assert run_worker.state == "running", run_worker
        services = service_processes(paths)
        family = [p for p in (psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True))
                  if p.pid not in services]
        assert len(family) >= 3  # churnbench, dagster dev, webserver/daemon/code server
        os.kill(proc.pid, signal.SIGINT)
        started = time.monotonic()
        proc.wait(timeout=STOP_LIMIT_S + 5)
        elapsed = time.monotonic() - started
        assert elapsed < STOP_LIMIT_S, f"stopped after {elapsed:.1f}s"
        _, alive = psutil.wait_procs(family, timeout=2)
        assert not alive, f"left behind: {[p.info if hasattr(p, 'info') else p.pid for p in alive]}"
        after = EngineWorkerService(None).status(paths)
        assert after.state == "running" and after.pid == run_worker.pid, after
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in family:
            if p.is_running():
                p.kill()
