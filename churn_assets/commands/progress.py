"""Progress bars for long commands (rich, on stderr; silent when stderr is not a terminal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(description: str, total: int | None, unit: str = "") -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`; shows a bar on an interactive stderr, nothing otherwise."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda n: None
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn(unit), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)
