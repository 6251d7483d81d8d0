"""bench/window_interval_reach.py: the scale whose interval holds 90% of the other seeds' windows, what it holds on
the named seeds, the three centres (published, pooled, no model error) and a missing pooled window refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from bench_scripts import load_bench_script

FIELDS = ["seed", "first_gap", "policy", "predicted", "interval_lo", "interval_hi", "moved", "measured"]


def _files(tmp_path: Path, seeds: tuple[int, ...], *, moved: float | None = None, pooled_shift: float = 0.0,
           leave_out: int | None = None) -> tuple[list[Path], Path]:
    """Ten windows per seed and policy, each predicted 10 with the interval [7.5, 12.5] (half-widths 2.5), measured
    10.5, 11.0, ..., 15.0 (0.5 to 5.0 above the centre); `moved`: M of every window (None: M = measured); the pooled
    centre `pooled_shift` above the plug-in; `leave_out`: a seed with no pooled row."""
    rows_path, pooled_path = tmp_path / "rows.csv", tmp_path / "pooled.csv"
    with rows_path.open("w", newline="") as fr, pooled_path.open("w", newline="") as fp:
        rows = csv.DictWriter(fr, fieldnames=FIELDS)
        pooled = csv.DictWriter(fp, fieldnames=["seed", "first_gap", "policy", "plug_in", "pooled"])
        rows.writeheader()
        pooled.writeheader()
        for seed in seeds:
            for policy in ("tiered", "off"):
                for gap in range(1, 11):
                    measured = 10.0 + 0.5 * gap
                    rows.writerow({"seed": seed, "first_gap": gap, "policy": policy, "predicted": 10.0,
                                   "interval_lo": 7.5, "interval_hi": 12.5,
                                   "moved": measured if moved is None else moved, "measured": measured})
                    if seed != leave_out:
                        pooled.writerow({"seed": seed, "first_gap": gap, "policy": policy, "plug_in": 10.0,
                                         "pooled": 10.0 + pooled_shift})
    return [rows_path], pooled_path


def _load(tmp_path: Path, **kw):  # type: ignore[no-untyped-def]
    reach = load_bench_script("window_interval_reach")
    paths, pooled = _files(tmp_path, (42, 1), **kw)
    rows = reach.read_rows(paths)
    return reach, rows, reach.read_moved(paths), reach.read_pooled(pooled)


def _by(table: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["centre"], r["policy"]): r for r in table}


def test_the_scale_is_the_smallest_holding_90_percent_of_the_other_seeds(tmp_path: Path) -> None:
    reach, rows, moved, shifts = _load(tmp_path)
    by = _by(reach.reach(rows, moved, shifts, named=(42,)))
    # 9 of 10 windows inside needs the 9th distance, 4.5 = 1.8 x 2.5; x1.79 holds 8.
    assert by[("published", "tiered")]["scale for 90% of others"] == "x1.80"
    assert by[("published", "tiered")]["named there"] == "9/10"
    assert by[("published", "tiered")]["mean width there"] == 9.0
    assert by[("published", "tiered")]["named at x1"] == "5/10"  # 10.5 .. 12.5: 0.5 to 2.5 above the centre
    assert by[("published", "both")]["named there"] == "18/20 (90%)"
    windows = reach.cells(rows, moved, shifts, "published")
    assert reach.held(windows, 1.79) == (32, 40) and reach.held(windows, 1.8) == (36, 40)


def test_the_pooled_centre_moves_the_interval_and_the_oracle_reads_moved(tmp_path: Path) -> None:
    reach, rows, moved, shifts = _load(tmp_path, moved=10.0, pooled_shift=5.0)
    by = _by(reach.reach(rows, moved, shifts, named=(42,)))
    # Centre 15: measured 4.5, 4.0, ..., 0 below it; 9 of 10 need 4.0 = 1.6 x 2.5.
    assert by[("pooled", "off")]["scale for 90% of others"] == "x1.60"
    # The oracle's value is M = 10, 5 below the pooled centre 15 in every window: x2.00 holds all of them.
    assert by[("pooled_no_model_error", "off")]["scale for 90% of others"] == "x2.00"
    assert by[("pooled_no_model_error", "both")]["named there"] == "20/20 (100%)"


def test_one_scale_for_the_named_seeds_reports_what_it_holds_on_the_others(tmp_path: Path) -> None:
    reach, rows, moved, shifts = _load(tmp_path)
    # 80% of the named windows need the 8th distance, 4.0 = 1.6 x 2.5; the other seed holds the same 16 of 20.
    assert reach.one_scale_for(rows, moved, shifts, "published", 0.8, named=(42,)) == (1.6, (16, 20))


def test_a_window_without_a_pooled_centre_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reach = load_bench_script("window_interval_reach")
    paths, pooled = _files(tmp_path, (42, 1), leave_out=1)
    with pytest.raises(SystemExit, match="no pooled centre for 20 window"):
        reach.main([str(p) for p in paths] + ["--pooled", str(pooled)])
    paths, pooled = _files(tmp_path, (42, 1))
    assert reach.main([str(p) for p in paths] + ["--pooled", str(pooled)]) == 0
    assert "| published | tiered | 5/10 | 5/10 | x1.80 | 9.0 | 9/10 |" in capsys.readouterr().out
