"""Deterministic fault injection for the reliability tests: `CHURNBENCH_FAULT` names points where a process
kills itself, fails a write as a full disk would, or pauses while a test kills a service.

    CHURNBENCH_FAULT=after_tasks:20                 SIGKILL this process at the 20th pass of `after_tasks`
    CHURNBENCH_FAULT=task_write:3:enospc            the 3rd task write raises OSError(ENOSPC)
    CHURNBENCH_FAULT=after_tasks:5:pause=/tmp/p     at the 5th pass create /tmp/p and wait until it is removed
    CHURNBENCH_FAULT=operational_before_meta:1,finish:1   several points, comma-separated

A spec is `<point>:<n>[:<action>]`; the action is `kill` by default. Each point counts its passes per process,
so the n-th pass is reached at the same place in every run of the same inputs (no timing involved). With the
variable unset, `fault_point` is one dictionary lookup. The points, where they are and what they model:

- `operational_before_meta`  `fabric/mongo.write_partition`, collections written, `_meta` not yet (input build)
- `staged_before_commit`     `grounding/staging.write_partition`, rows and meta row written, not committed
- `task_write`, `after_tasks` `evaluation/results.RunWriter.append`, before a task's row is written / once it is
                             fsynced (answering)
- `finish`                   `RunWriter.finish`, tasks.jsonl and stale.csv written, summary.json not yet
- `materialize`              `orchestration/materialize.materialize`, before each partition's run, with the world's
                             use lock and the build's lock held (a command paused or killed mid-way)
- `atomic_write`             `files.atomic_write_bytes`, before the temporary file is written (any state file)
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

FAULT_ENV = "CHURNBENCH_FAULT"
ACTIONS = ("kill", "enospc", "pause")
PAUSE_LIMIT_S = 300.0  # a paused process whose test died does not wait for ever


class FaultSpecError(ValueError):
    """A `CHURNBENCH_FAULT` value that does not parse (a test's typo must not pass silently)."""


@dataclass(frozen=True)
class Fault:
    point: str
    nth: int
    action: str = "kill"
    arg: str = ""


def parse_faults(text: str) -> dict[str, Fault]:
    """{point: fault} of a `CHURNBENCH_FAULT` value."""
    out: dict[str, Fault] = {}
    for spec in filter(None, (s.strip() for s in text.split(","))):
        parts = spec.split(":", 2)
        if len(parts) < 2 or not parts[1].isdigit() or int(parts[1]) < 1:
            raise FaultSpecError(f"{FAULT_ENV}: {spec!r} is not <point>:<n>[:<action>] with n >= 1")
        action, _, arg = (parts[2] if len(parts) == 3 else "kill").partition("=")
        if action not in ACTIONS or (action == "pause") != bool(arg):
            raise FaultSpecError(f"{FAULT_ENV}: {spec!r}: the action is one of kill, enospc, pause=<file>")
        out[parts[0]] = Fault(parts[0], int(parts[1]), action, arg)
    return out


_passes: dict[str, int] = {}
_parsed: tuple[str, dict[str, Fault]] = ("", {})


def fault_point(point: str, path: Path | str | None = None) -> None:
    """Count one pass of `point`; act when a `CHURNBENCH_FAULT` spec names this pass. `path`: the file being
    written (the ENOSPC error names it, as the kernel's would)."""
    global _parsed
    text = os.environ.get(FAULT_ENV)
    if not text:
        return
    if _parsed[0] != text:
        _parsed = (text, parse_faults(text))
    fault = _parsed[1].get(point)
    if fault is None:
        return
    _passes[point] = _passes.get(point, 0) + 1
    if _passes[point] != fault.nth:
        return
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path) if path is not None else None)
    else:
        _pause(Path(fault.arg))


def _pause(marker: Path) -> None:
    """Create `marker` and wait until someone removes it (the test does what it has to meanwhile)."""
    marker.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
