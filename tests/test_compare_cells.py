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


def test_sweep_tables_compare_cell_by_cell(tmp_path: Path) -> None:
    compare = load_bench_script("compare_cells")
    head = "kind,status,world_id,arm,policy,t_prime,t,stale_answers,reused,results\n"
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text(head + "evaluated,done,w,grounding,tiered,2024-04-01,2024-04-27,3,False,/x\n")
    b.write_text(head + "evaluated,done,w,grounding,tiered,2024-04-01,2024-04-27,3,True,/y\n")
    assert compare.main([str(a), str(b)]) == 0  # where the cell is and whether it was reused are not figures
    b.write_text(head + "evaluated,done,w,grounding,tiered,2024-04-01,2024-04-27,4,True,/y\n")
    assert compare.main([str(a), str(b)]) == 1
