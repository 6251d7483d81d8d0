"""Process supervision: service records in the state folder, one starter or stopper at a time, processes
found again by pid and start time (a reused pid is a stranger), terminated politely then firmly, and
`ProcessService`, a service that is one child process on a free port of the service address
(CHURNBENCH_SERVICE_HOST, default 127.0.0.1)."""

from __future__ import annotations

import abc
import contextlib
import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from churn_assets.files import LockTimeoutError, file_lock
from churn_assets.services.base import (
    LOCK_TIMEOUT_S,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    Service,
    ServiceError,
    ServiceStatus,
    host_family,
    one_line,
    service_host,
)
from churn_assets.state import StatePaths, atomic_write_text
from churn_assets.unique_keys import load_json

# Children this process spawned, kept so that they can be reaped (no zombies in long-lived processes).
SPAWNED: dict[int, subprocess.Popen[bytes]] = {}


def live_process(pid: int | None, create_time: float | None = None) -> Any | None:
    """The live process `pid` (psutil), or None when gone, a zombie, or a different process now."""
    import psutil

    if not pid:
        return None
    child = SPAWNED.get(pid)
    if child is not None and child.poll() is not None:
        SPAWNED.pop(pid, None)
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        # A pid can be reused after a reboot: the start time tells our process from a stranger.
        if create_time is not None and abs(proc.create_time() - create_time) > 1.0:
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def terminate(pid: int, create_time: float | None, timeout: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM, then SIGKILL after `timeout`; True when the process is gone."""
    proc = live_process(pid, create_time)
    if proc is None:
        return True
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    if wait_gone(pid, create_time, timeout):
        return True
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    return wait_gone(pid, create_time, 5.0)


def wait_gone(pid: int, create_time: float | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if live_process(pid, create_time) is None:
            return True
        time.sleep(0.05)
    return live_process(pid, create_time) is None


def free_port(host: str | None = None) -> int:
    """A port of `host` (default: the service address) that is free right now (the caller retries if another
    process takes it first)."""
    host = host or service_host()
    with socket.socket(host_family(host), socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str | None = None) -> bool:
    """Whether something accepts connections on `host` (default: the service address) at `port`."""
    host = host or service_host()
    with socket.socket(host_family(host), socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text[-lines:])


def read_record(paths: StatePaths, name: str) -> dict[str, Any] | None:
    try:
        return load_json(paths.service_record(name).read_text(), str(paths.service_record(name)))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return None  # a torn record is as good as none: the service is started again


def write_record(paths: StatePaths, name: str, record: dict[str, Any]) -> None:
    atomic_write_text(paths.service_record(name), json.dumps(record, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def services_lock(paths: StatePaths) -> Iterator[None]:
    """One starter or stopper per state folder at a time (CLI, UI code server, parallel cells and tests may
    race): the second waits, then finds the first one's services running and reuses them."""
    paths.services_dir.mkdir(parents=True, exist_ok=True)
    try:
        with file_lock(paths.services_lock, timeout=LOCK_TIMEOUT_S):
            yield
    except LockTimeoutError:
        raise ServiceError(
            f"another churnbench command has held {paths.services_lock} for "
            f"{LOCK_TIMEOUT_S:.0f} s while starting or stopping services; try again") from None


class ProcessService(Service):
    """A service that is one child process listening on a free port of the service address (Mongo, the SaaS API, the
    local model server): `command` and `url_for` get the host it binds to and its URLs name."""

    start_timeout: float = START_TIMEOUT_S  # from the spawn to its first healthy answer

    @abc.abstractmethod
    def command(self, paths: StatePaths, host: str, port: int) -> list[str]: ...

    @abc.abstractmethod
    def url_for(self, host: str, port: int) -> str: ...

    def log_file(self, paths: StatePaths) -> Path:
        return paths.services_dir / f"{self.name}.log"

    def prepare(self, paths: StatePaths) -> None:
        """Create data folders etc. before the first start."""

    def record_extra(self) -> dict[str, Any]:
        """What the service record states besides the process (the local model server: which model it serves)."""
        return {}

    def status(self, paths: StatePaths, *, check_health: bool = True) -> ServiceStatus:
        base: dict[str, Any] = {"name": self.name, "label": self.label, "mode": "embedded"}  # of every status
        record = read_record(paths, self.name)
        if record is None:
            return ServiceStatus(**base, state="stopped", detail="not started")
        pid = int(record["pid"])
        if live_process(pid, record.get("create_time")) is None:
            return ServiceStatus(**base, state="dead", pid=pid, url=record.get("url"),
                                 detail=f"pid {pid} is gone (killed?)")
        return self._unresponsive_or_running(record["url"], pid, check_health, base)

    def start(self, paths: StatePaths) -> ServiceStatus:
        import psutil

        self.prepare(paths)
        log = self.log_file(paths)
        host = service_host()
        last = ""
        for _attempt in range(3):  # the free port may be taken between choosing and binding it
            port = free_port(host)
            cmd = self.command(paths, host, port)
            with (paths.services_dir / f"{self.name}.out").open("ab") as out:
                # Own session: Ctrl-C in the terminal must not reach a service meant to outlive the
                # command; stdin/stdout detached so no caller's pipe is held open by the service.
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True)
            SPAWNED[proc.pid] = proc
            url = self.url_for(host, port)
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    SPAWNED.pop(proc.pid, None)
                    last = f"exited with code {proc.returncode}"
                    break
                if not port_open(port, host):
                    last = f"nothing listens on {host}:{port} yet"
                    time.sleep(0.05)
                    continue
                try:
                    self.health(url, 2.0)
                except Exception as e:  # listening but not serving yet
                    last = one_line(e)
                    time.sleep(0.05)
                    continue
                record = {"pid": proc.pid, "host": host, "port": port, "url": url, "started_by": "churnbench",
                          "create_time": psutil.Process(proc.pid).create_time(), "command": cmd,
                          **self.record_extra()}
                write_record(paths, self.name, record)
                return ServiceStatus(self.name, self.label, "embedded", "running", url=url, pid=proc.pid,
                                     detail=f"log {log}")
            else:
                terminate(proc.pid, None, timeout=5.0)
                raise ServiceError(f"{self.label} did not answer within {self.start_timeout:.0f} s "
                                   f"({last})\n--- {log} (tail) ---\n{log_tail(log)}")
        raise ServiceError(f"{self.label} did not start ({last})\n--- {log} (tail) ---\n{log_tail(log)}")

    def owned_processes(self, paths: StatePaths) -> list[Any]:
        """Processes of this service for this state folder that have no record (e.g. the record was
        deleted with the state folder): recognised by the state folder's path on their command line."""
        return []

    def stop(self, paths: StatePaths) -> ServiceStatus:
        before = self.status(paths, check_health=False)
        record = read_record(paths, self.name)
        targets: list[tuple[int, float | None]] = []
        if record is not None and record.get("started_by") == "churnbench" and before.state != "dead":
            targets.append((int(record["pid"]), record.get("create_time")))
        targets += [(p.pid, p.create_time()) for p in self.owned_processes(paths)
                    if not targets or p.pid != targets[0][0]]
        for pid, create_time in targets:
            if not terminate(pid, create_time):
                raise ServiceError(f"{self.label} (pid {pid}) did not stop")
        paths.service_record(self.name).unlink(missing_ok=True)
        return replace(before, state="stopped", action="stopped" if targets else "was not running")
