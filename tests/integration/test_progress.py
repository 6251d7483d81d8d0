"""`paper`'s progress path prints, while a long step works, lines naming the step's world and day.

`paper` cannot run here: its T (2024-04-27) and D+28 T' are fixed in the default world's 180-day calendar, and
a 30-day world ends on 2024-01-30 (it is refused before anything runs). This test goes through the function
`paper` calls, `orchestration/cells.run_cells`, with one classic-RAG cell of a 30-day world of its own and 20
tasks (docs/rules.md, "Test budget"), so that the cell's vector index and RAG corpus days are built here: both
steps write their `progress.Tally` lines on stderr (what a terminal or a log shows while they work), and the
cell pool's own lines (paper's echo) name every input built with its world and day. The dbt build's lines are
checked by tests/integration/test_dbt.py on the build it makes anyway.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest

from churn_assets.deployment import TaskSettings
from churn_assets.orchestration.cells import Cell, run_cells
from churn_assets.orchestration.materialize import Session
from churn_assets.orchestration.world_registry import add_world
from churn_assets.world.config import load_config

pytestmark = pytest.mark.integration

WORLD_NAME, DAYS, TASKS = "progress", 30, 20  # a world of its own: its index days are built by this test
T, T_PRIME = dt.date(2024, 1, 30), dt.date(2024, 1, 29)


def test_a_cells_steps_print_progress_naming_world_and_day(session: Session, capfd: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import churn_assets.orchestration.assets.tasks as task_asset

    monkeypatch.setattr(task_asset, "task_settings", lambda: TaskSettings(count=TASKS, seed=0))
    config = load_config(days=DAYS, name=WORLD_NAME)
    add_world(session.paths, session.instance, config)
    world = config.world_id
    echoed: list[str] = []
    capfd.readouterr()
    [result] = run_cells(session.paths, [Cell(world, "classic_rag", "tiered", T_PRIME, T)], workers=1,
                         progress=echoed.append)
    assert result.ok, result.error
    printed = [line.strip() for line in capfd.readouterr().err.splitlines()]

    for what, unit in (("vector_index", "new chunks embedded"), ("rag_index", "new records embedded")):
        label = f"{what} [{world} {T_PRIME}]"
        lines = [line for line in printed if line.startswith(f"{label}: ")]
        assert lines, f"no progress line of {label} in:\n" + "\n".join(printed)
        first = re.fullmatch(rf"{re.escape(label)}: 0/(\d+) {unit}", lines[0])
        last = re.fullmatch(rf"{re.escape(label)}: (\d+)/(\d+) {unit} in \d+\.\d s", lines[-1])
        assert first and last, lines
        total = int(first[1])
        assert total > 0 and int(last[1]) == int(last[2]) == total  # a fresh world embeds something, all of it
        for middle in lines[1:-1]:  # throttled lines in between (a slow machine): counts and elapsed seconds
            assert re.fullmatch(rf"{re.escape(label)}: \d+/{total} {unit}, \d+ s", middle), middle
        # paper's own line for the step (the cell pool's echo) names the world and day too
        assert any(re.fullmatch(rf"input \[\d+/\d+\] {re.escape(label)}: \d+\.\d s", e.strip()) for e in echoed), \
            echoed
