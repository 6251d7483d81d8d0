"""`verify-results --replay`: answer a deterministic run's tasks again and compare every row with the stored one.

The arm is made again from the scenario's stored plan, on the stores as they are now; each task is answered
again, which re-reads every read at its planned (= observed) day through the same readers, each checking the
content hash its store recorded (a staged partition, an operational database, the SaaS API's responses, the
documents, the warehouse's verified content); the row is scored again (`runner.score_answer`) and compared with the
stored row field by field, traces included (store, table, observed day and hash, rows of every read). A field that
differs is a disagreement naming the task; a read the stores refuse (its content changed, its partition is gone)
is one too. Only for the deterministic agent: a model's answers are not expected to repeat.

What it proves: the stored answers are the answers the arm gives on the stores as they are, read at the days the
traces say. What it does not: that the stores were right (the other modes and the build checks look at that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.results import canonical
from churn_assets.evaluation.runner import ArmLike, score_answer
from churn_assets.evaluation.verify import Disagreement
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task

# What a replayed row is compared on: everything the answer and its scoring wrote.
COMPARED = ("answer", "answer_text", "verdict", "served_vintage", "gold_served", "traces", "routes", "cost_units",
            "parse_error", "transport_error")


def replay_rows(arm: ArmLike, tasks: Sequence[Task], rows: Sequence[Mapping[str, Any]],
                resolver: GoldResolver) -> list[Disagreement]:
    """Answer each row's task again through `arm` and compare; rows of tasks outside `tasks` are left to the plain
    check (it reports them)."""
    by_id = {t.task_id: t for t in tasks}
    prepare = getattr(arm, "prepare", None)
    if callable(prepare):
        prepare(list(tasks))
    planned = dict(arm.planned_vintage)
    out: list[Disagreement] = []
    for row in rows:
        task = by_id.get(str(row.get("task_id")))
        if task is None:
            continue
        try:
            answer = arm.answer(task)
        except UserFacingError as e:
            out.append(Disagreement(task.task_id, "replay", None, None, message=f"cannot be answered again: {e}"))
            continue
        again = score_answer(resolver, task, answer, planned, row.get("exposed"))
        for field in COMPARED:
            if canonical(row.get(field)) != canonical(again.get(field)):
                out.append(Disagreement(task.task_id, f"{field} (answered again)", row.get(field), again.get(field)))
    return out
