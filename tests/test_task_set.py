"""The default task set on the default world, its file and hash, the `churnbench tasks` command and the
`task_set` asset."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_exposure import default_world_dir

from churn_assets.grounding.registry import load_registry
from churn_assets.tasks.generator import GeneratedTaskSet, derive_seed, generate_task_set, tier_quotas
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.parser import parse_question
from churn_assets.tasks.task_set import (
    TASKS_FILE,
    TaskSetError,
    read_tasks,
    task_set_counts,
    task_set_hash,
    write_tasks,
)
from churn_assets.tasks.templates import TEMPLATES, TEMPLATES_BY_ID
from churn_assets.world.ledger import load_ledger

T = "2024-04-27"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[dict[str, Any]]]:
    path = default_world_dir(tmp_path_factory)
    loaded = load_ledger(path)
    assert loaded.manifest is not None
    return path, loaded.manifest.world_id, loaded.records


@pytest.fixture(scope="module")
def resolver(world: tuple[Path, str, list[dict[str, Any]]]) -> GoldResolver:
    return GoldResolver(world[2])


@pytest.fixture(scope="module")
def default_set(world: tuple[Path, str, list[dict[str, Any]]], resolver: GoldResolver) -> GeneratedTaskSet:
    return generate_task_set(world[2], world_id=world[1], anchor=T, resolver=resolver)


def test_default_set_has_180_unique_questions_split_81_63_36(default_set: GeneratedTaskSet) -> None:
    tasks = default_set.tasks
    assert len(tasks) == 180
    assert len({t.question_text for t in tasks}) == 180
    assert len({t.task_id for t in tasks}) == 180
    counts = task_set_counts(tasks)
    assert counts["task_tier"] == {"1": 81, "2": 63, "3": 36}
    # Intents close to the reference's 50 / 48 / 44 / 38.
    reference = {"spend_visibility": 50, "criticality": 48, "utilization": 44, "savings_opportunity": 38}
    for intent, n in reference.items():
        assert abs(counts["intent"][intent] - n) <= 6, counts["intent"]
    assert len(counts["template"]) == len(TEMPLATES_BY_ID)  # every template is asked


def test_every_measure_of_the_set_is_registered(default_set: GeneratedTaskSet) -> None:
    registry = load_registry()
    for task in default_set.tasks:
        decl = registry.measure(task.template.measure)
        assert set(task.template.classes) <= set(decl.reads)


def test_every_question_parses_back_to_its_task(default_set: GeneratedTaskSet) -> None:
    for task in default_set.tasks:
        parsed = parse_question(task.question_text)
        assert (parsed.template.template_id, parsed.params) == (task.template_id, task.params)


def test_answers_are_defined_and_degenerate_ones_capped(default_set: GeneratedTaskSet, resolver: GoldResolver) -> None:
    golds = default_set.gold_at_anchor
    assert all(v is not None for v in golds.values())
    per_template: dict[str, list[Any]] = {}
    for task in default_set.tasks:
        assert resolver.gold(task.template, task.params, anchor=T) == golds[task.task_id]
        per_template.setdefault(task.template_id, []).append(golds[task.task_id])
    for template_id, values in per_template.items():
        answer = TEMPLATES_BY_ID[template_id].answer
        degenerate = sum(1 for v in values if answer.is_degenerate(v))
        # A quarter of the template's share (a template short of candidates keeps its cap).
        assert degenerate <= 0.25 * max(len(values), TEMPLATES_BY_ID[template_id].weight), (template_id, values)
    assert sum(1 for t in default_set.tasks if TEMPLATES_BY_ID[t.template_id].answer.is_degenerate(
        golds[t.task_id])) == default_set.degenerate
    assert default_set.degenerate <= 18  # well under a tenth of the set


def test_parameters_come_from_the_world_at_t(default_set: GeneratedTaskSet,
                                             world: tuple[Path, str, list[dict[str, Any]]]) -> None:
    for task in default_set.tasks:
        for key in ("day1", "day2"):
            if key in task.params:
                assert task.params[key] <= T
        assert task.anchor == T and task.world_id == world[1]


def test_generation_is_deterministic_and_seeded_by_world_and_t(
        default_set: GeneratedTaskSet, world: tuple[Path, str, list[dict[str, Any]]], resolver: GoldResolver) -> None:
    _, world_id, records = world
    again = generate_task_set(records, world_id=world_id, anchor=T, resolver=resolver)
    assert task_set_hash(again.tasks) == task_set_hash(default_set.tasks)
    other_seed = generate_task_set(records, world_id=world_id, anchor=T, task_seed=1, resolver=resolver)
    assert task_set_hash(other_seed.tasks) != task_set_hash(default_set.tasks)
    assert derive_seed(world_id, T) != derive_seed(world_id, "2024-04-26") != derive_seed("other-s1-abcdef", T)


def test_per_template_draws_each_template_exactly_k_times(
        world: tuple[Path, str, list[dict[str, Any]]], resolver: GoldResolver) -> None:
    _, world_id, records = world
    once = generate_task_set(records, world_id=world_id, anchor=T, resolver=resolver, per_template=1)
    assert Counter(t.template_id for t in once.tasks) == Counter({t.template_id: 1 for t in TEMPLATES})
    assert len({t.question_text for t in once.tasks}) == len(TEMPLATES) == 47
    again = generate_task_set(records, world_id=world_id, anchor=T, resolver=resolver, per_template=1, n=3)
    assert task_set_hash(again.tasks) == task_set_hash(once.tasks)  # deterministic; n is not used
    # a template the world cannot ask k distinct times is named, never replaced by another template (a template
    # without parameters has one question)
    with pytest.raises(TaskSetError, match=r"template t1_unassigned_licenses can be asked 1 distinct time\(s\), "
                                           r"2 requested \(tasks.per_template\)"):
        generate_task_set(records, world_id=world_id, anchor=T, resolver=resolver, per_template=2)


def test_other_sizes_split_tiers_proportionally() -> None:
    assert tier_quotas(180) == {1: 81, 2: 63, 3: 36}
    assert tier_quotas(20) == {1: 9, 2: 7, 3: 4}
    assert sum(tier_quotas(7).values()) == 7


def test_task_file_round_trip_and_hash(default_set: GeneratedTaskSet, tmp_path: Path) -> None:
    path = tmp_path / TASKS_FILE
    digest = write_tasks(default_set.tasks, path)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest() == task_set_hash(default_set.tasks)
    assert read_tasks(path) == default_set.tasks
    first = json.loads(path.read_text().splitlines()[0])
    for field in ("task_id", "question_text", "task_tier", "intent", "template_id", "params", "answer_type",
                  "entity_classes", "measure", "anchor", "world_id"):
        assert field in first
    assert "gold" not in " ".join(first)  # gold never travels with the tasks


def test_tasks_command_writes_the_file_and_prints_its_hash(
        world: tuple[Path, str, list[dict[str, Any]]], tmp_path: Path) -> None:
    from churn_assets.cli import main

    out = tmp_path / "set" / TASKS_FILE
    result = CliRunner().invoke(main, ["tasks", "--ledger", str(world[0]), "--n", "20", "--out", str(out)])
    assert result.exit_code == 0, result.output
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert f"task-set hash {digest}" in result.output
    tasks = read_tasks(out)
    assert Counter(t.task_tier for t in tasks) == {1: 9, 2: 7, 3: 4}
    bad = CliRunner().invoke(main, ["tasks", "--ledger", str(world[0]), "--at", "2025-01-01", "--out", str(out)])
    assert bad.exit_code == 1 and "--at = 2025-01-01 is outside the calendar of world" in bad.output


def test_task_set_asset_writes_the_partition(tmp_path: Path) -> None:
    import dagster as dg

    from churn_assets.orchestration.assets.tasks import task_set
    from churn_assets.orchestration.partitions import world_day_key
    from churn_assets.orchestration.resources import StateResource
    from churn_assets.orchestration.world_registry import add_world
    from churn_assets.state import StatePaths
    from churn_assets.world.config import load_config
    from churn_assets.world.simulator import generate_ledger

    paths = StatePaths.resolve(tmp_path / "state").ensure()
    config = load_config(days=30)
    instance = dg.DagsterInstance.ephemeral()
    add_world(paths, instance, config)  # the world and its 30 days
    generate_ledger(config, paths.ledger_dir(config.world_id))
    day = dt.date(2024, 1, 30)
    result = dg.materialize([task_set], partition_key=world_day_key(config.world_id, day), instance=instance,
                            resources={"state": StateResource(state_dir=str(paths.root))})
    assert result.success
    path = paths.task_set_file(config.world_id, day)
    metadata = {k: v.value for k, v in result.asset_materializations_for_node("task_set")[0].metadata.items()}
    assert metadata["task_set_hash"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert metadata["tasks_per_task_tier"] == {"1": 81, "2": 63, "3": 36}
    assert metadata["dagster/row_count"] == 180
    assert {t.anchor for t in read_tasks(path)} == {day.isoformat()}


def test_a_task_set_drawn_with_other_settings_is_out_of_date(default_set: GeneratedTaskSet, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A day's task set is one file per (world, T): a deployment that asks for another count or seed finds the
    file out of date (drawn again, with the reason) and no finished run of it, instead of reusing it silently."""
    from few_tasks import use_task_count

    from churn_assets.evaluation.runner import finished_run
    from churn_assets.freshness.scenario import TASK_SET, ScenarioInput
    from churn_assets.orchestration.scenario_inputs import outdated_task_sets
    from churn_assets.state import StatePaths
    from churn_assets.tasks.task_set import drawn_with, write_drawn_with

    paths, day = StatePaths.resolve(tmp_path), dt.date.fromisoformat(T)
    path = paths.task_set_file("w-s1-abcdef", day)
    write_tasks(default_set.tasks[:4], path)
    wanted = ScenarioInput(TASK_SET, "w-s1-abcdef", day)
    use_task_count(monkeypatch, 12)
    assert drawn_with(path) is None  # a set of before the record: taken as it is (its settings cannot be known)
    assert outdated_task_sets(paths, [wanted]) == {}
    write_drawn_with(path, (4, 0, None))
    assert outdated_task_sets(paths, [wanted]) == {
        wanted: "drawn with 4 tasks, seed 0; the deployment asks for 12 tasks, seed 0"}
    use_task_count(monkeypatch, 4)
    assert drawn_with(path) == (4, 0, None) and outdated_task_sets(paths, [wanted]) == {}
    assert (path.parent / "drawn_with.json").read_text() == '{"count":4,"seed":0}\n'  # bytes as before issue 45
    use_task_count(monkeypatch, 4, per_template=1)  # one task per template: 47, another draw
    assert outdated_task_sets(paths, [wanted]) == {
        wanted: "drawn with 4 tasks, seed 0; the deployment asks for 47 tasks (1 per template), seed 0"}
    use_task_count(monkeypatch, 4)
    use_task_count(monkeypatch, 12, seed=3)
    assert outdated_task_sets(paths, [wanted]) == {
        wanted: "drawn with 4 tasks, seed 0; the deployment asks for 12 tasks, seed 3"}
    # A file of an earlier format (here: a template's measure under its old name) is drawn again.
    use_task_count(monkeypatch, 4)
    path.write_text(path.read_text().replace('"measure":"', '"measure":"old_', 1))
    assert outdated_task_sets(paths, [wanted]) == {wanted: "written in an earlier task format (its templates' "
                                                           "fields changed since)"}
    write_tasks(default_set.tasks[:4], path)
    assert outdated_task_sets(paths, [wanted]) == {}
    use_task_count(monkeypatch, 12, seed=3)
    # No finished run is looked up from it (the store is never reached: the settings are compared first).
    assert finished_run(None, None, "", None, path, drawn=(12, 3, None)) is None  # type: ignore[arg-type]
    assert finished_run(None, None, "", None, path, drawn=(4, 1, None)) is None  # type: ignore[arg-type]
    assert finished_run(None, None, "", None, path, drawn=(4, 0, 1)) is None  # type: ignore[arg-type]
