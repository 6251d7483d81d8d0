"""bench/window_calibration_seeds.py: coverage per group of seeds, the three-seed draws reaching the target, and a
seed given twice refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from bench_scripts import load_bench_script

FIELDS = ["seed", "first_gap", "policy", "predicted", "interval_lo", "interval_hi", "moved", "measured"]


def _write(path: Path, seeds_inside: dict[int, bool]) -> Path:
    """Two windows per seed and policy: all inside the interval [8, 12], below the prediction 10, or all above it."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for seed, ok in seeds_inside.items():
            for policy in ("tiered", "off"):
                for gap in (1, 2):
                    w.writerow({"seed": seed, "first_gap": gap, "policy": policy, "predicted": 10.0,
                                "interval_lo": 8.0, "interval_hi": 12.0, "moved": 10.0,
                                "measured": 9.5 if ok else 15.0})
    return path


def test_a_three_seed_draw_reaches_the_target_only_without_a_seed_that_misses(tmp_path: Path) -> None:
    seeds = load_bench_script("window_calibration_seeds")
    rows = seeds.read_rows([_write(tmp_path / "a.csv", {1: True, 2: True, 3: True, 4: False})])
    # Four draws of three seeds; only {1, 2, 3} leaves out seed 4, whose windows all miss.
    assert seeds.draws_reaching(rows, 0.8) == (1, 4)
    # With the target at 2/3, a draw holding seed 4 (8 of 12 inside) reaches it as well.
    assert seeds.draws_reaching(rows, 2 / 3) == (4, 4)


def test_groups_split_the_named_seeds_from_the_others(tmp_path: Path) -> None:
    seeds = load_bench_script("window_calibration_seeds")
    rows = seeds.read_rows([_write(tmp_path / "a.csv", {42: False, 7: True, 1: True})])
    by = {(g["seeds"], g["policy"]): g for g in seeds.groups(rows, named=(42, 7, 11))}
    assert (by[("named", "both")]["inside"], by[("named", "both")]["windows"]) == (4, 8)
    assert by[("named", "tiered")]["seeds_under"] == 1  # seed 42: measured above predicted
    assert (by[("others", "off")]["inside"], by[("others", "off")]["windows"]) == (2, 2)
    assert by[("all", "both")]["share"] == 0.667


def test_a_seed_in_two_files_is_refused(tmp_path: Path) -> None:
    seeds = load_bench_script("window_calibration_seeds")
    with pytest.raises(SystemExit, match="seed 1 is also in"):
        seeds.read_rows([_write(tmp_path / "a.csv", {1: True}), _write(tmp_path / "b.csv", {1: True, 2: True})])
