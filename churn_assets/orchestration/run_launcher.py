"""The run launcher of a state folder's Dagster instance (`services/dagster_home.py` names it): runs launched from
the UI, a sensor or the schedule are executed by the cell engine's run worker (decision 333), a long-lived
`churnbench worker --runs` process on this host (a service: started by `churnbench ui`, and by a launch that finds
none of its code version) or any host that reaches the broker (a cluster's `CHURNBENCH_BROKER_URL`), instead of a
fresh interpreter per run.

Dagster's default launcher asks the code server to start the run, and the code server starts it with the `spawn`
method: each run imports the code location again before its first step, 6 s of CPU here (dagster-dbt and dbt-core
half of it), 55-68 s of wall time from RUN_STARTING to STEP_START at load 13-19 (decision 271). The run worker
imported the code location once, before it forked the processes that run runs (celery's prefork pool, `RUN_SLOTS`
at once); each run there is executed by Dagster's own run worker body (`_execute_run_command_body`, what
`dagster api execute_run` and dagster-celery's `execute_job` task run), so its events, status and logs are
Dagster's, and a later run in the same process finds the caches of the earlier ones warm.

A run goes to the queue of the code version it was launched on (`services.engine.runs_queue`): after an edit (the
UI's "Reload"), the next launch starts a run worker of the new version and tells the old one to stop once its runs
end, so a run never executes code older than its launch.

Termination: a started run is marked canceling and its job is revoked with `engine.CANCEL_SIGNAL`, which the job
turns into an interrupt: Dagster ends the run CANCELED, and a sweep run cancels its own cells on the way out
(`engine.EnginePool`). A run still queued is revoked and recorded canceled. A job the worker refuses (another state
folder) or that fails before Dagster's body starts the run fails the run with that line (one thread of the launcher
reads the launched jobs' outcomes). A run whose worker process died is recorded failed by the dead-run reaper (the
run carries its process's stamp, `dead_runs.process_tags`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.launcher.base import LaunchRunContext, RunLauncher
from dagster._serdes import ConfigurableClass
from dagster._serdes.config_class import ConfigurableClassData

from churn_assets.errors import error_line
from churn_assets.orchestration.dead_runs import UNSTAMPED, process_tags
from churn_assets.orchestration.run_body import execute_run_body

# Hidden (Dagster's `.dagster/` prefix: not in the Runs list, decision 323): the engine job that executes the run.
TASK_TAG = ".dagster/churnbench/engine_task"
WATCH_S = 1.0  # how often the launched jobs' outcomes are read


def execute_launched_run(run_id: str) -> None:
    """The job: the launched run `run_id`, executed in this run worker process by Dagster's run worker body, on the
    process's session (opened at its first run, kept for the next ones)."""
    from churn_assets.orchestration.cells import worker_session

    session, _definitions = worker_session()
    session.instance.add_run_tags(run_id, process_tags())
    execute_run_body(session.instance, run_id)


class EngineRunLauncher(RunLauncher, ConfigurableClass):
    """Runs executed by the engine's run worker (see the module doc)."""

    def __init__(self, inst_data: ConfigurableClassData | None = None) -> None:
        self._inst_data = inst_data
        self._launched: dict[str, Any] = {}  # run id -> its job's AsyncResult, until the job ends
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Any) -> EngineRunLauncher:
        return cls(inst_data=inst_data)

    def _paths(self) -> Any:
        from churn_assets.state import StatePaths

        # The instance's home is `<state>/dagster` (services/dagster_home.py).
        return StatePaths.resolve(str(Path(self._instance.root_directory).parent))

    def launch_run(self, context: LaunchRunContext) -> None:
        from churn_assets.evaluation.results import code_version
        from churn_assets.orchestration.engine import RUN_TASK, engine_app
        from churn_assets.services.engine import BROKER_URL_ENV, broker_url, ensure_run_worker, runs_queue

        run = context.dagster_run
        # Tagged before it is sent: Dagster rewrites a run's tags whole, so a tag added here after the worker added
        # its process stamp would drop the stamp. A stamp the run inherited (a re-execution) is blanked first, before
        # a run worker is started: the run is STARTING already, and the reaper would take the stamp for its own.
        job_id = str(uuid.uuid4())
        self._instance.add_run_tags(run.run_id, {TASK_TAG: job_id, **UNSTAMPED})
        paths = self._paths()
        version = code_version()
        if not os.environ.get(BROKER_URL_ENV):  # a cluster's broker: its run workers are started where they run
            ensure_run_worker(paths, version)
        result = engine_app(broker_url(paths)).send_task(
            RUN_TASK, args=(execute_launched_run, (run.run_id,), version, (str(paths.root), paths.state_id)),
            queue=runs_queue(version), task_id=job_id)
        self._instance.report_engine_event(
            f"Sent to the engine's run worker (queue {runs_queue(version)}, job {result.id}).", run,
            cls=self.__class__)
        with self._lock:
            self._launched[run.run_id] = result
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="churnbench-run-watcher", daemon=True)
                self._watcher.start()

    def _watch(self) -> None:
        """Fail a run with its job's line when the job ended without Dagster's body finishing the run (refused by
        the worker, or failed before the run started). One thread polls every launched job (celery's Redis result
        backend is not for waiting from many threads at once)."""
        while True:
            time.sleep(WATCH_S)
            with self._lock:
                launched = list(self._launched.items())
            for run_id, result in launched:
                try:
                    if not result.ready():
                        continue
                    value = result.get(propagate=False, disable_sync_subtasks=False)
                except Exception:
                    continue  # the broker is away: asked again next time (the reaper covers a dead worker)
                with self._lock:
                    self._launched.pop(run_id, None)
                with contextlib.suppress(Exception):
                    result.forget()
                    self._fail_unfinished(run_id, value)

    def _fail_unfinished(self, run_id: str, value: Any) -> None:
        from churn_assets.orchestration.engine import Refused

        run = self._instance.get_run_by_id(run_id)
        # A run Dagster's body started records its own end (a revoked one its cancellation; one whose process died
        # is the reaper's): only a run the job never started is this watcher's.
        if run is None or run.status not in (dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING) \
                or not isinstance(value, Refused | BaseException):
            return
        line = value.line if isinstance(value, Refused) else error_line(value)
        self._instance.report_run_failed(run, message=f"The engine did not run it: {line}")

    def terminate(self, run_id: str) -> bool:
        from churn_assets.orchestration.engine import CANCEL_SIGNAL, engine_app
        from churn_assets.services.engine import broker_url

        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished or TASK_TAG not in run.tags:
            return False
        started = run.status == dg.DagsterRunStatus.STARTED
        if started:
            self._instance.report_run_canceling(run)
        try:
            engine_app(broker_url(self._paths())).AsyncResult(run.tags[TASK_TAG]).revoke(
                terminate=True, signal=CANCEL_SIGNAL)
        except Exception as e:
            self._instance.report_engine_event(f"Could not reach the engine to cancel the run: {error_line(e)}", run,
                                               cls=self.__class__)
            return False
        if not started:  # revoked before its process took it: nothing will record the end but this
            self._instance.report_run_canceled(run)
        return True
