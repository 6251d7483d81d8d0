"""bench/compare_cells.py: equal cells pass, a changed figure or no common cell fails; timing fields are ignored."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_cells", ROOT / "bench" / "compare_cells.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(state: Path, folder: str, **summary: object) -> None:
    path = state / "results" / "w" / "grounding__tiered__tp20240401__t20240427" / folder
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"experiment_hash": "abc", **summary}))


def test_equal_cells_pass_and_a_changed_figure_fails(tmp_path: Path) -> None:
    compare = _script()
    a, b = tmp_path / "a", tmp_path / "b"
    _cell(a, "abc__git-1", stale_answers=3, exposure=4, mean_latency_ms=10.0, code_version="git-1")
    _cell(b, "abc__git-2", stale_answers=3, exposure=4, mean_latency_ms=99.0, code_version="git-2")
    _cell(b, "abc__git-2__rep1", stale_answers=9, exposure=4)  # a repeat's folder is not the cell's first answering
    assert compare.main([str(a), str(b), "--world", "w"]) == 0
    (b / "results" / "w" / "grounding__tiered__tp20240401__t20240427" / "abc__git-2" / "summary.json").write_text(
        json.dumps({"experiment_hash": "abc", "stale_answers": 4, "exposure": 4}))
    assert compare.main([str(a), str(b), "--world", "w"]) == 1
    assert compare.main([str(a), str(tmp_path / "empty"), "--world", "w"]) == 1  # nothing in common proves nothing
