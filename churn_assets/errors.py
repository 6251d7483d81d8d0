"""The base of errors whose message is for the user: it names the problem and the place.

The CLI prints every error as one line and writes the full trace to a file it names (`commands/error_output.py`,
docs/guarantees.md "Error output"); `--debug` or `CHURNBENCH_DEBUG=1` prints the trace too.
"""

from __future__ import annotations

import os

DEBUG_ENV = "CHURNBENCH_DEBUG"


class UserFacingError(Exception):
    """Bad input, an unreachable store, a refused request: the message says what and where.

    `trace`: where the error really happened when that was outside this process's stack (a Dagster step's
    stack trace, a worker process's): kept for the trace file, never printed in the one line."""

    trace: str | None = None


class DataIntegrityError(UserFacingError):
    """A read whose content does not match what its store recorded for it, or whose data is as of another day
    than the plan serves: the run stops, and nothing is scored from the read. (Defined here, below every store,
    so that a store's own module can raise it: the staged caches, the warehouse's recorded content hashes.)"""


def one_line(text: object) -> str:
    """`text` with every run of whitespace (newlines included) made one space."""
    return " ".join(str(text).split())


def error_line(e: BaseException | str | None, limit: int = 1000) -> str:
    """An error as one line of at most `limit` characters: a `UserFacingError`'s message as it is, any other
    exception's prefixed with its type (its message alone may not say what failed), "unknown error" for nothing."""
    text = one_line(e or "")
    if isinstance(e, BaseException) and not isinstance(e, UserFacingError):
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text[:limit] or "unknown error"


def debug_enabled() -> bool:
    """Whether full traces are printed (`--debug`, or `CHURNBENCH_DEBUG` set to anything but empty or 0)."""
    return os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def add_context(e: UserFacingError, context: str) -> UserFacingError:
    """`e` with `context: ` before its message (the task or the read it happened in), when its message is its one
    argument (every `UserFacingError` but those formatting their own); returns `e` for `raise`."""
    if len(e.args) == 1 and isinstance(e.args[0], str) and str(e) == e.args[0] and \
            not e.args[0].startswith(f"{context}: "):
        e.args = (f"{context}: {e.args[0]}",)
    return e
