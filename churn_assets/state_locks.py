"""The locks of a state folder that processes on several hosts contend for: Postgres advisory locks (decision 332).

A state folder is shared by every process that works on it: the commands and the UI of its host, and the cell engine's
workers, which may run on other hosts (docs/deployment.md, "Workers on other hosts"). The locks that guard what they
share are session advisory locks on the state folder's Postgres (its warehouse database, which every host reaches),
one per name:

- `results <world>/<scenario>/<folder>`: the one writer of a results folder (`ResultsStore.run_lock`);
- `<world>/inputs/<assets>@<day>`: one build of a world's input partitions (`scenario_materializer.input_lock`);
- `<world>/scenarios/<key>`: a scenario file's read-modify-writes (`scenarios.scenario_lock`);
- `<world>/operational_store/<day>`: the one writer of a day's operational database;
- `<world>/in-use`: the world's use, shared by every build and evaluation, exclusive for its removal;
- `migrate`: `churnbench migrate` of the folder.

    with state_locks(paths).hold("w/inputs/ledger", what="the build of the ledger", on_wait=say_waiting):
        ...

A lock is held by a connection of its own and ends with it: a holder killed outright (SIGKILL) or cut off (its
host lost: TCP keepalives end the connection within about 25 s) leaves no stale lock, as an flock did on one host.
Two holders in one process exclude each other (each has its own connection). The key carries the state folder's id,
so state folders that share one external Postgres never share a lock.

The locks of one host's own services stay file locks (`files.file_lock` on `services.lock`): no other host starts
this host's services.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from churn_assets.files import LockTimeoutError

if TYPE_CHECKING:
    from churn_assets.state import StatePaths

POLL_S = (0.02, 0.25)  # first and longest pause between two tries of a taken lock
# A connection of a host that vanished ends after idle 10 s + 3 unanswered probes 5 s apart: its locks go with it.
KEEPALIVES: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


@dataclass
class StateLocks:
    """The advisory locks of the state folder `namespace` (its id) on the Postgres at `url`. `find_url`: where that
    Postgres is now, asked when `url` stops answering (an embedded one started again listens on another socket)."""

    url: str
    namespace: str
    find_url: Callable[[], str] | None = field(default=None, compare=False, repr=False)

    def key(self, name: str) -> str:
        return f"churnbench {self.namespace} {name}"

    @contextlib.contextmanager
    def hold(self, name: str, *, shared: bool = False, timeout: float | None = None, what: str | None = None,
             on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the lock `name` for the block (exclusive, or `shared` with any number of shared holders); wait while
        another holder excludes it. `timeout` None waits as long as it takes, else `LockTimeoutError` naming `what`
        after `timeout` seconds; `on_wait` is called once, when the lock is found taken."""
        take = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
        conn = self._connect()
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            pause, waited = POLL_S[0], False
            while not _try(conn, take, self.key(name)):
                if not waited:
                    waited = True
                    if on_wait is not None:
                        on_wait()
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockTimeoutError(f"another process has held {what or name} for {timeout:.0f} s; "
                                           "try again when it is done")
                time.sleep(pause)
                pause = min(pause * 2, POLL_S[1])
            yield
        finally:
            conn.close()  # the session's advisory locks end with it

    def is_held(self, name: str) -> bool:
        """Whether a holder (any process, any host) has the lock `name` right now."""
        conn = self._connect()
        try:
            return not _try(conn, "pg_try_advisory_lock", self.key(name))
        finally:
            conn.close()


    def _connect(self) -> Any:
        """A connection of its own; if the Postgres moved, to where it is now (`find_url`, once)."""
        import psycopg

        try:
            return _connect(self.url)
        except psycopg.OperationalError:
            if self.find_url is None:
                raise
            self.url = self.find_url()
            return _connect(self.url)


def _try(conn: Any, function: str, key: str) -> bool:
    from psycopg import sql

    query = sql.SQL("SELECT {}(hashtextextended(%s, 0))").format(sql.Identifier(function))
    row = conn.execute(query, (key,)).fetchone()
    return bool(row and row[0])


def _connect(url: str) -> Any:
    import psycopg

    from churn_assets.fabric.postgres import CONNECT_TIMEOUT_S

    return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, **KEEPALIVES)


_RESOLVED: dict[str, StateLocks] = {}
_RESOLVING = threading.Lock()


def state_locks(paths: StatePaths) -> StateLocks:
    """The locks of the state folder `paths`, on its Postgres (found, or started, once per process, and again when
    it stops answering)."""
    root = str(paths.root)
    with _RESOLVING:
        locks = _RESOLVED.get(root)
        if locks is None:
            def find_url() -> str:
                from churn_assets.services import ensure_services

                return ensure_services(paths).warehouse

            locks = _RESOLVED[root] = StateLocks(find_url(), paths.ensure().state_id, find_url)
        return locks
