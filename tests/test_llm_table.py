"""bench/llm_table.py: a cell's row lays out its experiment summary (no figure of its own); a cell with fewer complete
repeats than asked is refused."""

from __future__ import annotations

from pathlib import Path

from bench_scripts import load_bench_script


def _summary() -> dict[str, object]:
    return {"repeats": 3, "tasks": 4, "accuracy_mean": 0.0833, "accuracy_interval_90": [0.0, 0.25],
            "stale_answers_per_repeat": [1, 0, 2], "pass_hat_k": {"3": 0.0}, "stable_tasks": 1,
            "verdict_totals": {"correct": 1, "freshness_error": 3, "reasoning_error": 8, "parse_failure": 0},
            "efficiency": {"tool_calls": {"median": 1, "p90": 4}, "input_tokens": {"median": 3289, "p90": 5000},
                           "output_tokens": {"median": 70, "p90": 90}, "seconds": {"median": 35.9, "p90": 107.5}},
            "staleness_awareness": {"applicable": True, "stated_equals_oldest_observed": 6, "answers": 12,
                                    "stated": 10},
            "grounding": {"measure_calls": 14, "answers_with_a_measure_call": 11, "judged": 12, "grounded": 5,
                          "copied_example": 2}}


def test_a_row_is_the_experiment_summary_laid_out(tmp_path: Path) -> None:
    table = load_bench_script("llm_table")
    row = table.row({"arm": "grounding", "policy_id": "tiered", "t_prime": "2024-03-29"}, _summary(), "1.8-7.9")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["grounding tiered, 2024-03-29", "8.3% [0.0%-25.0%]", "1, 0, 2", "0.0%", "1/4",
                     "6/12 (stated 10)", "1.0 (4.0)", "3,289 / 70", "35.9 (107.5)",
                     "1 correct, 3 freshness, 8 reasoning", "14 (11)", "5/12", "2", "1.8-7.9"]
    assert len(cells) == table.HEADER.count(" | ") + 1  # one cell per column
    old = table.row({"arm": "naive", "policy_id": "off", "t_prime": "2024-03-29"},
                    {k: v for k, v in _summary().items() if k != "grounding"})
    assert [c.strip() for c in old.strip("|").split("|")][-4:-1] == ["-", "-", "-"]  # a summary from before
    assert table.main([str(tmp_path / "nothing")]) == 1  # no complete repeat there
