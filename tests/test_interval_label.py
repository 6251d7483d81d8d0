"""The window predictor's interval is labelled with the coverage it was measured to have (issue 46, item 6): one
constant, recounted here from the committed per-window rows and compared with docs/tasks.md's table and text."""

from __future__ import annotations

import re
from pathlib import Path

from bench_scripts import load_bench_script

from churn_assets.evaluation.window import LEVEL, WINDOW_INTERVAL_COVERAGE, WINDOW_INTERVAL_LABEL

ROOT = Path(__file__).resolve().parents[1]


def test_the_constant_is_what_the_committed_rows_give() -> None:
    seeds = load_bench_script("window_calibration_seeds")
    rows = seeds.read_rows([ROOT / "docs" / "figures" / "predictor_window_seeds.csv"])
    named = set(load_bench_script("calibrate_predictor").DEFAULT_SEEDS)
    others = [r for r in rows if r["seed"] not in named]
    held, windows = seeds.coverage(others)
    assert (held, windows, len({r["seed"] for r in others})) == (
        WINDOW_INTERVAL_COVERAGE.held, WINDOW_INTERVAL_COVERAGE.windows, WINDOW_INTERVAL_COVERAGE.seeds)


def test_the_label_and_docs_tasks_say_the_same() -> None:
    c = WINDOW_INTERVAL_COVERAGE
    expected = f"{round(100 * LEVEL)}% interval (measured coverage {c.percent}% over {c.seeds} seeds)"
    assert expected == WINDOW_INTERVAL_LABEL
    assert c.percent < round(100 * LEVEL)  # the reason for the label: if it held 90%, the plain label would do
    doc = (ROOT / "docs" / "tasks.md").read_text()
    row = re.search(r"^\| other (\d+) \| both \| ([\d,]+) \| \*\*([\d,]+) \((\d+)%\)\*\* \|", doc, re.M)
    assert row is not None, "docs/tasks.md no longer has the 'other seeds, both policies' row"
    assert (int(row[1]), int(row[2].replace(",", "")), int(row[3].replace(",", "")), int(row[4])) == (
        c.seeds, c.windows, c.held, c.percent)
    assert f"{c.percent}% of {c.windows:,} windows on {c.seeds} seeds" in doc
