"""bench/llm_conditional.py: conditional staleness counts only the answers that used the deterministic agent's
call and its value; the paired difference is over the same tasks."""

from __future__ import annotations

from typing import Any

from bench_scripts import load_bench_script

QUESTION = "How many licenses of product prd_0001 are held by active users?"  # t2_license_holders_product
CALL = "licenses_held_by_active_users(product=prd_0001)"


def row(task: str, verdict: str, answer: Any, calls: list[tuple[str, Any]], exposed: bool = True) -> dict[str, Any]:
    return {"task_id": task, "template": "t2_license_holders_product", "question_text": QUESTION,
            "verdict": verdict, "answer": answer, "answer_text": str(answer), "exposed": exposed,
            "measure_calls": len(calls), "measures_called": [{"call": c, "value": v} for c, v in calls],
            "grounded": True, "copied_example": False, "usage": {"input_tokens": 900, "seconds": 2.0}}


def test_conditional_staleness_counts_the_right_call_and_its_value_only() -> None:
    bench = load_bench_script("llm_conditional")
    assert bench.deterministic_call(QUESTION) == CALL
    rows = [row("q1", "freshness_error", 3, [(CALL, 3)]),  # the call, its value, stale
            row("q2", "correct", 2, [(CALL, 2)], exposed=False),  # the call, its value
            row("q3", "reasoning_error", 5, [(CALL, 2)]),  # the call, another value
            row("q4", "reasoning_error", 7, [("list_price(product=prd_0001)", 7)]),  # another call
            row("q5", "parse_failure", None, [])]
    assert [bench.chose_and_used(r) for r in rows] == [(True, True), (True, True), (True, False), (False, False),
                                                       (False, False)]
    f = bench.cell_figures([rows])
    assert (f["conditional_answers"], f["conditional_stale"], f["conditional_exposed"]) == (2, 1, 1)
    assert (f["correct"], f["stale"], f["chose_the_deterministic_call"], f["with_a_measure_call"]) == (1, 1, 3, 4)


def test_the_paired_difference_is_over_the_same_tasks() -> None:
    bench = load_bench_script("llm_conditional")
    a = [[row("q1", "correct", 2, []), row("q2", "correct", 2, [])]]
    b = [[row("q1", "reasoning_error", 1, []), row("q2", "correct", 2, [])]]
    mean, (lo, hi) = bench.paired_difference(a, b)
    assert mean == 0.5 and lo <= mean <= hi


def test_folders_of_two_experiments_do_not_make_one_cell(tmp_path: Any) -> None:
    import pytest

    bench = load_bench_script("llm_conditional")
    a, b = tmp_path / "w" / "s" / "aaaa__git-1", tmp_path / "w" / "s" / "bbbb__git-1__rep1"
    with pytest.raises(SystemExit, match="of 2 experiments"):
        bench.read_cell(a, b)
