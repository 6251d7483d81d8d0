"""Tests that evaluate a small task set in their own process: the deployment's task count set for the whole process.

Every reader of the task settings (the `task_set` asset that draws the set, the input check and the finished-run
lookup that compare its recorded count and seed with the deployment's, a sweep's planner) calls
`deployment.task_settings()`, which reads `deployment.deployment()`: replacing that one function gives all of them
the same settings, where patching each module's imported name would miss the next reader added.
"""

from __future__ import annotations

import dataclasses

import pytest

import churn_assets.deployment as deployment_module
from churn_assets.deployment import TaskSettings


def use_task_count(monkeypatch: pytest.MonkeyPatch, count: int, seed: int = 0,
                   per_template: int | None = None) -> TaskSettings:
    """Make this process's deployment ask for `count` tasks drawn with `seed` (or `per_template` tasks of each
    template) (undone with `monkeypatch`)."""
    small = TaskSettings(count=count, seed=seed, per_template=per_template)
    config = dataclasses.replace(deployment_module.deployment(), tasks=small)
    monkeypatch.setattr(deployment_module, "deployment", lambda: config)
    return small
