"""The run launcher of a state folder's Dagster instance (`services/dagster_home.py` names it): runs launched from
the UI, a sensor or the schedule start in a process forked from a fork server that imported the code location
once, instead of a fresh interpreter that imports it again (decision 271).

Dagster's default launcher asks the code server to start the run, and the code server starts it with the `spawn`
method (fixed in Dagster 1.13): each run imports the code location again before its first step, 6 s of CPU
here (dagster-dbt and dbt-core half of it), 55-68 s of wall time from RUN_STARTING to STEP_START at load 13-19.
This launcher keeps, per launching process (the webserver, the daemon), a `multiprocessing` fork server whose
preloaded module is the code location; each run is forked from it and executed by Dagster's own run worker body
(`dagster._cli.api._execute_run_command_body`, what `dagster api execute_run` runs), so the run's events, status,
logs and cancellation are Dagster's. The fork server is a fresh interpreter (it holds no connection or thread of
the launching process; decision 198 forks cell workers the same way), started at the first launch.

When a source file of the package changes (the UI's "Reload" after an edit), the next launch stops the fork server
and starts a new one, so a run never executes code older than its launch. A run of another code location (the
example one) is forked the same way and imports its own module in its process.

Termination: the run is marked canceling and its process gets SIGINT, which Dagster's run worker turns into a
canceled run. The dead-run reaper (`dead_runs.py`) still records a run whose process died without a word: this
launcher does not report worker health to Dagster's run monitoring.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

from dagster._cli.api import _execute_run_command_body
from dagster._core.instance import DagsterInstance
from dagster._core.instance.ref import InstanceRef
from dagster._core.launcher.base import LaunchRunContext, RunLauncher
from dagster._serdes import ConfigurableClass, deserialize_value, serialize_value
from dagster._serdes.config_class import ConfigurableClassData
from dagster._utils.interrupts import capture_interrupts

from churn_assets.orchestration.code_location import CODE_LOCATION_MODULE

# Hidden (Dagster's `.dagster/` prefix: not in the Runs list, decision 323); a run launched by an older version
# carries the visible `LEGACY_PID_TAG`, read by `terminate`.
PID_TAG = ".dagster/churnbench/run_worker_pid"
LEGACY_PID_TAG = "churnbench/run_worker_pid"
_PACKAGE = Path(__file__).resolve().parents[1]
_LOCK = threading.Lock()
_SERVED: tuple[float, int] | None = None  # the source fingerprint the running fork server was started with


def source_fingerprint(root: Path = _PACKAGE) -> tuple[float, int]:
    """(newest modification time, number) of the package's Python files and its YAML configs."""
    newest, count = 0.0, 0
    for pattern in ("*.py", "*.yaml"):
        for path in root.rglob(pattern):
            try:
                newest = max(newest, path.stat().st_mtime)
            except FileNotFoundError:
                continue
            count += 1
    return newest, count


def _context() -> Any:
    """The forkserver context, its server (re)started when the sources changed since it started."""
    global _SERVED

    fingerprint = source_fingerprint()
    with _LOCK:
        server = getattr(forkserver, "_forkserver", None)
        if _SERVED is not None and fingerprint != _SERVED:
            stop = getattr(server, "_stop", None)
            if callable(stop):  # CPython's own tests call it (3.8 to 3.13); the next start imports the new code
                stop()
        _SERVED = fingerprint
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([CODE_LOCATION_MODULE])
        return context


def _run_worker(instance_ref_json: str, run_id: str) -> None:
    """The forked run process: Dagster's run worker body on the launcher's instance."""
    with capture_interrupts(), DagsterInstance.from_ref(deserialize_value(instance_ref_json, InstanceRef)) as instance:
        _execute_run_command_body(run_id, instance, lambda _event: None, set_exit_code_on_failure=False)


class PreloadedRunLauncher(RunLauncher, ConfigurableClass):
    """Runs forked from a fork server that imported the code location once (see the module doc)."""

    def __init__(self, inst_data: ConfigurableClassData | None = None) -> None:
        self._inst_data = inst_data
        self._processes: dict[str, Any] = {}
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Any) -> PreloadedRunLauncher:
        return cls(inst_data=inst_data)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        process = _context().Process(target=_run_worker, args=(serialize_value(self._instance.get_ref()), run.run_id),
                                     name=f"dagster-run-{run.run_id[:8]}", daemon=False)
        process.start()
        self._processes[run.run_id] = process
        self._instance.add_run_tags(run.run_id, {PID_TAG: str(process.pid)})
        self._instance.report_engine_event(
            f"Started process for run (pid: {process.pid}), forked from the code location's fork server.", run,
            cls=self.__class__)

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        pid = run.tags.get(PID_TAG, run.tags.get(LEGACY_PID_TAG))
        if pid is None:
            return False
        self._instance.report_run_canceling(run)
        try:
            os.kill(int(pid), signal.SIGINT)
        except (ProcessLookupError, ValueError):
            return False
        return True

    def dispose(self) -> None:
        self._processes.clear()  # the runs go on: their fork server reaps them
