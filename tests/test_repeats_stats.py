"""The pure figures of issue 33 with known values: quantiles, pass^k / pass@k, the clustered bootstrap and
standard error, Student's t, the Wilson interval; efficiency and staleness awareness from result rows; the
experiment summary over repeats and the deterministic agent's repeat check; repeat folder names."""

from __future__ import annotations

import math
from typing import Any

import pytest

from churn_assets.evaluation.awareness import oldest_observed_day, staleness_awareness
from churn_assets.evaluation.efficiency import answer_efficiency, efficiency_summary, seconds_summary
from churn_assets.evaluation.repeats import RepeatMismatch, experiment_summary, read_repeats, repeat_disagreements
from churn_assets.evaluation.results import ResultsStore, RunKey, parse_folder_name
from churn_assets.evaluation.stats import (
    cluster_bootstrap_interval,
    cluster_standard_error,
    pass_at_k,
    pass_hat_k,
    quantile,
    spread,
    student_t_cdf,
    student_t_quantile,
    wilson_interval,
)

# ---------------------------------------------------------------------------------------------------
# stats
# ---------------------------------------------------------------------------------------------------


def test_quantiles_interpolate_between_order_statistics() -> None:
    assert quantile([4, 1, 3, 2], 0.5) == 2.5
    assert quantile(list(range(1, 11)), 0.9) == pytest.approx(9.1)  # numpy's default (type 7)
    assert quantile([7], 0.9) == 7
    assert spread([1, 2, 3, 4, 10]) == {"median": 3, "p90": 7.6, "total": 20, "n": 5}
    assert spread([]) is None  # absent, never 0
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_pass_hat_k_and_pass_at_k_are_tau_bench_and_chen_estimators() -> None:
    assert pass_hat_k(3, 3, 3) == 1.0 and pass_hat_k(2, 3, 3) == 0.0  # k = n: every repeat correct
    assert pass_hat_k(2, 3, 2) == pytest.approx(1 / 3)  # C(2,2) / C(3,2)
    assert pass_hat_k(2, 4, 1) == 0.5  # k = 1: the accuracy
    assert pass_at_k(1, 3, 2) == pytest.approx(2 / 3)  # 1 - C(2,2) / C(3,2)
    assert pass_at_k(0, 3, 3) == 0.0 and pass_at_k(1, 3, 3) == 1.0
    with pytest.raises(ValueError):
        pass_hat_k(4, 3, 2)


def test_the_clustered_standard_error_by_hand() -> None:
    values = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0}
    # mean 0.75; cluster sums of deviations: X = 0.25 - 0.75 = -0.5, Y = 0.25 + 0.25 = 0.5; G = 2
    assert cluster_standard_error(values, {"a": "X", "b": "X", "c": "Y", "d": "Y"}) == pytest.approx(0.25)
    assert cluster_standard_error(values, {t: "one" for t in values}) == 0.0  # one cluster: nothing measured


def test_the_cluster_bootstrap_resamples_templates() -> None:
    values = {f"{g}{i}": float(g == "a") for g in "abcd" for i in range(5)}  # template a right, others wrong
    clusters = {t: t[0] for t in values}
    lo, hi = cluster_bootstrap_interval(values, clusters)
    assert 0.0 <= lo < 0.25 < hi <= 1.0
    assert (lo, hi) == cluster_bootstrap_interval(values, clusters)  # seeded: reproducible
    assert cluster_bootstrap_interval({"x": 1.0, "y": 0.0}, {"x": "t", "y": "t"}) == (0.5, 0.5)
    # within-template noise only: resampling templates cannot move the mean
    flat = {f"{g}{i}": float(i % 2) for g in "abcd" for i in range(4)}
    assert cluster_bootstrap_interval(flat, {t: t[0] for t in flat}) == (0.5, 0.5)


def test_student_t_and_the_wilson_interval_known_values() -> None:
    assert student_t_quantile(0.95, 11) == pytest.approx(1.795885, abs=1e-6)
    assert student_t_quantile(0.95, 1) == pytest.approx(6.313752, abs=1e-6)
    assert student_t_quantile(0.975, 30) == pytest.approx(2.042272, abs=1e-6)
    assert student_t_cdf(0.0, 5) == 0.5 and student_t_cdf(-2.015048, 5) == pytest.approx(0.05, abs=1e-6)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.21296, abs=1e-4)
    lo, hi = wilson_interval(10, 200)
    assert lo < 0.05 < hi and hi == pytest.approx(0.0817, abs=1e-3)


# ---------------------------------------------------------------------------------------------------
# rows
# ---------------------------------------------------------------------------------------------------


def _read(cls: str | None, day: str) -> dict[str, Any]:
    return {"store": "staging", "entity_class": cls, "observed_day": day}


def row(task: str, verdict: str = "correct", answer: Any = 1, *, template: str = "t1", traces: Any = None,
        usage: dict[str, Any] | None = None, data_as_of: str | bool | None = False) -> dict[str, Any]:
    r: dict[str, Any] = {"task_id": task, "template": template, "verdict": verdict, "answer": answer,
                         "answer_text": str(answer), "traces": traces if traces is not None else []}
    if usage is not None:
        r["usage"] = usage
    if data_as_of is not False:
        r["data_as_of"] = data_as_of
    return r


TRACES = [{"route": "staged_sql", "reads": [_read("users", "2024-01-20"), _read("prices", "2024-01-03")]},
          {"route": "coordinator", "reads": []},
          {"route": "live_warehouse", "reads": [_read("licenses", "2024-01-30")]}]


def test_efficiency_counts_retrievals_for_the_deterministic_agent_and_usage_for_a_model() -> None:
    det = answer_efficiency(row("a", traces=TRACES))
    assert det == {"model_calls": None, "tool_calls": 2, "retrievals": 2, "input_tokens": None, "output_tokens": None}
    usage = {"calls": 3, "tool_calls": 4, "input_tokens": 900, "output_tokens": 60, "unreported_calls": 0}
    llm = answer_efficiency(row("b", traces=TRACES, usage=usage))
    assert llm == {"model_calls": 3, "tool_calls": 4, "retrievals": 2, "input_tokens": 900, "output_tokens": 60}
    unknown = answer_efficiency(row("c", usage={**usage, "unreported_calls": 1}))
    assert unknown["input_tokens"] is None and unknown["model_calls"] == 3  # never a 0 shown as tokens

    det_summary = efficiency_summary([row("a", traces=TRACES), row("b", traces=TRACES[:1])])
    assert det_summary["tool_calls"] == {"median": 1.5, "p90": 1.9, "total": 3, "n": 2}
    assert det_summary["model_calls"] is None and det_summary["input_tokens"] is None
    mixed = efficiency_summary([row("b", usage=usage), row("c", usage={**usage, "unreported_calls": 2})])
    assert mixed["input_tokens"]["n"] == 1 and mixed["tokens_unreported_answers"] == 1
    assert seconds_summary({"a": 1000.0, "b": 3000.0}) == {"median": 2.0, "p90": 2.8, "total": 4.0, "n": 2}
    assert seconds_summary({}) is None


def test_staleness_awareness_compares_the_stated_day_with_the_oldest_read() -> None:
    assert oldest_observed_day(row("a", traces=TRACES)).isoformat() == "2024-01-03"
    assert oldest_observed_day(row("a", traces=[{"route": "x", "data_times": {"users": "2024-01-05"}}])
                               ).isoformat() == "2024-01-05"  # a retrieval without reads: its data times
    assert oldest_observed_day(row("a")) is None
    rows = [row("a", traces=TRACES, data_as_of="2024-01-03"),  # equals the oldest read
            row("b", "freshness_error", traces=TRACES, data_as_of="2024-01-20"),  # stale, says it is old
            row("c", "mixed_vintage_error", traces=TRACES, data_as_of="2024-01-30"),  # stale, claims T
            row("d", "freshness_error", traces=TRACES),  # stale, states nothing
            row("e", traces=TRACES, data_as_of=None),  # null: not stated
            row("f", traces=TRACES, data_as_of="last week")]  # stated, not a day
    got = staleness_awareness(rows, "2024-01-30")
    assert got == {"answers": 6, "stated": 4, "stated_unreadable": 1, "stated_equals_oldest_observed": 1,
                   "share_equals_oldest": round(1 / 6, 4), "stale_answers": 3, "stale_revealed": 1,
                   "share_stale_revealed": round(1 / 3, 4), "applicable": True}
    none = staleness_awareness([row("a", traces=TRACES), row("b", "freshness_error")], "2024-01-30")
    assert none["applicable"] is False and none["share_equals_oldest"] is None
    assert none["share_stale_revealed"] is None and none["stale_answers"] == 1  # n/a, not 0%


# ---------------------------------------------------------------------------------------------------
# repeats
# ---------------------------------------------------------------------------------------------------

# Three tasks, three repeats: t1 right every time, t2 right once (answers differ), t3 never (always the same
# wrong answer). Templates: t1 and t2 of template A, t3 of template B.
REPEATS = [
    [row("t1", answer=5, template="A"), row("t2", answer=2, template="A"),
     row("t3", "reasoning_error", 9, template="B")],
    [row("t1", answer=5, template="A"), row("t2", "reasoning_error", 3, template="A"),
     row("t3", "reasoning_error", 9, template="B")],
    [row("t1", answer=5, template="A"), row("t2", "freshness_error", 4, template="A"),
     row("t3", "reasoning_error", 9, template="B")],
]


def test_the_experiment_summary_of_known_repeats() -> None:
    e = experiment_summary(REPEATS, [{"t1": 1000.0}, {}, {"t1": 3000.0}], t="2024-01-30",
                           identity={"experiment_hash": "abc"})
    assert e["experiment_hash"] == "abc" and (e["repeats"], e["tasks"]) == (3, 3)
    assert e["accuracy_per_repeat"] == [round(2 / 3, 4), round(1 / 3, 4), round(1 / 3, 4)]
    assert e["accuracy_mean"] == round((1 + 1 / 3 + 0) / 3, 4)
    # pass^3: only t1 right in every repeat; pass@3: t1 and t2 right at least once
    assert e["pass_hat_k"]["3"] == round(1 / 3, 4) and e["pass_at_k"]["3"] == round(2 / 3, 4)
    assert e["pass_hat_k"]["1"] == e["accuracy_mean"] == e["pass_at_k"]["1"]
    assert e["pass_hat_k"]["2"] == round((1 + 0 + 0) / 3, 4)  # t2: C(1,2) = 0
    assert e["stability"] == round(2 / 3, 4) and e["stable_tasks"] == 2  # t2's answers differ
    assert e["stale_answers_per_repeat"] == [0, 0, 1] and e["stale_answers_mean"] == round(1 / 3, 3)
    assert e["per_task"]["t2"]["verdicts"] == ["correct", "reasoning_error", "freshness_error"]
    assert e["per_task"]["t1"]["seconds"] == [1.0, None, 3.0] and e["efficiency"]["seconds"]["n"] == 2
    assert e["verdict_totals"]["correct"] == 4 and e["interval"]["templates"] == 2
    lo, hi = e["accuracy_interval_90"]
    assert lo <= e["accuracy_mean"] <= hi
    assert e["staleness_awareness"]["applicable"] is False
    with pytest.raises(ValueError):
        experiment_summary([REPEATS[0], REPEATS[1][::-1]], t="2024-01-30")  # not the same tasks in order


def test_one_repeat_is_an_ordinary_run() -> None:
    e = experiment_summary(REPEATS[:1], t="2024-01-30")
    assert e["repeats"] == 1 and e["pass_hat_k"] == {"1": e["accuracy_mean"]} and e["stability"] == 1.0


def test_the_deterministic_repeat_check_names_the_tasks_that_differ() -> None:
    assert repeat_disagreements([REPEATS[0], REPEATS[0]]) == []
    assert repeat_disagreements(REPEATS) == ["task t2: repeat 0: 2 ('2'), repeat 1: 3 ('3'), repeat 2: 4 ('4')"]


def test_a_repeat_folder_is_an_ordinary_results_folder(tmp_path: Any) -> None:
    key = RunKey("w", "scenario", "0123456789abcdef", "git-abc")
    assert key.repeated(2).folder_name == "0123456789abcdef__git-abc__rep2"
    assert key.repeated(2).retried(1).folder_name == "0123456789abcdef__git-abc__rep2__retry1"
    assert key.repeated(0) == key  # repeat 0 is the single run's folder: nothing moves at K = 1
    for name in ("0123456789abcdef__git-abc", "0123456789abcdef__git-abc__retry3",
                 "0123456789abcdef__git-abc__rep2", "0123456789abcdef__git-abc__rep2__retry1"):
        base, repeat, retry = parse_folder_name(name)
        assert base == "0123456789abcdef__git-abc" and name.endswith(f"rep{repeat}" * bool(repeat) + (
            f"__retry{retry}" if retry else ""))
    store = ResultsStore(tmp_path)
    for r, rows in enumerate(REPEATS):
        writer = store.open_run(key.repeated(r), {"x": 1})
        for x in rows:
            writer.append(x)
        writer.finish([x["task_id"] for x in rows], {"tasks": 3}, {"latency_ms_per_task": {}})
    assert store.retries(key) == [] and store.retries(key.repeated(1)) == []  # a repeat is not a retry
    assert [p.name for p in sorted((tmp_path / "w" / "scenario").iterdir())] == [
        "0123456789abcdef__git-abc", "0123456789abcdef__git-abc__rep1", "0123456789abcdef__git-abc__rep2"]
    keys = [key.repeated(r) for r in range(3)]
    assert read_repeats(store, keys, "2024-01-30", deterministic=False)["folders"][2].endswith("__rep2")
    with pytest.raises(RepeatMismatch, match="answered 1 task"):
        read_repeats(store, keys, "2024-01-30", deterministic=True)
    assert math.isclose(read_repeats(store, keys[:1], "2024-01-30", deterministic=True)["accuracy_mean"], 0.6667)


def test_the_grounding_summary_counts_measure_calls_and_judgements() -> None:
    from churn_assets.evaluation.repeats import grounding_summary

    rows = [{"measure_calls": 2, "grounded": True, "copied_example": False},
            {"measure_calls": 0, "grounded": False, "copied_example": True},
            {"grounded": None},  # not judged (a parse failure)
            {}]  # a row written before issue 45
    assert grounding_summary(rows) == {"measure_calls": 2, "answers_with_a_measure_call": 1, "judged": 2,
                                       "grounded": 1, "copied_example": 1}
