"""Files several processes may write at once: atomic replacement and advisory file locks.

- `atomic_write_text(path, text)`: the text goes to a temporary file of this writer's own (process id and a
  random token in its name), is fsynced and renamed over `path` (and the folder fsynced), so a reader sees the
  old file or the new one, never half of one, also after a kill or a power loss, and two writers of the same
  path never write into each other's temporary file (a shared temporary name let one writer rename the other's
  half-written file into place, or fail on a name the other had just renamed away). A full disk is a
  `DiskFullError` naming the file (one line), the temporary file removed.
- `process_stamp()` / `process_gone(stamp)`: this process's id, start time and host, recorded beside what it
  writes (a results folder, a Dagster run), and whether the process of such a record is gone (a reused pid is
  a different process: its start time differs).
- `other_process_alive(pid)`: whether another live process has that id (a leftover's writer may still run).
- `file_lock(path, shared=False)`: an exclusive (or shared) `fcntl.flock` on `path` (created if missing, never
  deleted: deleting a lock file while another process waits on it would let a third one lock a new file of the
  same name). The lock is held by the open file description, so two threads of one process exclude each other
  too, and the kernel releases it when the holder dies: a killed writer never leaves a stale lock behind.

Both are for processes on one machine sharing a state folder (what the embedded deployment is); stores in
Postgres take Postgres advisory locks instead (see `docs/decisions.md`, "Cells in parallel").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.faults import fault_point

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


def process_stamp(pid: int | None = None) -> dict[str, Any]:
    """{pid, create_time, host} of this process (or of `pid`): what tells it from a later process of the same
    id. psutil's `create_time` is the kernel's start time of the process, stable for its whole life."""
    import psutil

    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "create_time": psutil.Process(pid).create_time(), "host": socket.gethostname()}


def process_gone(stamp: Mapping[str, Any]) -> bool | None:
    """Whether the process a `process_stamp` describes has ended: True (gone, or its pid now belongs to a process
    started at another time), False (still running), None (another host's: this machine cannot tell)."""
    import psutil

    if stamp.get("host") != socket.gethostname():
        return None
    try:
        proc = psutil.Process(int(stamp["pid"]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        return abs(proc.create_time() - float(stamp["create_time"])) > 1.0
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False


class DiskFullError(UserFacingError):
    """A write failed because the file system is full (or over quota); the message names the file."""


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def disk_full(path: Path, e: OSError) -> DiskFullError:
    return DiskFullError(f"no space left on the device of {path} ({e.strerror}): free some space and run the "
                         "command again (nothing was recorded as complete; a run resumes from its checkpoint)")


class LockTimeoutError(UserFacingError):
    """Another process held a lock for longer than the caller would wait; the message names the lock."""


def temporary_name(path: Path) -> Path:
    """A hidden name beside `path` that no other writer uses (`.<name>.<pid>-<token>.tmp`)."""
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file of this writer's own, fsync and a rename (then fsync the
    folder, so that the rename itself survives a crash). A full disk raises `DiskFullError`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        fault_point("atomic_write", path)
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
        fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in DISK_FULL_ERRNOS:
            raise disk_full(path, e) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fsync_dir(folder: Path) -> None:
    """fsync a folder (its entries: a rename or a new file in it). Not every platform or file system allows
    it; where it does not, the rename is still atomic, only its durability after a power cut is weaker."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` via a temporary file of this writer's own and a rename."""
    atomic_write_bytes(path, text.encode(encoding))


@contextlib.contextmanager
def file_lock(path: Path, *, timeout: float | None = None, what: str | None = None,
              on_wait: Callable[[], None] | None = None, shared: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on `path` for the block; wait while another holder has it.

    `timeout` None waits as long as it takes; otherwise `LockTimeoutError` after `timeout` seconds, naming
    `what` (default: the lock file). `on_wait` is called once, when the lock is found taken (a caller says
    "waiting for ..." there). `shared`: a shared lock, which any number of holders take together and which
    excludes only the exclusive holder (users of a world against its removal).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        deadline = None if timeout is None else time.monotonic() + timeout
        waited = False
        while True:
            try:
                fcntl.flock(fh.fileno(), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
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
