"""The cell pool's fork server (`cells.WorkerPool`), in a module that imports nothing heavy, so a command can start
it first thing: the server's import of the code location (about 6 s on an idle machine) then runs while the
command imports Dagster and opens its state folder, instead of after (decision 308).

    start_fork_server()  # at a command's start, when it will run cells on more than one worker

The pool forks its workers from the same server later (`context()`); a command that never builds a pool leaves
an idle server behind until it exits, which `stop_at_exit` ends."""

from __future__ import annotations

import atexit
import multiprocessing
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext

from churn_assets.orchestration.code_location import CODE_LOCATION_MODULE

# Modules the workers' fork server imports before forking them: 6-8 s per process on these machines (dagster-dbt
# and dbt alone 2.6 s), paid once instead of once per worker. Not torch: a worker that needs the embedding model
# imports it then, while the others work (preloading it made the first build wait 26 s; decision 198).
WORKER_PRELOAD = (CODE_LOCATION_MODULE,)
_WAITED = False


def context() -> ForkServerContext:
    """The forkserver context with the workers' preload, the server waited for at this process's exit."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(WORKER_PRELOAD))
    stop_at_exit()
    return ctx


def start_fork_server() -> None:
    """Start the fork server now (it begins importing `WORKER_PRELOAD` at once; a worker asked for before it is
    done waits for it). Does nothing when it is running already."""
    context()
    forkserver.ensure_running()


def stop_at_exit() -> None:
    """At exit, stop the fork server and wait for it (once per process). multiprocessing leaves it to notice
    this process is gone, unwaited: its workers, which it waits for, then counted for nobody, so a parent's
    `wait4` (the bench's peak RSS and CPU of `churnbench paper`) saw none of the cells' memory or CPU: a
    two-worker cold paper measured 270 MiB and 6 s of CPU, 1,070 MiB and 95 s once the server is waited for.
    `_stop` is what CPython's own tests call (3.8 to 3.13); an interpreter without it keeps the old behaviour."""
    global _WAITED
    if _WAITED:
        return
    _WAITED = True

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if callable(stop):
        atexit.register(stop)
