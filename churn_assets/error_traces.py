"""Trace files of errors printed as one line (docs/guarantees.md, "Error output"): the CLI's (`commands/
error_output.py`) and a worker process's, whose cell fails with one line (`orchestration/cells.py`).

Traces go to `<state folder>/logs/errors/` when the state folder exists (the newest `KEEP_TRACES` are kept), else
to `<temp dir>/churnbench-errors/`: a command that never touched a state folder does not make one to report an
error.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import sys
import tempfile
import traceback
from pathlib import Path

from churn_assets.errors import UserFacingError
from churn_assets.state import StatePaths

KEEP_TRACES = 100


def trace_text(e: BaseException, argv: list[str] | None = None) -> str:
    """What the trace file holds: the command, the traceback with causes and notes, and the trace of where the
    error happened when that was outside this process's stack."""
    argv = sys.argv if argv is None else argv
    parts = [f"churnbench {' '.join(argv[1:])}".rstrip(),
             f"{dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}  pid {os.getpid()}", "",
             "".join(traceback.format_exception(e))]
    elsewhere = getattr(e, "trace", None)
    if elsewhere:
        parts += ["--- where it happened ---", str(elsewhere)]
    return "\n".join(parts).rstrip() + "\n"


def traces_dir() -> Path:
    """`<state>/logs/errors` when the state folder exists, else a folder in the system's temporary directory."""
    try:
        paths = StatePaths.resolve()
        if paths.root.is_dir():
            return paths.error_traces_dir
    except (OSError, UserFacingError):
        pass  # no usable state folder (the error may be about it): the trace still gets a file, below
    return Path(tempfile.gettempdir()) / "churnbench-errors"


def write_trace(text: str, folder: Path | None = None) -> Path | None:
    """Write a trace file (None when it cannot be written: the line is printed anyway)."""
    folder = folder or traces_dir()
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{stamp}-{os.getpid()}-{secrets.token_hex(3)}.log"  # a worker may fail twice a second
        path.write_text(text, encoding="utf-8")
        old = sorted(folder.glob("*.log"), key=lambda p: p.stat().st_mtime)[:-KEEP_TRACES]
        for stale in old:
            stale.unlink(missing_ok=True)
        return path
    except OSError:
        return None


def has_trace(e: BaseException) -> bool:
    """Whether an error's trace says more than its line: a bug, an error carrying another place's trace, or one
    caused by another exception (not a refusal raised `from None`)."""
    if not isinstance(e, UserFacingError):
        return True
    return bool(getattr(e, "trace", None)) or e.__cause__ is not None or \
        (e.__context__ is not None and not e.__suppress_context__)
