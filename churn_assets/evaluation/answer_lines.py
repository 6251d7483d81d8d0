"""One line per answer of a stochastic (LLM) agent's run: which answer of how many, its verdict, the seconds it
took, and when the run should end at this pace (issue 45: a local model took 12.7 minutes for 12 tasks without a
line on the terminal).

The runner logs each line to the logger `ANSWER_LOGGER` once the answer is scored (`evaluation/runner.py`); the
commands show them while the run goes on (`orchestration/scenario_runs.py`), and Dagster's event log records them
as a managed Python logger (`services/dagster_home.py`). The deterministic agent answers a task in milliseconds:
its runs log no such line (one in twenty is the asset's own progress line).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ANSWER_LOGGER = __name__  # churn_assets.evaluation.answer_lines
logging.getLogger(ANSWER_LOGGER).setLevel(logging.INFO)


def _duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 02 min`."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def answer_line(n: int, total: int, verdict: str, seconds: float | None, elapsed: float,
                answered: int | None = None) -> str:
    """`answer 3 of 12: reasoning_error, 41.2 s; ETA 6 min 10 s`. `seconds`: this answer's wall time (None: not
    timed); `elapsed`: the run's seconds so far; `answered`: answers this run made so far (default `n`: fewer on
    a run resumed from a checkpoint, whose resumed answers took no time). The ETA is the remaining answers at
    the mean pace of this run's answers."""
    if not 1 <= n <= total:
        raise ValueError(f"answer {n} of {total}")
    made = n if answered is None else answered
    took = "not timed" if seconds is None else f"{seconds:.1f} s"
    if n == total:
        eta = f"done in {_duration(elapsed)}"
    elif made < 1:
        eta = "ETA unknown"
    else:
        eta = f"ETA {_duration(elapsed / made * (total - n))}"
    return f"answer {n} of {total}: {verdict}, {took}; {eta}"


class _Echo(logging.Handler):
    def __init__(self, echo: Callable[[str], object]) -> None:
        super().__init__(logging.INFO)
        self._echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        self._echo(record.getMessage())


@contextmanager
def answer_lines_to(echo: Callable[[str], object]) -> Iterator[None]:
    """While inside, each answer line the runner logs in this process is also given to `echo` (a command's
    terminal: the run's Dagster console log is silenced, `orchestration/materialize.py`)."""
    handler, logger = _Echo(echo), logging.getLogger(ANSWER_LOGGER)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
