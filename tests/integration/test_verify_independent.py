"""`churnbench verify-results --independent` on the CI world: a run is confirmed by the SQL gold over the truth
schema; a run scored by a Python gold with a planted bug passes the plain mode (it recomputes gold with the same
code) and fails the independent one, naming every task of the template; a truth schema that holds another ledger
head is refused in one line. The results folder is written by the real runner with a scripted arm that answers
gold under its planned vintage (`off` from T' = 2024-01-09 to T = 2024-01-27, days no other test uses)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from scripted_answer import ScriptedAnswer

from churn_assets.cli import main
from churn_assets.evaluation.exposure import run_exposure
from churn_assets.evaluation.results import ResultsStore
from churn_assets.evaluation.runner import RunSpec, evaluate
from churn_assets.fabric.postgres import connection
from churn_assets.fabric.truth import load_truth
from churn_assets.freshness.planning import served_vintage
from churn_assets.freshness.policies import Off
from churn_assets.freshness.scenario import Scenario
from churn_assets.grounding.registry import load_registry
from churn_assets.services import ServiceUrls
from churn_assets.state import StatePaths
from churn_assets.tasks import gold as python_gold_module
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task, task_set_hash, write_tasks
from churn_assets.world.config import load_config
from churn_assets.world.ledger import load_ledger

pytestmark = pytest.mark.integration

T, T_PRIME = dt.date(2024, 1, 27), dt.date(2024, 1, 9)
ARM = "grounding_no_freshness_tiers"


class PlannedArm:
    name = ARM

    def __init__(self, resolver: GoldResolver, planned: dict[str, dt.date]) -> None:
        self.resolver, self.planned_vintage = resolver, planned

    def answer(self, task: Task) -> ScriptedAnswer:
        value = self.resolver.gold(task.template, task.params, anchor=T, vintage=self.planned_vintage)
        return ScriptedAnswer(task.task_id, None, task.template.answer.format(value),
                              {c: self.planned_vintage[c] for c in task.template.classes})


@pytest.fixture(scope="module")
def world(services: ServiceUrls, small_world: str, state_paths: StatePaths) -> Iterator[str]:
    """The CI world in its truth schema, with a 40-task set at T written where verify-results looks for it."""
    loaded = load_ledger(state_paths.ledger_dir(small_world))
    with connection(services.warehouse) as conn:
        load_truth(conn, small_world, loaded)
    tasks = generate_task_set(loaded.records, world_id=small_world, anchor=T, n=40).tasks
    task_file = state_paths.task_set_file(small_world, T)
    task_file.parent.mkdir(parents=True, exist_ok=True)
    write_tasks(tasks, task_file)
    yield small_world
    task_file.unlink()


def _run(world: str, state_paths: StatePaths, out: Path, code: str) -> tuple[Path, list[Task]]:
    """A results folder scored (and answered) by whatever `tasks.gold` computes now."""
    from churn_assets.tasks.task_set import read_tasks

    records = load_ledger(state_paths.ledger_dir(world)).records
    resolver = GoldResolver(records)
    tasks = read_tasks(state_paths.task_set_file(world, T))
    planned = served_vintage(load_registry(), T_PRIME, T, Off())
    exposure = run_exposure(records, tasks, anchor=T, t_prime=T_PRIME, vintage=planned, resolver=resolver)
    store = ResultsStore(out)
    spec = RunSpec(Scenario(world, ARM, "off", T_PRIME, T), load_config(days=30).config_hash, task_set_hash(tasks))
    evaluate(PlannedArm(resolver, planned), tasks, resolver, store, spec, exposure=exposure, code=code)
    return store.run_dir(spec.key(code)), tasks


def _verify(*args: str) -> Any:
    return CliRunner().invoke(main, ["verify-results", *args], catch_exceptions=False)


def test_an_honest_run_is_confirmed_by_the_sql_gold(world: str, state_paths: StatePaths, tmp_path: Path) -> None:
    folder, tasks = _run(world, state_paths, tmp_path, "git-honest")
    got = _verify("--independent", str(folder))
    assert got.exit_code == 0, got.output
    # (a folder verified by its path, outside the catalog: the line also says nothing sealed it)
    assert f"{len(tasks)} rows confirmed (" in got.output
    assert "independent: stored, python and sql gold agree" in got.output


def test_a_bug_in_the_python_gold_passes_plain_and_fails_independent(world: str, state_paths: StatePaths,
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the independent mode exists: the plain mode recomputes gold with the code that scored the run, so a
    bug in that code confirms itself; the SQL gold does not share it."""
    from churn_assets.tasks.task_set import read_tasks

    tasks = read_tasks(state_paths.task_set_file(world, T))
    planted = next(t.template_id for t in tasks if t.template.answer.kind == "integer")
    right = python_gold_module.GOLD[planted]
    monkeypatch.setitem(python_gold_module.GOLD, planted,
                        lambda s, p, a: None if (v := right(s, p, a)) is None else v + 1)
    folder, tasks = _run(world, state_paths, tmp_path, "git-planted")

    plain = _verify(str(folder))
    assert plain.exit_code == 0, plain.output
    independent = _verify("--independent", str(folder))
    assert independent.exit_code == 1
    named = {t.task_id for t in tasks if t.template_id == planted}
    for tid in named:
        assert f"task {tid}: gold_at_t (stored vs sql gold)" in independent.output
        assert f"task {tid}: gold_at_t (python gold vs sql gold)" in independent.output
    others = {t.task_id for t in tasks} - named
    assert not [tid for tid in others if f"task {tid}:" in independent.output]
    assert "run(s) not confirmed" in independent.output


def test_a_truth_schema_of_another_ledger_is_refused(world: str, services: ServiceUrls) -> None:
    from churn_assets.commands.verify import _Golds, _sql_gold
    from churn_assets.errors import UserFacingError

    with connection(services.warehouse, autocommit=True) as conn:
        golds = _Golds(conn=conn, heads={world: "0" * 64})
        with pytest.raises(UserFacingError, match=f"the truth layer of world {world} holds ledger head"):
            _sql_gold(golds, world)
        golds.heads["default-s1-000000"] = None
        with pytest.raises(UserFacingError, match=r"has no truth layer .*churnbench project --world"):
            _sql_gold(golds, "default-s1-000000")
