"""bench/compare_cells.py: equal cells pass, a changed figure or no common cell fails; timing fields are ignored."""

from __future__ import annotations

import json
from pathlib import Path

from bench_scripts import load_bench_script


def _cell(state: Path, folder: str, **summary: object) -> None:
    path = state / "results" / "w" / "grounding__tiered__tp20240401__t20240427" / folder
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"experiment_hash": "abc", **summary}))


def test_equal_cells_pass_and_a_changed_figure_fails(tmp_path: Path) -> None:
    compare = load_bench_script("compare_cells")
    a, b = tmp_path / "a", tmp_path / "b"
    _cell(a, "abc__git-1", stale_answers=3, exposure=4, mean_latency_ms=10.0, code_version="git-1")
    _cell(b, "abc__git-2", stale_answers=3, exposure=4, mean_latency_ms=99.0, code_version="git-2")
    _cell(b, "abc__git-2__rep1", stale_answers=9, exposure=4)  # a repeat's folder is not the cell's first answering
    assert compare.main([str(a), str(b), "--world", "w"]) == 0
    (b / "results" / "w" / "grounding__tiered__tp20240401__t20240427" / "abc__git-2" / "summary.json").write_text(
        json.dumps({"experiment_hash": "abc", "stale_answers": 4, "exposure": 4}))
    assert compare.main([str(a), str(b), "--world", "w"]) == 1
    assert compare.main([str(a), str(tmp_path / "empty"), "--world", "w"]) == 1  # nothing in common proves nothing
