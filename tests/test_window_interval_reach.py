"""bench/window_interval_reach.py: the scale whose interval holds 90% of the other seeds' windows, what it holds on
the named seeds, the three centres (published, pooled, no model error) and a missing pooled window refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from bench_scripts import load_bench_script

FIELDS = ["seed", "first_gap", "policy", "predicted", "interval_lo", "interval_hi", "moved", "measured"]


def _files(tmp_path: Path, *, moved: float | None = None, pooled_shift: float = 0.0, leave_out: int | None = None,
           twice: bool = False) -> tuple[list[Path], Path]:
    """Ten windows per policy of a named seed (42) and another seed (1), each predicted 10 with the asymmetric interval
    [8.0, 12.5] (half-widths 2.0 below, 2.5 above). Seed 42 measures 10.5, 11.0, ..., 15.0 (all above the centre),
    seed 1 measures 9.75, 9.5, ..., 7.5 (all below it). `moved`: M of every window (None: M = measured); the pooled
    centre `pooled_shift` above the plug-in; `leave_out`: a seed with no pooled row; `twice`: a pooled row repeated."""
    rows_path, pooled_path = tmp_path / "rows.csv", tmp_path / "pooled.csv"
    with rows_path.open("w", newline="") as fr, pooled_path.open("w", newline="") as fp:
        rows = csv.DictWriter(fr, fieldnames=FIELDS)
        pooled = csv.DictWriter(fp, fieldnames=["seed", "first_gap", "policy", "plug_in", "pooled", "interval_lo",
                                                "interval_hi", "measured"])
        rows.writeheader()
        pooled.writeheader()
        for seed, step in ((42, 0.5), (1, -0.25)):
            for policy in ("tiered", "off"):
                for gap in range(1, 11):
                    measured = 10.0 + step * gap
                    rows.writerow({"seed": seed, "first_gap": gap, "policy": policy, "predicted": 10.0,
                                   "interval_lo": 8.0, "interval_hi": 12.5,
                                   "moved": measured if moved is None else moved, "measured": measured})
                    if seed != leave_out:
                        for _ in range(2 if twice and gap == 1 else 1):
                            pooled.writerow({"seed": seed, "first_gap": gap, "policy": policy, "plug_in": 10.0,
                                             "pooled": 10.0 + pooled_shift, "interval_lo": 8.0,
                                             "interval_hi": 12.5, "measured": measured})
    return [rows_path], pooled_path


def _load(tmp_path: Path, **kw):  # type: ignore[no-untyped-def]
    reach = load_bench_script("window_interval_reach")
    paths, pooled = _files(tmp_path, **kw)
    return reach, reach.read_rows(paths), reach.read_pooled(pooled)


def _by(table: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["centre"], r["policy"]): r for r in table}


def test_the_scale_is_chosen_on_the_other_seeds_and_tested_on_the_named_ones(tmp_path: Path) -> None:
    reach, rows, shifts = _load(tmp_path)
    by = _by(reach.reach(rows, shifts, named=(42,)))
    row = by[("published", "tiered")]
    assert (row["named at x1"], row["others at x1"]) == ("5/10", "8/10")  # 0.5..2.5 above; 0.25..2.0 below
    # Seed 1's 9th window is 2.25 below the centre: x1.13 of the lower half-width 2.0 (x1.12 holds 8).
    assert row["scale for 90% of others"] == "x1.13"
    # At x1.13 the upper half-width is 2.825: seed 42's windows 0.5 .. 2.5 above are inside, 3.0 .. 5.0 are not.
    assert row["named there"] == "5/10"
    assert by[("published", "both")]["named there"] == "10/20 (50%)"
    others = [w for w in reach.cells(rows, shifts, "published") if w["seed"] == 1]
    assert reach.held(others, 1.12) == (16, 20) and reach.held(others, 1.13) == (18, 20)
    assert reach.mean_width(others, 1.13) == pytest.approx(1.13 * 4.5)


def test_the_pooled_centre_moves_the_interval_and_the_oracle_reads_moved(tmp_path: Path) -> None:
    reach, rows, shifts = _load(tmp_path, moved=12.0, pooled_shift=-1.0)
    by = _by(reach.reach(rows, shifts, named=(42,)))
    # Centre 9: seed 1's windows from 0.75 above to 1.5 below it; the 9th in scale is 1.25 below, x0.63 of 2.0.
    assert by[("pooled", "off")]["scale for 90% of others"] == "x0.63"
    # The oracle's value is M = 12, 3.0 above the pooled centre 9 in every window: x1.20 of 2.5 holds them all.
    assert by[("pooled_no_model_error", "off")]["scale for 90% of others"] == "x1.20"
    assert by[("pooled_no_model_error", "both")]["named there"] == "20/20 (100%)"


def test_one_scale_for_the_named_seeds_reports_what_it_holds_on_the_others(tmp_path: Path) -> None:
    reach, rows, shifts = _load(tmp_path)
    # 80% of the named windows need the 8th, 4.0 above = x1.6 of 2.5; seed 1's windows, at most 2.5 below, all hold.
    assert reach.one_scale_for(rows, shifts, "published", 0.8, named=(42,)) == (1.6, (20, 20))


def test_a_pooled_file_missing_or_repeating_a_window_is_refused(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    reach = load_bench_script("window_interval_reach")
    paths, pooled = _files(tmp_path, leave_out=1)
    with pytest.raises(SystemExit, match="no pooled centre for 20 window"):
        reach.main([str(p) for p in paths] + ["--pooled", str(pooled)])
    paths, pooled = _files(tmp_path, twice=True)
    with pytest.raises(SystemExit, match=r"the window \(42, 1, 'tiered'\) is given twice"):
        reach.main([str(p) for p in paths] + ["--pooled", str(pooled)])
    paths, pooled = _files(tmp_path)
    assert reach.main([str(p) for p in paths] + ["--pooled", str(pooled)]) == 0
    assert "| published | tiered | 5/10 | 8/10 | x1.13 | 5.1 | 5/10 |" in capsys.readouterr().out
