"""bench/decompose_window_bias.py: a task counts as moved only when a measured change falls on a day its served
data missed; degenerate tasks are left out; the summary splits P - E into P - M and M - E."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from bench_scripts import load_bench_script

T = dt.date(2024, 4, 27)


class _Oracle:
    """The two things `moved_tasks` reads of `AnswerChangeRates`: the missed days (offsets back from T) and the
    measured change days per (task, class)."""

    def __init__(self, changed: dict[tuple[str, str], tuple[dt.date, ...]]) -> None:
        self.changed = changed

    def missed_days(self, task: object, vintage: object, anchor: dt.date) -> dict[str, tuple[int, int]]:
        return {"prices": (0, 4)}  # T-4 .. T missed


def _day(*task_ids: str, degenerate: tuple[str, ...] = ()) -> SimpleNamespace:
    tasks = tuple(SimpleNamespace(task_id=t) for t in task_ids)
    run = SimpleNamespace(vintage={}, tasks=[SimpleNamespace(task_id=t, degenerate=t in degenerate) for t in task_ids])
    return SimpleNamespace(anchor=T, tasks=tasks, run=run)


def test_a_move_counts_only_on_a_missed_day_and_degenerate_tasks_are_left_out() -> None:
    bias = load_bench_script("decompose_window_bias")
    oracle = _Oracle({("q1", "prices"): (T - dt.timedelta(days=2),),  # missed: moved
                      ("q2", "prices"): (T - dt.timedelta(days=9),),  # before the served day: not missed
                      ("q3", "prices"): (T,)})  # missed, but its served gold is degenerate
    assert bias.moved_tasks(oracle, _day("q1", "q2", "q3", degenerate=("q3",))) == {"q1"}


def test_the_summary_splits_the_error_through_the_moved_tasks() -> None:
    bias = load_bench_script("decompose_window_bias")
    rows = [{"seed": 1, "policy": "off", "predicted": 10.0, "interval_lo": 8.0, "interval_hi": 12.0, "moved": 14.0,
             "measured": 11.0},
            {"seed": 1, "policy": "off", "predicted": 10.0, "interval_lo": 8.0, "interval_hi": 12.0, "moved": 6.0,
             "measured": 7.0}]
    (s,) = bias.summarize(rows)
    assert (s["windows"], s["inside"], s["moved_inside"]) == (2, 1, 0)
    assert (s["rate_shift"], s["non_additivity"]) == (0.0, 1.0)
    assert (s["mean_abs_rate_shift"], s["mean_abs_non_additivity"]) == (4.0, 2.0)


def test_the_non_additivity_splits_into_undone_moves_and_moves_only_classes_together_show() -> None:
    bias = load_bench_script("decompose_window_bias")
    oracle = _Oracle({("q1", "prices"): (T - dt.timedelta(days=2),),  # moved, exposed
                      ("q2", "prices"): (T - dt.timedelta(days=1),)})  # moved, changed back by T: not exposed
    day = _day("q1", "q2", "q3")
    for t in day.run.tasks:  # q3: exposed with no measured move (two classes' changes that only show together)
        t.exposed = t.task_id in ("q1", "q3")
    assert bias.day_counts(oracle, day) == (2, 1, 1)  # moved q1, q2; moved not exposed q2; exposed not moved q3
