"""`churnbench ui`: start the services, then `dagster dev` on the workspace, on 127.0.0.1.

`dagster dev` runs in its own session and this command forwards Ctrl-C (SIGINT) and SIGTERM to its
whole process group, then makes sure nothing of it is left: the webserver, daemon and code server go
with it. The embedded services stay up for the next command (`churnbench services down` stops them).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import FrameType

import click

from churn_assets.commands.services import format_status
from churn_assets.services import free_port, start_services, urls_from
from churn_assets.state import STATE_DIR_ENV, StatePaths, require_current_format

DEFAULT_PORT = 3000
SHUTDOWN_GRACE_S = 12.0  # then SIGTERM, then SIGKILL: the whole stop stays well under 20 s


def workspace_file() -> Path | None:
    """workspace.yaml at the root of the (editable) clone, beside the package."""
    candidate = Path(__file__).resolve().parents[2] / "workspace.yaml"
    return candidate if candidate.is_file() else None


def dagster_dev_command(port: int) -> list[str]:
    workspace = workspace_file()
    target = ["-w", str(workspace)] if workspace else ["-m", "churn_assets.orchestration.definitions"]
    return [sys.executable, "-m", "dagster", "dev", *target, "-h", "127.0.0.1", "-p", str(port)]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the webserver binds (uvicorn sets it): a port a stopped UI left in TIME_WAIT is free to listen on again.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class _Stop(Exception):
    """Raised from the signal handler to leave the wait loop."""


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port of the Dagster UI (a free one is chosen if it is taken).")
def ui(port: int) -> None:
    """Open the Dagster UI on this state folder's instance (Ctrl-C stops it)."""
    paths = StatePaths.resolve()
    require_current_format(paths)  # the UI would show an older folder's partitions wrongly: migrate first
    from churn_assets.orchestration.materialize import open_instance  # imports Dagster: not at CLI start

    statuses = start_services(paths)
    for status in statuses:
        click.echo(format_status(status))
    # The instance's tables exist before `dagster dev` opens it: created under the lock that a command started
    # beside the UI on a new state folder also takes (`storage_schema_lock`).
    open_instance(paths, urls_from(statuses, paths)).dispose()
    _start_run_worker(paths)
    if not port_is_free(port):
        chosen = free_port()
        click.echo(f"port {port} is taken; using {chosen}")
        port = chosen
    env = {**os.environ, "DAGSTER_HOME": str(paths.dagster_home), STATE_DIR_ENV: str(paths.root)}

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise _Stop(signum)

    # Our own handlers, installed before the child starts: a process launched with SIGINT ignored (a
    # background job of a script) would otherwise pass SIG_IGN on to `dagster dev`, which then never
    # stops; handled signals are reset to their defaults in the child at exec.
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        child = subprocess.Popen(dagster_dev_command(port), env=env, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        click.echo(f"Dagster UI: http://127.0.0.1:{port}  (state folder {paths.root}; Ctrl-C stops it)",
                   err=True)
        try:
            code = child.wait()
        except _Stop:
            code = None
        _shutdown(child, service_processes(paths))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code not in (None, 0):
        raise SystemExit(code)


def _start_run_worker(paths: StatePaths) -> None:
    """The engine's run worker, started now (decision 333): it imports the code location while `dagster dev` starts,
    so the session's first launch finds it ready instead of waiting for that import. None with an external broker
    (`CHURNBENCH_BROKER_URL`): its run workers are started where they run."""
    from churn_assets.evaluation.results import code_version
    from churn_assets.services.engine import BROKER_URL_ENV, ensure_run_worker

    if not os.environ.get(BROKER_URL_ENV):
        click.echo(format_status(ensure_run_worker(paths, code_version())))


def service_processes(paths: StatePaths) -> set[int]:
    """The processes of the state folder's services and their children. The UI's runs start some (the engine's
    broker, its run worker and cell workers: decision 333) as children of Dagster's daemon; like the services every
    command starts, they outlive the UI (`services down` stops them)."""
    import psutil

    from churn_assets.services.process import read_record

    pids: set[int] = set()
    for record in sorted(paths.services_dir.glob("*.json")) if paths.services_dir.exists() else []:
        pid = (read_record(paths, record.stem) or {}).get("pid")
        if isinstance(pid, int):
            with contextlib.suppress(psutil.NoSuchProcess):
                pids |= {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
    return pids


def _shutdown(child: subprocess.Popen[bytes], services: set[int]) -> None:
    """SIGINT the process group (what a terminal's Ctrl-C does), escalate, and sweep leftovers (but `services`)."""
    import psutil

    try:
        family = [p for p in (psutil.Process(child.pid), *psutil.Process(child.pid).children(recursive=True))
                  if p.pid not in services]
    except psutil.NoSuchProcess:
        family = []
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not abandon the cleanup
    for sig, grace in ((signal.SIGINT, SHUTDOWN_GRACE_S), (signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)
        for proc in family:
            if sig == signal.SIGKILL:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
        _, alive = psutil.wait_procs(family, timeout=grace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=0.1)
        if not alive and child.poll() is not None:
            break
        family = alive
    click.echo("Dagster UI stopped", err=True)


