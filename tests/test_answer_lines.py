"""The lines an LLM run prints (issue 45): one per answer (n of N, verdict, seconds, ETA), and the result line,
which counts every verdict of the verdict enumeration."""

from __future__ import annotations

import logging

import pytest

from churn_assets.commands.experiment_lines import result_line, verdict_label
from churn_assets.evaluation.answer_lines import ANSWER_LOGGER, answer_line, answer_lines_to
from churn_assets.evaluation.verdicts import VERDICTS


def test_an_answer_line_names_its_place_verdict_seconds_and_eta() -> None:
    # 3 answers in 120 s: 40 s each, 9 left -> 6 min
    assert answer_line(3, 12, "reasoning_error", 41.24, 120.0) == (
        "answer 3 of 12: reasoning_error, 41.2 s; ETA 6 min 00 s")
    assert answer_line(1, 180, "correct", 0.5, 30.0) == "answer 1 of 180: correct, 0.5 s; ETA 1 h 29 min"
    assert answer_line(11, 12, "correct", 5.0, 44.0) == "answer 11 of 12: correct, 5.0 s; ETA 4 s"
    assert answer_line(12, 12, "budget_exhausted", None, 754.0) == (
        "answer 12 of 12: budget_exhausted, not timed; done in 12 min 34 s")


def test_a_resumed_run_estimates_from_the_answers_it_made() -> None:
    """Answers 1-10 came from a checkpoint (no time spent): the pace is that of the 2 answered now."""
    assert answer_line(12, 20, "correct", 30.0, 60.0, answered=2) == "answer 12 of 20: correct, 30.0 s; ETA 4 min 00 s"
    assert answer_line(5, 20, "correct", None, 0.0, answered=0) == "answer 5 of 20: correct, not timed; ETA unknown"


@pytest.mark.parametrize(("n", "total"), [(0, 3), (4, 3)])
def test_an_answer_outside_the_run_is_refused(n: int, total: int) -> None:
    with pytest.raises(ValueError, match="answer"):
        answer_line(n, total, "correct", 1.0, 1.0)


def test_answer_lines_reach_the_echo_only_while_inside() -> None:
    got: list[str] = []
    logger = logging.getLogger(ANSWER_LOGGER)
    with answer_lines_to(got.append):
        logger.info("answer 1 of 2: correct, 1.0 s; ETA 1 s")
    logger.info("answer 2 of 2: correct, 1.0 s; done in 2 s")
    assert got == ["answer 1 of 2: correct, 1.0 s; ETA 1 s"]


def test_the_result_line_counts_every_verdict() -> None:
    """`llm try` printed 9 of 10 answers: budget_exhausted had no field. Each verdict, given its own count, shows
    it under its own label."""
    counts = {v: 11 + i for i, v in enumerate(VERDICTS)}
    line = result_line({"verdicts": counts, "accuracy": 0.5, "exposure": 3, "prediction": 4})
    labels = [verdict_label(v) for v in VERDICTS]
    assert len(set(labels)) == len(VERDICTS)  # no two verdicts share a label
    for verdict, label in zip(VERDICTS, labels, strict=True):
        assert f"  {label} {counts[verdict]:3d}  " in line, verdict
    assert "budget  18" in line


def test_a_summary_from_before_a_verdict_existed_counts_it_zero() -> None:
    old = {v: 1 for v in VERDICTS if v != "budget_exhausted"}
    assert "budget   0" in result_line({"verdicts": old, "accuracy": 1.0, "exposure": 0, "prediction": 0})
