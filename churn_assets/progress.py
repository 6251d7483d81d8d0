"""Progress of long work, one mechanism for the commands and for the steps inside Dagster runs.

- `progress_bar(description, total, unit)`: a rich bar (counts, elapsed time) on an interactive stderr, nothing
  otherwise; for a command's own loop, drawn by that one process (`ledger verify`, `worlds materialize`).
- `Tally(label, total, unit, echo)`: plain lines with counts and elapsed time, at most one every `EVERY_S`
  seconds plus the first and the last, for the long steps inside runs (a dbt build, a vector index or RAG corpus
  day). Those steps may run in two pool worker processes at once on one terminal (`orchestration/cells.py`),
  where two live bars would overwrite each other's lines: a plain line reads the same on a terminal and in a log
  (decision 295). The throttle keeps a log of a 180-day build to tens of lines, not thousands.
- `partition_label(what, world, day)`: how a step names what it builds, `vector_index [default-s42-2906f8
  2024-03-29]`: the world and the day, since a sweep builds days of several worlds at once (decision 283).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Echo = Callable[[str], None]
EVERY_S = 10.0  # at most one line per step this often (a 158 s vector index day: about 16 lines)


def partition_label(what: str, world: str, day: dt.date | None = None) -> str:
    """`what [world]` for a world's partition, `what [world day]` for a day's."""
    return f"{what} [{world}]" if day is None else f"{what} [{world} {day}]"


class Tally:
    """Counts done of `total` and says so through `echo`: `<label>: 512/3401 chunks embedded, 12 s`.

    The first call of `advance` that finds `every_s` passed since the last line writes one (unless all is done);
    `finish()` always writes the last (`... in 158.0 s`)."""

    def __init__(self, label: str, total: int, unit: str, echo: Echo, *, every_s: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.unit, self.echo = label, total, unit, echo
        self.every_s, self.clock = every_s, clock
        self.done = 0
        self.started = self.last = clock()
        echo(f"{label}: 0/{total} {unit}")

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if now - self.last >= self.every_s and self.done < self.total:  # all done: `finish` says so
            self.last = now
            self.echo(f"{self.label}: {self.done}/{max(self.total, self.done)} {self.unit}, "
                      f"{now - self.started:.0f} s")

    def finish(self) -> None:
        self.echo(f"{self.label}: {self.done}/{max(self.total, self.done)} {self.unit} in "
                  f"{self.clock() - self.started:.1f} s")


@contextmanager
def progress_bar(description: str, total: int | None, unit: str = "") -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`; shows a bar on an interactive stderr, nothing otherwise."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda n: None
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn(unit), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)
