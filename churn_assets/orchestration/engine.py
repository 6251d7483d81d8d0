"""The cell engine (issue 47, decisions 329 and 330): the input builds and cells of `run_cells` with more than one
worker as celery tasks, executed by long-lived `churnbench worker` processes on this host or any host that reaches
the broker and the services.

    with EnginePool(session, workers=2) as pool:   # the interface of `cells.InProcessPool`
        pool.warm_up()                             # the broker and two local workers (services), answering
        future = pool.submit(fn, args)             # fn(*args) in a worker; a concurrent Future of its result

A job is a module-level function and its arguments, pickled by reference (the worker imports the function's
module): the same functions a one-worker run calls in its own process (`cells._worker_build`,
`cells._worker_cell`), so a cell is still one run of its `eval_run` partition, made in the worker that evaluates
it, and the runs, their events and the UI's Runs list are what they are with one worker. A worker process keeps its
session, definitions, gold resolver and embedding model from job to job (celery's prefork child, one job at a time:
`-c 1`, prefetch 1).

Faults: late acknowledgement, a job whose worker process died is sent again once (`reject_on_worker_lost`,
`retry_on_worker_lost` with one retry: the second loss fails the job with "its worker process died twice"); a cell
sent again resumes its results run (the run lock died with the killed process) and scores what the first attempt
had not. A broker that stops answering fails the jobs that wait on it in one line naming it; the same command
resumes. No worker answering for `NO_WORKER_S` fails the waiting jobs in one line.

Cancellation: a run that ends before its jobs do (the UI's Terminate sends the sweep's run SIGINT; Ctrl-C on the
command) revokes every job it sent, and the jobs already running are sent `CANCEL_SIGNAL` in their worker process
(celery's revoke with terminate). There the job marks its own Dagster runs canceling and is interrupted, so Dagster
ends the cell's run CANCELED, the results folder keeps its checkpoint (the next run resumes it) and its catalog row
is recorded failed; the worker process then exits and celery starts a fresh one.

Each job carries the code version of the run that sent it and its state folder (path and id); a worker of another
version, or one that does not see that state folder at that path (another host without the shared filesystem the
state folder's files need: decision 332), refuses it in one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from churn_assets.errors import UserFacingError, error_line
from churn_assets.orchestration.run_body import PROCESS_CANCELED
from churn_assets.services import redact
from churn_assets.services.engine import BROKER_URL_ENV, QUEUE, RUN_WORKER, broker_url, ensure_local_workers

if TYPE_CHECKING:
    from celery import Celery

    from churn_assets.orchestration.materialize import Session

TASK = "churnbench.job"
RUN_TASK = "churnbench.run"  # a Dagster run launched from the UI, a schedule or a sensor (run_launcher.py)
# Not SIGTERM: celery's prefork children die on it by default, and a worker process lost that way is a fault whose
# job runs again (`retry_on_worker_lost`); SIGUSR2 reaches only a job that is canceled, and celery leaves it alone.
CANCEL_SIGNAL = "SIGUSR2"
POLL_S = 0.2  # how often the waiting jobs' states are read (one GET each)
WORKERS_CHECK_S = 15.0  # how often the answering workers are counted (and dead local ones started again)
NO_WORKER_S = 120.0  # no worker answering this long: the waiting jobs fail
# ... unless local worker processes are alive: a worker imports the code location before it answers, about 10 s
# idle but minutes on a loaded machine (the same import took 145-170 s at load 10 in docs/ui.md's UI starts).
STARTING_S = 600.0
START_WAIT_S = 120.0  # how long a run on an external broker waits for a first worker to answer

# Celery's settings for the engine (decision 329). Pickle: jobs are this package's functions and dataclasses; the
# broker asks for a password, because whoever can send a task runs code in the workers.
SETTINGS: dict[str, Any] = {
    "task_serializer": "pickle", "result_serializer": "pickle", "accept_content": ["pickle"],
    "task_default_queue": QUEUE, "task_acks_late": True, "task_reject_on_worker_lost": True,
    "worker_prefetch_multiplier": 1, "task_track_started": True, "result_expires": 7 * 24 * 3600,
    "result_extended": True,  # each result names the worker that ran it (a cell's line says where it ran)
    "broker_connection_retry_on_startup": True, "worker_hijack_root_logger": False,
    "redis_backend_health_check_interval": 10,
    # a waiting run reads a dead broker's state in seconds, not after celery's default of 20 retries
    "result_backend_transport_options": {"retry_policy": {"max_retries": 2, "interval_start": 0.5,
                                                          "interval_step": 0.5, "interval_max": 1.0}},
    "broker_transport_options": {"max_retries": 2, "interval_start": 0.5, "interval_step": 0.5,
                                 "interval_max": 1.0},
}


_APPS: dict[str, Celery] = {}


def engine_app(url: str) -> Celery:
    """The celery app of the broker at `url` (one per URL and process), with the job task registered."""
    app = _APPS.get(url)
    if app is None:
        from celery import Celery

        app = Celery("churnbench", broker=url, backend=url, set_as_current=False)
        app.conf.update(SETTINGS)
        # A job whose worker process died is sent again once, at once (celery's retry waits 180 s by default).
        app.task(name=TASK, bind=True, acks_late=True, reject_on_worker_lost=True, retry_on_worker_lost=True,
                 max_retries=1, default_retry_delay=0)(_run_job)
        # A launched run (run_launcher.py) is not sent again: its Dagster run records what happened, and the
        # dead-run reaper fails it when its process died.
        app.task(name=RUN_TASK, bind=True, acks_late=False, reject_on_worker_lost=False)(_run_job)
        _APPS[url] = app
    return app


@dataclass(frozen=True)
class Refused:
    """A job a worker would not run (it runs another code version): the line the run reports."""

    line: str


_WORKER_VERSION: str | None = None  # set in a `churnbench worker` process: the code version it runs
_BEFORE_CANCEL: list[Callable[[], None]] = []


class JobCanceled(KeyboardInterrupt):
    """Raised in a worker's job whose run ended (`CANCEL_SIGNAL`): an interrupt, which Dagster records as the
    cancellation of a run marked canceling."""


def before_cancel(hook: Callable[[], None]) -> None:
    """Call `hook` in a worker process when its job is canceled, before the job is interrupted (the worker marks its
    started Dagster runs canceling there)."""
    _BEFORE_CANCEL.append(hook)


def _cancel(_signum: int, _frame: Any) -> None:
    PROCESS_CANCELED.set()  # this worker process's job was canceled: the process leaves when the job returns
    for hook in _BEFORE_CANCEL:
        with contextlib.suppress(Exception):
            hook()
    raise JobCanceled("canceled: the run that sent this job ended")


def serving(code_version: str) -> None:
    """Mark this process as an engine worker running `code_version` (`churnbench worker` calls it)."""
    global _WORKER_VERSION
    _WORKER_VERSION = code_version


def in_engine_worker() -> bool:
    return _WORKER_VERSION is not None


def _run_job(task: Any, fn: Callable[..., Any], args: tuple[Any, ...], code_version: str,
             state: tuple[str, str] | None = None) -> Any:
    """The task: `fn(*args)` in this worker, unless the run that sent it runs other code or on a state folder this
    worker does not see."""
    if _WORKER_VERSION is not None and code_version != _WORKER_VERSION:
        return Refused(f"worker {task.request.hostname} runs code {_WORKER_VERSION}, the run sending it "
                       f"{code_version}: start the worker from the run's code")
    if _WORKER_VERSION is not None and state is not None and (problem := _state_problem(*state)):
        return Refused(f"worker {task.request.hostname} {problem}: a worker on another host needs the run's state "
                       "folder on a shared filesystem at the same path, named by CHURNBENCH_STATE_DIR "
                       "(docs/deployment.md, \"Workers on other hosts\")")
    if _WORKER_VERSION is None:
        return fn(*args)
    cancel = getattr(signal, CANCEL_SIGNAL)
    previous = signal.signal(cancel, _cancel)
    try:
        return fn(*args)
    finally:
        signal.signal(cancel, previous)
        if PROCESS_CANCELED.is_set():
            # Unwound (the interrupt may reach here as another error: Dagster and the materializer wrap it): runs
            # recorded, locks released, the checkpoint kept. The process leaves: celery marks a job whose process it
            # signalled as terminated, and would take a later loss of this process for that termination.
            os._exit(0)


def _state_problem(root: str, state_id: str) -> str | None:
    """Why this worker's state folder is not the run's `root` with id `state_id` (None: it is)."""
    from churn_assets.state import StatePaths

    here = StatePaths.resolve()
    if str(here.root) != root:
        return f"works on the state folder {here.root}, the run on {root}"
    try:
        found = here.state_id
    except Exception:
        found = None
    if found != state_id:
        return (f"sees no state folder at {root}" if found is None else
                f"sees another state folder at {root} (id {found}, the run's {state_id})")
    return None


def answering_workers(url: str, timeout: float = 1.0) -> list[str]:
    """The names of the cell workers that answer a ping on the broker at `url` within `timeout`."""
    replies = engine_app(url).control.ping(timeout=timeout) or []
    return sorted(name for reply in replies for name in reply if not name.startswith(RUN_WORKER))  # runs' workers


class EnginePool:
    """`cells.InProcessPool`'s interface on celery: `workers` jobs at a time (the local workers started, or more when
    more answer: workers on other hosts join), each job's result in a `Future` completed by one poller thread."""

    def __init__(self, session: Session, workers: int, say: Callable[[str], None] | None = None) -> None:
        from churn_assets.evaluation.results import code_version

        # An external broker (CHURNBENCH_BROKER_URL) is a cluster's: its workers are started where they run
        # (`churnbench worker`), none here; the embedded one gets `workers` local workers.
        self.session = session
        self.say = say or (lambda _line: None)
        self.local = 0 if os.environ.get(BROKER_URL_ENV) else workers
        self.workers = workers
        self.definitions: Any = None  # `InProcessPool`'s attribute; a job takes the worker's own
        self.code_version = code_version()
        self.state = (str(session.paths.root), session.paths.state_id)
        self.url = broker_url(session.paths)
        self.app = engine_app(self.url)
        self._waiting: dict[Any, Future[Any]] = {}  # AsyncResult -> its future
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._answered = time.monotonic()
        self._counted = 0.0

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
        with self._lock:  # the run that wanted them is over: jobs still queued are revoked, running ones canceled
            running = 0
            for result, future in self._waiting.items():
                with contextlib.suppress(Exception):
                    running += result.state == "STARTED"
                with contextlib.suppress(Exception):
                    result.revoke(terminate=True, signal=CANCEL_SIGNAL)
                if not future.done():
                    future.set_exception(UserFacingError("the run ended before this job"))
            if self._waiting:
                self.say(f"cells: the run ended before its jobs: {running} running canceled in their workers, "
                         f"{len(self._waiting) - running} queued revoked")
            self._waiting.clear()

    def warm_up(self) -> None:
        """The broker and `workers` local workers of this run's code version, started without waiting for them: the
        jobs sent meanwhile wait on the broker while a worker imports the code location (about 10 s idle) and this
        process plans. With an external broker (no local worker), wait until a worker answers (how many answer is
        how many jobs go at once)."""
        if self.local > 0:
            ensure_local_workers(self.session.paths, self.local, self.code_version)
            self._answered = self._counted = time.monotonic()
            return
        deadline = time.monotonic() + START_WAIT_S
        seen: list[str] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                seen = answering_workers(self.url)
                if seen:
                    break
            time.sleep(0.5)
        if not seen:
            raise UserFacingError(f"no cell engine worker answers on {self.where()} after {START_WAIT_S:.0f} s: "
                                  "start one on a host that reaches it (`churnbench worker`, docs/deployment.md)")
        self.workers = len(seen)
        self._answered = self._counted = time.monotonic()

    def where(self) -> str:
        return f"the broker {redact(self.url)}" + (f" ({BROKER_URL_ENV})" if os.environ.get(BROKER_URL_ENV) else "")

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            result = self.app.send_task(TASK, args=(fn, args, self.code_version, self.state), queue=QUEUE)
        except Exception as e:
            future.set_exception(UserFacingError(f"{self.where()} did not take the job: {error_line(e)}; the same "
                                                 "command resumes"))
            return future
        with self._lock:
            self._waiting[result] = future
            if self._poller is None:
                self._poller = threading.Thread(target=self._poll, name="churnbench-engine-poller", daemon=True)
                self._poller.start()
        return future

    def _poll(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                waiting = list(self._waiting.items())
            for result, future in waiting:
                outcome = self._outcome(result)
                if outcome is None:
                    continue
                with self._lock:
                    self._waiting.pop(result, None)
                with contextlib.suppress(Exception):
                    result.forget()  # read once: the broker keeps no result for a week in memory
                ok, value = outcome
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
            if waiting and time.monotonic() - self._counted >= WORKERS_CHECK_S:
                self._check_workers()
            self._stop.wait(POLL_S)

    def _outcome(self, result: Any) -> tuple[bool, Any] | None:
        """(True, value) or (False, exception) once the job has ended; None while it waits or runs."""
        try:
            if not result.ready():
                return None
            value = result.get(propagate=False, disable_sync_subtasks=False)
        except Exception as e:
            return False, UserFacingError(f"{self.where()} stopped answering: {error_line(e)}; `churnbench services "
                                          "up` starts an embedded one again and the same command resumes")
        if result.failed():
            if type(value).__name__ == "WorkerLostError":
                return False, UserFacingError(f"its worker process died twice ({error_line(value)})")
            return False, value if isinstance(value, BaseException) else UserFacingError(error_line(value))
        if isinstance(value, Refused):
            return False, UserFacingError(value.line)
        worker = getattr(result, "worker", None)
        if worker and is_dataclass(value) and any(f.name == "worker" for f in fields(value)):
            value = replace(cast(Any, value), worker=str(worker))
        return True, value

    def _check_workers(self) -> None:
        """Count the answering workers (workers joining from other hosts raise `workers`); start dead local ones
        again; with none answering for `NO_WORKER_S` (`STARTING_S` while local worker processes are alive), fail
        every waiting job."""
        self._counted = time.monotonic()
        alive = 0
        try:
            if self.local > 0:
                alive = sum(s.state == "running" for s in
                            ensure_local_workers(self.session.paths, self.local, self.code_version))
            seen = answering_workers(self.url)
        except Exception:
            seen = []
        if seen:
            self._answered = time.monotonic()
            self.workers = max(self.local, len(seen))
            return
        if time.monotonic() - self._answered < (STARTING_S if alive else NO_WORKER_S):
            return
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for result, future in waiting.items():
            with contextlib.suppress(Exception):
                result.revoke()
            future.set_exception(UserFacingError(f"no cell engine worker has answered on {self.where()} for "
                                                 f"{NO_WORKER_S:.0f} s (`churnbench services status` shows the local "
                                                 "workers and their logs); the same command resumes"))
