"""Files several processes may write at once: atomic replacement and advisory file locks.

- `atomic_write_text(path, text)`: the text goes to a temporary file of this writer's own (process id and a
  random token in its name) and is renamed over `path`, so a reader sees the old file or the new one, never
  half of one, and two writers of the same path never write into each other's temporary file (a shared
  temporary name let one writer rename the other's half-written file into place, or fail on a name the other
  had just renamed away).
- `other_process_alive(pid)`: whether another live process has that id (a leftover's writer may still run).
- `file_lock(path)`: an exclusive `fcntl.flock` on `path` (created if missing, never deleted: deleting a lock
  file while another process waits on it would let a third one lock a new file of the same name). The lock is
  held by the open file description, so two threads of one process exclude each other too, and the kernel
  releases it when the holder dies: a killed writer never leaves a stale lock behind.

Both are for processes on one machine sharing a state folder (what the embedded deployment is); stores in
Postgres take Postgres advisory locks instead (see `docs/decisions.md`, "Cells in parallel").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from churn_assets.errors import UserFacingError

POLL_S = 0.05


def other_process_alive(pid: int) -> bool:
    """Whether a process other than this one has the id `pid`. This process's own id is False: a caller asks
    about a leftover it did not write now. A process of another user counts as alive (PermissionError)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LockTimeoutError(UserFacingError):
    """Another process held a lock for longer than the caller would wait; the message names the lock."""


def temporary_name(path: Path) -> Path:
    """A hidden name beside `path` that no other writer uses (`.<name>.<pid>-<token>.tmp`)."""
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file of this writer's own and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` via a temporary file of this writer's own and a rename."""
    atomic_write_bytes(path, text.encode(encoding))


@contextlib.contextmanager
def file_lock(path: Path, *, timeout: float | None = None, what: str | None = None,
              on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on `path` for the block; wait while another holder has it.

    `timeout` None waits as long as it takes; otherwise `LockTimeoutError` after `timeout` seconds, naming
    `what` (default: the lock file). `on_wait` is called once, when the lock is found taken (a caller says
    "waiting for ..." there).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        deadline = None if timeout is None else time.monotonic() + timeout
        waited = False
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if not waited:
                waited = True
                if on_wait is not None:
                    on_wait()
            if deadline is not None and time.monotonic() > deadline:
                raise LockTimeoutError(f"another process has held {what or path} for {timeout:.0f} s; "
                                       "try again when it is done") from None
            time.sleep(POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def is_locked(path: Path) -> bool:
    """Whether another open file description holds the lock on `path` right now (for tests and reports)."""
    path = Path(path)
    if not path.exists():
        return False
    with path.open("a") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                return True
            raise
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False
