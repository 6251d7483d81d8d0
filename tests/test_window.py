"""Arrival-averaged figures (`evaluation/window.py`): the window, re-anchoring, the bootstrap interval, and the
window on the default world against its single days."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_exposure import default_world_dir

from churn_assets.cli import main
from churn_assets.evaluation.exposure import AnswerChangeRates, change_rates, run_exposure
from churn_assets.evaluation.window import (
    WINDOW_INTERVAL_LABEL,
    Window,
    WindowError,
    bootstrap_mean,
    policy_windows,
    reanchor,
    window_prediction,
)
from churn_assets.freshness.planning import served_vintage
from churn_assets.freshness.policies import parse_policy
from churn_assets.grounding.registry import load_registry
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task
from churn_assets.tasks.templates import template
from churn_assets.world.config import load_config
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger

D = dt.date.fromisoformat
T, D28 = D("2024-04-27"), D("2024-03-29")
START = D("2024-01-01")


def test_a_window_starts_no_earlier_than_the_cache_build_day() -> None:
    w = Window(D28, 28, T)
    assert w.first == D("2024-03-31") and w.anchors[0] == w.first and w.anchors[-1] == T and len(w.anchors) == 28
    assert "gaps 2-29" in w.describe()
    assert Window(D28, 30, T).first == D28  # T = T' is a day of the window (nothing is missed on it)
    with pytest.raises(WindowError, match=r"starts on 2024-03-28, before the cache build day.*at most 30"):
        Window(D28, 31, T)
    with pytest.raises(WindowError, match="at least one day"):
        Window(D28, 0, T)


def test_reanchoring_moves_the_days_of_a_question_and_nothing_else() -> None:
    span = {"cost_center": "cc_001", "day1": "2024-04-13", "day2": "2024-04-20"}
    moved = Task("q1", "w", "2024-04-27", "t2_active_users_change_cost_center", span,
                 template("t2_active_users_change_cost_center").render(span))
    window = Task("q2", "w", "2024-04-27", "t1_hires", {"days": 7}, template("t1_hires").render({"days": 7}))
    a, b = reanchor([moved, window], D("2024-04-20"))
    assert a.params == {"cost_center": "cc_001", "day1": "2024-04-06", "day2": "2024-04-13"}
    assert a.anchor == "2024-04-20" and "2024-04-06" in a.question_text and a.task_id == "q1"
    assert b.params == {"days": 7} and b.question_text == window.question_text and b.anchor == "2024-04-20"
    assert reanchor([moved], T) == [moved]  # at its own anchor a task is itself


def test_the_bootstrap_interval_of_a_window_mean() -> None:
    flat = [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]
    lo, hi = bootstrap_mean(flat)
    assert lo <= 3.0 <= hi  # clusters resampled: 2, 3 or 4 a day
    assert bootstrap_mean([[3.0], [3.0]]) == (3.0, 3.0)  # one cluster, the same every day: no spread
    varying = [[0.0], [10.0], [20.0], [30.0]]
    lo, hi = bootstrap_mean(varying)
    assert 0 < lo < 15 < hi < 30 and bootstrap_mean(varying) == (lo, hi)  # seeded


# --- the default world -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    loaded = load_ledger(default_world_dir(tmp_path_factory))
    records = loaded.records
    resolver = GoldResolver(records)
    tasks = generate_task_set(records, world_id="default-s42-2906f8", anchor=T, resolver=resolver).tasks
    rates = change_rates(records, tasks, start=START, anchor=T)
    return {"records": records, "resolver": resolver, "tasks": tasks, "rates": rates}


def test_a_window_of_one_day_is_the_single_day_figure(world: dict[str, Any]) -> None:
    records, resolver, tasks, rates = world["records"], world["resolver"], world["tasks"], world["rates"]
    registry = load_registry()
    [tiered] = policy_windows(records, tasks, Window(D28, 1, T), ["tiered"], registry, start=START,
                              calendar_days=180, resolver=resolver, rates=rates)
    single = run_exposure(records, tasks, anchor=T, t_prime=D28, vintage=served_vintage(registry, D28, T,
                                                                                       parse_policy("tiered")),
                          start=START, resolver=resolver, rates=rates)
    assert tiered.exposure.per_day == (single.exposure,) and tiered.exposure.mean == single.exposure
    assert tiered.prediction == pytest.approx(single.prediction)
    # One calendar draw per day resamples exactly what the per-T interval resamples.
    assert tiered.prediction_interval_90 == tuple(float(x) for x in single.interval())


def test_a_window_averages_days_whose_schedules_do_not_know_t(world: dict[str, Any]) -> None:
    """Seven days ending at T (T' = T - 29): each day's exposure is that day's run with the task set re-anchored
    to it and the policy's schedule cut at it; uniform:8 is no longer 0 on every day (the issue's acceptance), its
    refresh on 04-21 (22.5 days after T') brings it to 0 that day only."""
    records, resolver, tasks, rates = world["records"], world["resolver"], world["tasks"], world["rates"]
    registry = load_registry()
    window = Window(D28, 7, T)
    found = {w.policy: w for w in policy_windows(records, tasks, window, ["tiered", "off", "uniform:8"], registry,
                                                 start=START, calendar_days=180, resolver=resolver, rates=rates)}
    uniform = found["uniform:8"].exposure
    assert uniform.per_day[0] == 0 and all(x > 0 for x in uniform.per_day[1:]), uniform.per_day
    for w in found.values():
        s = w.exposure
        assert s.mean == pytest.approx(sum(s.per_day) / 7) and s.low == min(s.per_day) and s.high == max(s.per_day)
        assert s.interval_90[0] <= s.mean <= s.interval_90[1]
        assert w.prediction is not None and w.prediction_interval_90 is not None
        assert w.prediction_interval_90[0] <= w.prediction <= w.prediction_interval_90[1] + 1
        assert [d.anchor for d in w.days] == window.anchors
    day = D("2024-04-24")
    asked = [t for t in reanchor(tasks, day) if resolver.gold(t.template_id, t.params, anchor=day) is not None]
    for policy in ("tiered", "uniform:8"):
        vintage = served_vintage(registry, D28, day, parse_policy(policy))
        single = run_exposure(records, asked, anchor=day, t_prime=D28, vintage=vintage, start=START,
                              resolver=resolver, rates=rates)
        assert found[policy].days[3].run.exposure == single.exposure
        assert found[policy].days[3].run.prediction == pytest.approx(single.prediction)
    mean, interval = window_prediction(found["off"].days, rates, D28)
    assert mean == found["off"].prediction and interval == found["off"].prediction_interval_90


def test_the_exposure_command_averages_over_a_window(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    generate_ledger(load_config(days=30), ledger)
    args = ["exposure", "--ledger", str(ledger), "--at", "2024-01-30", "--t-prime", "2024-01-20", "--policy",
            "tiered", "--policy", "uniform:4"]
    out = CliRunner().invoke(main, [*args, "--window", "5", "-v"])
    assert out.exit_code == 0, out.output
    assert "T over 2024-01-26 .. 2024-01-30 (5 days, gaps 6-10)" in out.output
    assert out.output.count("per day: ") == 2 and "uniform4-" in out.output
    assert f"prediction mean [{WINDOW_INTERVAL_LABEL}]" in out.output  # the forecast's label carries its coverage
    refused = CliRunner().invoke(main, [*args, "--window", "12"])
    assert refused.exit_code != 0 and "before the cache build day T' = 2024-01-20" in refused.output


def test_the_papers_window_rows(world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    """`churnbench paper`'s D+28 window (exposure only, tiered and off, 28 days ending at T, T' = 2024-03-29) as
    its JSON and its printed rows carry it; the figures are those of `policy_windows` on the same task set."""
    from churn_assets.commands.run import window_lines
    from churn_assets.evaluation.paper_window import WINDOWS_DIRNAME, paper_window_figures

    world_dir = tmp_path_factory.mktemp("paper-window-world")
    ledger_dir = default_world_dir(tmp_path_factory)

    def kept_or_computed() -> tuple[dict[str, Any], bool]:  # the packaged deployment's 180 tasks, seed 0
        return paper_window_figures(ledger_dir, world_dir, "default-s42-2906f8", task_count=180, task_seed=0)

    window, kept = kept_or_computed()
    assert not kept
    assert (window["t_prime"], window["first"], window["t"], window["days"]) == \
        ("2024-03-29", "2024-03-31", "2024-04-27", 28)
    tiered, off = window["policies"]["tiered"], window["policies"]["off"]
    assert len(tiered["per_day"]) == 28 and tiered["per_day"][-1] == 29 and off["per_day"][-1] == 59  # the 2x2's
    assert tiered["min"] < tiered["mean"] < tiered["max"] and off["mean"] > 2 * tiered["mean"]
    lines = window_lines(window)
    assert "28 arrival days (2024-03-31 .. 2024-04-27, T' = 2024-03-29" in lines[0]
    assert lines[2].startswith("tiering on") and f"{tiered['mean']:.1f} [" in lines[2]
    assert lines[3].startswith("tiering off") and f"{off['min']}-{off['max']}" in lines[3]

    # Kept in the world's folder: a second paper reads them; a file that names another key, or does not parse, is
    # computed again (and replaced).
    assert kept_or_computed() == (window, True)
    [kept_file] = (world_dir / WINDOWS_DIRNAME).iterdir()
    for broken in ('{"key": "another", "figures": {}}', "{not json"):
        kept_file.write_text(broken)
        assert kept_or_computed() == (window, False)


def _days(exposed: list[list[tuple[str, bool]]]) -> list[Any]:
    """Days of a window from (template, exposed) per task."""
    from churn_assets.evaluation.exposure import RunExposure, TaskExposure
    from churn_assets.evaluation.window import DayExposure

    out = []
    for i, tasks in enumerate(exposed):
        day = T - dt.timedelta(days=len(exposed) - 1 - i)
        runs = tuple(TaskExposure(f"q{j}", tid, 1, 0, 0, hit, 0.0) for j, (tid, hit) in enumerate(tasks))
        out.append(DayExposure(day, RunExposure(day, D28, {}, runs), ()))
    return out


def test_a_paired_difference_is_narrower_than_the_two_intervals() -> None:
    from churn_assets.evaluation.window import paired_difference, window_summary

    # b is exposed on every task a is, plus one more task of each template every day: -3 every day, -1 a template.
    base = [[("x", i % 2 == 0), ("y", i % 3 == 0), ("z", i % 4 == 0), ("x", False), ("y", False), ("z", False)]
            for i in range(12)]
    more = [[*day[:3], ("x", True), ("y", True), ("z", True)] for day in base]
    a, b = _days(base), _days(more)
    d = paired_difference(a, b)
    assert d.per_day == (-3.0,) * 12 and d.interval_90 == (-3.0, -3.0)  # the common variation cancels
    sa, sb = window_summary(a), window_summary(b)
    assert sb.mean - sa.mean == pytest.approx(3.0) and sa.interval_90[1] - sa.interval_90[0] > 1
    # A difference carried by one template is as uncertain as that template's share of the clusters.
    one = paired_difference(a, _days([[*day[:3], ("x", True), *day[4:]] for day in base]))
    assert one.mean == -1.0 and one.interval_90[0] < -1.0 < one.interval_90[1] + 1e-9
    with pytest.raises(WindowError, match="same window"):
        paired_difference(a, b[1:])


def test_the_kept_window_s_key_moves_with_everything_its_figures_depend_on() -> None:
    from churn_assets.evaluation.paper_window import window_key

    records, registry = [{"seq": 0, "at": "2024-01-01", "hash": "h0"}], load_registry()
    w = Window(D28, 28, T)
    base = window_key(records, 2, registry, 180, 0, w, ("tiered", "off"), "git-a")
    others = [window_key([{**records[0], "hash": "h1"}], 2, registry, 180, 0, w, ("tiered", "off"), "git-a"),
              window_key(records, 1, registry, 180, 0, w, ("tiered", "off"), "git-a"),
              window_key(records, 2, registry, 60, 0, w, ("tiered", "off"), "git-a"),
              window_key(records, 2, registry, 180, 1, w, ("tiered", "off"), "git-a"),
              window_key(records, 2, registry, 180, 0, Window(D28, 27, T), ("tiered", "off"), "git-a"),
              window_key(records, 2, registry, 180, 0, w, ("tiered",), "git-a"),
              window_key(records, 2, registry, 180, 0, w, ("tiered", "off"), "git-b")]
    assert base not in others and len(set(others)) == len(others)


class _OneDayMissed(AnswerChangeRates):
    """Every task misses exactly the day it is asked (offset 0), of one class: the seam `window_interval` reads."""

    def missed_days(self, task: Any, vintage: Any, anchor: dt.date) -> dict[str, tuple[int, int]]:
        return {"c": (0, 0)}


def test_resampling_the_history_widens_the_window_interval_by_the_rates_uncertainty() -> None:
    """Day i of a 30-day history moves the answers of tasks 0 .. i-1, so a window day's count is uniform over
    0-29. Drawing the window's 28 days from the history gives the mean a spread of about sd / sqrt(28); first
    resampling the history adds the uncertainty of a 30-day past, about sd * sqrt(1/28 + 1/30): some 1.4 times
    wider. A history whose days are all alike leaves nothing to resample."""
    from types import SimpleNamespace

    t_prime = START + dt.timedelta(days=30)
    history = [START + dt.timedelta(days=i + 1) for i in range(30)]
    tasks = [SimpleNamespace(task_id=f"q{k}") for k in range(30)]
    rows = [(t_prime + dt.timedelta(days=j + 1), tasks, {}, set()) for j in range(28)]
    rates = _OneDayMissed(START, t_prime, {(f"q{k}", "c"): [d for i, d in enumerate(history) if k < i]
                                           for k in range(30)})
    lo, hi = rates.window_interval(rows, t_prime, 28)
    assert (lo, hi) == rates.window_interval(rows, t_prime, 28, resample_history=False)
    wide_lo, wide_hi = rates.window_interval(rows, t_prime, 28, resample_history=True)
    assert wide_lo < lo < 14.5 < hi < wide_hi and (wide_hi - wide_lo) > 1.2 * (hi - lo), (lo, hi, wide_lo, wide_hi)
    alike = _OneDayMissed(START, t_prime, {(f"q{k}", "c"): history for k in range(30)})
    assert alike.window_interval(rows, t_prime, 28, resample_history=True) == (30.0, 30.0)
