"""The CLI's error output: one line, then where the full trace was written (docs/guarantees.md, "Error output").

- A usage error (an unknown option, a missing argument, a value of the wrong form: Click's `UsageError`) prints
  `churnbench <command>: usage error: <what> (see `churnbench <command> --help`)` and exits 2. It is the command
  line itself that is wrong, nothing ran, and no trace is kept.
- Any other error prints `churnbench: error: <message>` and exits 1. The message is one line (whitespace runs,
  newlines included, made one space) naming the task, read, partition or endpoint where the error says so.
- When the error has a trace worth reading, the line ends with `(trace: <file>)`: an error that happened in a
  Dagster step or a worker process (it carries that place's trace), or one caused by another exception (a lost
  connection, an endpoint's error). The file holds the command line, the Python traceback with its causes and
  notes, and that place's trace. A refusal of bad input (a `UserFacingError` raised with no cause: the input is
  the whole story) has no trace file.
- An error that is not a `UserFacingError` is a bug: `churnbench: internal error: <type>: <message> (trace:
  <file>; ...)`, exit 1.
- `--debug` (or `CHURNBENCH_DEBUG=1`) prints the trace to stderr before the line.
- Ctrl-C: `churnbench: interrupted`, exit 130.

Where traces go: `error_traces.py` (a worker process of `run_cells` writes its cell's the same way).
"""

from __future__ import annotations

from pathlib import Path

import click

from churn_assets.error_traces import has_trace, trace_text, write_trace
from churn_assets.errors import UserFacingError, debug_enabled, one_line

USAGE_EXIT = 2
ERROR_EXIT = 1
INTERRUPTED_EXIT = 130


def usage_line(e: click.UsageError) -> str:
    """One line for an error in the command line itself."""
    path = e.ctx.command_path if e.ctx is not None else "churnbench"
    return f"{path}: usage error: {one_line(e.format_message())} (see `{path} --help`)"


def error_line(e: BaseException, trace: Path | None) -> str:
    """The one line an error prints."""
    where = f" (trace: {trace})" if trace is not None else ""
    if isinstance(e, UserFacingError):
        return f"churnbench: error: {one_line(e)}{where}"
    what = f"{type(e).__name__}: {one_line(e)}".rstrip(": ")
    kept = f"trace: {trace}; " if trace is not None else ""
    return f"churnbench: internal error: {what} ({kept}a bug in churnbench: please report it with the trace)"


def report(e: BaseException) -> int:
    """Print one line for `e` (and its trace under --debug); the exit code."""
    if isinstance(e, KeyboardInterrupt) or (isinstance(e, click.Abort) and isinstance(e.__cause__, KeyboardInterrupt)):
        click.echo("churnbench: interrupted (what was answered or built is kept: the same command resumes)", err=True)
        return INTERRUPTED_EXIT
    if isinstance(e, click.UsageError):
        click.echo(usage_line(e), err=True)
        return USAGE_EXIT
    if isinstance(e, click.Abort):
        click.echo("churnbench: aborted", err=True)
        return ERROR_EXIT
    if isinstance(e, click.ClickException):
        click.echo(f"churnbench: error: {one_line(e.format_message())}", err=True)
        return e.exit_code
    text = trace_text(e)
    path = write_trace(text) if has_trace(e) else None
    if debug_enabled():
        click.echo(text, err=True, nl=False)
    click.echo(error_line(e, path), err=True)
    return ERROR_EXIT
