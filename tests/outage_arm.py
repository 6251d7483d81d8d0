"""An arm at the arm seam whose source is down for some tasks: it answers gold under its planned vintage, and
a transport failure (what `arms.base.Arm.answer` returns when a source kept refusing) for the tasks in `down`.
For tests of `--retry-transport` (the runner, the catalog, the CLI)."""

from __future__ import annotations

import datetime as dt

from scripted_answer import ScriptedAnswer

from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task


class OutageArm:
    def __init__(self, resolver: GoldResolver, planned: dict[str, dt.date], down: set[str], name: str = "g") -> None:
        self.name, self.resolver, self._planned, self.down = name, resolver, planned, down
        self.asked: list[str] = []

    @property
    def planned_vintage(self) -> dict[str, dt.date]:
        return dict(self._planned)

    def answer(self, task: Task) -> ScriptedAnswer:
        self.asked.append(task.task_id)
        if task.task_id in self.down:
            return ScriptedAnswer(task.task_id, None, "unknown", {}, transport_error="GET /x failed after 7 attempts")
        anchor = dt.date.fromisoformat(task.anchor)
        value = self.resolver.gold(task.template, task.params, anchor=anchor, vintage=self._planned)
        return ScriptedAnswer(task.task_id, value, str(value), {c: self._planned[c] for c in task.template.classes})
