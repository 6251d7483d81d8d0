"""`progress.Tally`: the first line, then at most one line per interval however many items end, and the last line
with the elapsed time (a fake clock: no sleeping)."""

from __future__ import annotations

import datetime as dt

from churn_assets.progress import Tally, partition_label


def test_a_tally_prints_the_first_line_throttled_counts_and_the_last() -> None:
    now = [100.0]
    lines: list[str] = []
    tally = Tally(partition_label("vector_index", "w-s1-abcdef", dt.date(2024, 1, 29)), 1000, "chunks", lines.append,
                  every_s=10.0, clock=lambda: now[0])
    for _ in range(1000):  # one item every 1/16 s (exact in binary): 62.5 s in all
        now[0] += 0.0625
        tally.advance()
    tally.finish()
    assert lines[0] == "vector_index [w-s1-abcdef 2024-01-29]: 0/1000 chunks"
    assert lines[1:-1] == [f"vector_index [w-s1-abcdef 2024-01-29]: {n}/1000 chunks, {s} s"
                           for n, s in ((160, 10), (320, 20), (480, 30), (640, 40), (800, 50), (960, 60))]
    assert lines[-1] == "vector_index [w-s1-abcdef 2024-01-29]: 1000/1000 chunks in 62.5 s"


def test_a_world_partition_is_labelled_by_its_world_alone() -> None:
    assert partition_label("analytics_dbt", "w-s1-abcdef") == "analytics_dbt [w-s1-abcdef]"


def test_work_done_in_one_step_gets_the_last_line_only() -> None:
    now = [0.0]
    lines: list[str] = []
    tally = Tally("dbt build [w]", 3, "models", lines.append, clock=lambda: now[0])
    now[0] = 60.0
    tally.advance(3)
    tally.finish()
    assert lines == ["dbt build [w]: 0/3 models", "dbt build [w]: 3/3 models in 60.0 s"]
