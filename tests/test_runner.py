"""The evaluation runner at the arm seam: a scripted arm answering from a known vintage.

The scripted arm is a fake at the seam between arms and scoring (real arms are tested against the real
services in tests/integration/test_arms.py); here it lets the runner's scoring, checkpointing and keying
be checked exactly: an arm that answers gold under its planned vintage must have stale answers equal to
exposure and no reasoning errors.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from outage_arm import OutageArm
from scripted_answer import ScriptedAnswer

from churn_assets.evaluation.exposure import run_exposure
from churn_assets.evaluation.results import ResultsStore
from churn_assets.evaluation.runner import RunSpec, evaluate
from churn_assets.freshness.planning import served_vintage
from churn_assets.freshness.policies import Off, Tiered
from churn_assets.freshness.scenario import Scenario
from churn_assets.grounding.registry import load_registry
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task, task_set_hash
from churn_assets.world.config import load_config
from churn_assets.world.simulator import simulate

T = dt.date(2024, 2, 25)
T_PRIME = dt.date(2024, 1, 28)


class ScriptedArm:
    """Answers gold under its planned vintage, restricted to the classes each template reads."""

    def __init__(self, name: str, resolver: GoldResolver, planned: dict[str, dt.date], fail_after: int | None = None):
        self.name, self.resolver, self._planned, self.fail_after, self.calls = name, resolver, planned, fail_after, 0
        self.prepared: list[list[str]] = []  # the task ids of each `prepare` call

    @property
    def planned_vintage(self) -> dict[str, dt.date]:
        return dict(self._planned)

    def prepare(self, tasks: list[Task]) -> None:
        self.prepared.append([t.task_id for t in tasks])

    def answer(self, task: Task) -> ScriptedAnswer:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise KeyboardInterrupt("interrupted mid-run")
        read = {c: self._planned[c] for c in task.template.classes}
        value = self.resolver.gold(task.template, task.params, anchor=T, vintage=self._planned)
        return ScriptedAnswer(task.task_id, value, str(value), read)


@pytest.fixture(scope="module")
def world() -> tuple[list[dict[str, Any]], GoldResolver, list[Task]]:
    config = load_config(days=60)
    records = []
    for i, e in enumerate(simulate(config)):
        records.append({"seq": i, "at": e.at.isoformat(), "kind": e.kind, "entity_type": e.entity_type,
                        "entity_id": e.entity_id, "payload": e.payload})
    resolver = GoldResolver(records)
    tasks = generate_task_set(records, world_id=config.world_id, anchor=T, n=40, resolver=resolver).tasks
    return records, resolver, list(tasks)


def _spec(arm: str, policy: str, tasks: list[Task]) -> RunSpec:
    return RunSpec(Scenario("default-s42-test00", arm, policy, T_PRIME, T), "cafe", task_set_hash(tasks))


@pytest.mark.parametrize("policy", [Tiered(), Off()])
def test_stale_answers_equal_exposure_for_an_arm_that_serves_its_plan(world, tmp_path: Path, policy) -> None:
    records, resolver, tasks = world
    planned = served_vintage(load_registry(), T_PRIME, T, policy)
    exposure = run_exposure(records, tasks, anchor=T, t_prime=T_PRIME, vintage=planned, resolver=resolver)
    summary = evaluate(ScriptedArm("grounding", resolver, planned), tasks, resolver, ResultsStore(tmp_path),
                       _spec("grounding", policy.policy_id, tasks), exposure=exposure, code="git-test")
    assert summary["tasks"] == len(tasks)
    assert summary["verdicts"]["reasoning_error"] == 0
    assert summary["stale_answers"] == exposure.exposure
    # An answer equal to a served gold that carries no information is counted apart, as exposure counts it.
    assert summary["verdicts"]["unattributed_error"] == exposure.degenerate_exposure == summary["degenerate_exposure"]
    assert summary["verdicts"]["correct"] == len(tasks) - exposure.exposure - exposure.degenerate_exposure
    if isinstance(policy, Off):
        assert exposure.exposure > 0 and exposure.degenerate_exposure > 0


def test_resume_after_interrupt_gives_identical_results(world, tmp_path: Path) -> None:
    _, resolver, tasks = world
    planned = served_vintage(load_registry(), T_PRIME, T, Off())
    spec = _spec("grounding_no_freshness_tiers", "off", tasks)
    whole = evaluate(ScriptedArm("x", resolver, planned), tasks, resolver, ResultsStore(tmp_path / "a"), spec,
                     code="git-test")
    store = ResultsStore(tmp_path / "b")
    with pytest.raises(KeyboardInterrupt):
        evaluate(ScriptedArm("x", resolver, planned, fail_after=15), tasks, resolver, store, spec, code="git-test")
    second = ScriptedArm("x", resolver, planned)
    resumed = evaluate(second, tasks, resolver, store, spec, code="git-test")
    assert second.calls == len(tasks) - 15  # only the unanswered tasks are asked again
    # ... but the arm prepares for the whole set, as a fresh run does (the same batch: the same vectors)
    assert second.prepared == [[t.task_id for t in tasks]]
    finished = ScriptedArm("x", resolver, planned)
    evaluate(finished, tasks, resolver, store, spec, code="git-test")
    assert finished.prepared == [] and finished.calls == 0  # nothing left to answer: nothing to prepare
    key = spec.key("git-test")
    assert resumed == whole
    assert ResultsStore(tmp_path / "a").read_tasks(key) == store.read_tasks(key)


def test_a_changed_code_version_never_overwrites(world, tmp_path: Path) -> None:
    _, resolver, tasks = world
    planned = served_vintage(load_registry(), T_PRIME, T, Tiered())
    store = ResultsStore(tmp_path)
    spec = _spec("grounding", "tiered", tasks)
    evaluate(ScriptedArm("g", resolver, planned), tasks, resolver, store, spec, code="git-one")
    first = (store.run_dir(spec.key("git-one")) / "tasks.jsonl").read_bytes()
    evaluate(ScriptedArm("g", resolver, planned), tasks, resolver, store, spec, code="git-two")
    assert (store.run_dir(spec.key("git-one")) / "tasks.jsonl").read_bytes() == first
    assert store.is_complete(spec.key("git-two"))
    again = ScriptedArm("g", resolver, planned)
    evaluate(again, tasks, resolver, store, spec, code="git-one")  # complete: read back, nothing re-asked
    assert again.calls == 0


def test_scenario_key_format() -> None:
    spec = RunSpec(Scenario("default-s42-3f9a1c", "grounding", "tiered", dt.date(2024, 3, 29), dt.date(2024, 4, 27)),
                   "h", "x")
    assert spec.scenario_key == "grounding__tiered__tp20240329__t20240427__det__default__default-s42-3f9a1c"


def test_token_totals_add_up_and_an_unpriced_answer_leaves_the_cost_unknown() -> None:
    from churn_assets.evaluation.runner import token_totals

    usage = {"model": "m", "calls": 2, "input_tokens": 100, "output_tokens": 10, "tool_calls": 1, "cost_usd": 0.5}
    rows = [{"usage": usage}, {"usage": {**usage, "cost_usd": 0.25}}, {}]
    assert token_totals(rows) == {"model_calls": 4, "tool_calls": 2, "input_tokens": 200, "output_tokens": 20,
                                  "cost_usd": 0.75}
    assert token_totals([*rows, {"usage": {**usage, "cost_usd": None}}])["cost_usd"] is None


def test_retry_transport_asks_only_the_transport_failures_again_into_a_retry_folder(world, tmp_path: Path) -> None:
    _, resolver, tasks = world
    planned = served_vintage(load_registry(), T_PRIME, T, Tiered())
    store = ResultsStore(tmp_path)
    spec = _spec("grounding", "tiered", tasks)
    down = {t.task_id for t in tasks[3:8]}
    first = evaluate(OutageArm(resolver, planned, down), tasks, resolver, store, spec, code="git-test")
    assert first["verdicts"]["transport_failure"] == len(down)
    key = spec.key("git-test")
    first_bytes = (store.run_dir(key) / "tasks.jsonl").read_bytes()

    reused = OutageArm(resolver, planned, set())
    assert evaluate(reused, tasks, resolver, store, spec, code="git-test") == first and reused.asked == []

    healthy = OutageArm(resolver, planned, set())
    retried = evaluate(healthy, tasks, resolver, store, spec, code="git-test", retry_transport=True)
    assert sorted(healthy.asked) == sorted(down)  # only the failures are asked again
    assert retried["verdicts"]["transport_failure"] == 0 and retried["tasks"] == len(tasks)
    assert (retried["retry"], retried["retry_of"], retried["transport_failures_retried"]) == (
        1, key.folder_name, len(down))
    assert retried["experiment_hash"] == first["experiment_hash"]  # the same experiment, a new attempt
    assert (store.run_dir(key) / "tasks.jsonl").read_bytes() == first_bytes  # never overwritten
    assert store.latest_complete(key) == key.retried(1)
    kept = {r["task_id"]: r for r in store.read_tasks(key) if r["task_id"] not in down}
    assert {r["task_id"]: r for r in store.read_tasks(key.retried(1)) if r["task_id"] not in down} == kept
    # the same answers as a run that never met the outage
    clean = evaluate(OutageArm(resolver, planned, set()), tasks, resolver, ResultsStore(tmp_path / "clean"), spec,
                     code="git-test")
    assert retried["verdicts"] == clean["verdicts"]

    # the retry is the experiment's result now: reused, and a further retry has nothing to ask
    again = OutageArm(resolver, planned, set())
    assert evaluate(again, tasks, resolver, store, spec, code="git-test", retry_transport=True) == retried
    assert again.asked == [] and store.retries(key) == [1]


def test_an_exposure_still_being_computed_gives_the_same_results_in_task_order(world, tmp_path: Path) -> None:
    """`eval_run` hands `evaluate` the exposure as a Future computed beside the answers: the rows are scored
    once it is known, in task order, and everything equals the run given the exposure up front."""
    from concurrent.futures import Future

    records, resolver, tasks = world
    planned = served_vintage(load_registry(), T_PRIME, T, Off())
    exposure = run_exposure(records, tasks, anchor=T, t_prime=T_PRIME, vintage=planned, resolver=resolver)
    spec = _spec("grounding_no_freshness_tiers", "off", tasks)
    known = evaluate(ScriptedArm("x", resolver, planned), tasks, resolver, ResultsStore(tmp_path / "a"), spec,
                     exposure=exposure, code="git-test")
    pending: Future = Future()
    store = ResultsStore(tmp_path / "b")
    key = spec.key("git-test")
    checkpoint = store.run_dir(key) / "tasks.partial.jsonl"

    class Arm(ScriptedArm):
        def answer(self, task: Task) -> ScriptedAnswer:
            if self.calls == 10:  # the exposure arrives while the arm is answering: nothing was recorded before
                assert not checkpoint.exists() or checkpoint.read_text() == ""
                pending.set_result(exposure)
            return super().answer(task)

    later = evaluate(Arm("x", resolver, planned), tasks, resolver, store, spec, exposure=pending, code="git-test")
    assert later == known and later["exposure"] == exposure.exposure
    assert ResultsStore(tmp_path / "a").read_tasks(key) == store.read_tasks(key)
    assert [r["task_id"] for r in store.read_tasks(key)] == [t.task_id for t in tasks]


def test_an_exposure_that_fails_fails_the_run_and_leaves_nothing_complete(world, tmp_path: Path) -> None:
    from concurrent.futures import Future

    from churn_assets.evaluation.exposure import ExposureError

    _, resolver, tasks = world
    planned = served_vintage(load_registry(), T_PRIME, T, Off())
    failed: Future = Future()
    failed.set_exception(ExposureError("no day to measure change rates on"))
    store = ResultsStore(tmp_path)
    spec = _spec("grounding_no_freshness_tiers", "off", tasks)
    with pytest.raises(ExposureError, match="no day to measure"):
        evaluate(ScriptedArm("x", resolver, planned), tasks, resolver, store, spec, exposure=failed, code="git-test")
    assert not store.is_complete(spec.key("git-test"))
    # nothing was checkpointed as scored: the rerun answers every task again
    again = ScriptedArm("x", resolver, planned)
    evaluate(again, tasks, resolver, store, spec, code="git-test")
    assert again.calls == len(tasks)


def test_answers_made_before_the_arm_fails_are_checkpointed_once_the_exposure_is_known(world, tmp_path: Path) -> None:
    """An arm that fails while the exposure is still being computed: the answers it made are scored and kept
    (the resume asks only the rest), and the arm's error is the run's."""
    import threading
    from concurrent.futures import Future

    records, resolver, tasks = world
    planned = served_vintage(load_registry(), T_PRIME, T, Off())
    exposure = run_exposure(records, tasks, anchor=T, t_prime=T_PRIME, vintage=planned, resolver=resolver)
    spec = _spec("grounding_no_freshness_tiers", "off", tasks)
    pending: Future = Future()
    store = ResultsStore(tmp_path)

    class Failing(ScriptedArm):
        def answer(self, task: Task) -> ScriptedAnswer:
            if self.calls == 12:
                threading.Timer(0.2, pending.set_result, (exposure,)).start()  # known only after the failure
                raise RuntimeError("the store went away")
            return super().answer(task)

    with pytest.raises(RuntimeError, match="went away"):
        evaluate(Failing("x", resolver, planned), tasks, resolver, store, spec, exposure=pending, code="git-test")
    again = ScriptedArm("x", resolver, planned)
    resumed = evaluate(again, tasks, resolver, store, spec, exposure=exposure, code="git-test")
    assert again.calls == len(tasks) - 12
    whole = evaluate(ScriptedArm("x", resolver, planned), tasks, resolver, ResultsStore(tmp_path / "a"), spec,
                     exposure=exposure, code="git-test")
    assert resumed == whole


def test_rows_record_the_stated_as_of_day_and_an_exhausted_budget(world, tmp_path: Path) -> None:
    """Every row has `data_as_of` (the agent's statement, or null) and `budget_error`; an answer whose agent ran
    out of its read budget is `budget_exhausted`, counted in the summary, and nothing of its text is parsed."""
    import dataclasses

    _records, resolver, tasks = world
    planned = served_vintage(load_registry(), T_PRIME, T, Off())
    base = ScriptedArm("grounding_no_freshness_tiers", resolver, planned)
    out_of_budget = tasks[1].task_id

    class StatingArm:
        name, planned_vintage = base.name, base.planned_vintage

        def answer(self, task: Task) -> ScriptedAnswer:
            got = dataclasses.replace(base.answer(task), data_as_of=T_PRIME)
            if task.task_id == out_of_budget:
                return dataclasses.replace(got, value=None, text="12", budget_error="a 31st read")
            return got

    store, spec = ResultsStore(tmp_path), _spec(base.name, "off", tasks)
    summary = evaluate(StatingArm(), tasks, resolver, store, spec, code="git-test")
    rows = [json.loads(x) for x in (store.run_dir(spec.key("git-test")) / "tasks.jsonl").read_text().splitlines()]
    assert all(r["data_as_of"] == T_PRIME.isoformat() for r in rows)
    [exhausted] = [r for r in rows if r["task_id"] == out_of_budget]
    assert (exhausted["verdict"], exhausted["answer"], exhausted["budget_error"]) == (
        "budget_exhausted", None, "a 31st read")
    assert all(r["budget_error"] is None for r in rows if r is not exhausted)
    assert summary["verdicts"]["budget_exhausted"] == 1 and summary["tasks"] == len(tasks)


def test_a_model_agent_run_logs_a_line_per_answer_and_the_deterministic_agent_none(world, tmp_path: Path,
                                                                                    caplog) -> None:
    """Issue 45: an LLM run says n of N, the verdict, seconds and an ETA as each answer is scored; the
    deterministic agent's runs (milliseconds per answer) stay quiet."""
    import logging

    from churn_assets.evaluation.answer_lines import ANSWER_LOGGER

    _records, resolver, tasks = world
    tasks = tasks[:4]
    planned = served_vintage(load_registry(), T_PRIME, T, Tiered())
    llm = RunSpec(Scenario("default-s42-test00", "grounding", "tiered", T_PRIME, T, agent_id="llm-abc123",
                           model_settings={"model": "m"}), "cafe", task_set_hash(tasks))
    store = ResultsStore(tmp_path / "llm")
    with caplog.at_level(logging.INFO, logger=ANSWER_LOGGER):
        evaluate(ScriptedArm("grounding", resolver, planned), tasks, resolver, store, llm, code="git-test")
        verdicts = [row["verdict"] for row in store.read_tasks(llm.key("git-test"))]
        lines = [r.getMessage() for r in caplog.records if r.name == ANSWER_LOGGER]
        assert [line.split(",")[0] for line in lines] == [f"answer {n} of 4: {v}" for n, v in enumerate(verdicts, 1)]
        assert "0.0 s; ETA " in lines[0] and "; done in " in lines[-1]  # ScriptedAnswer: 1 ms per answer
        caplog.clear()
        evaluate(ScriptedArm("grounding", resolver, planned), tasks, resolver, ResultsStore(tmp_path / "det"),
                 _spec("grounding", "tiered", tasks), code="git-test")
        assert [r for r in caplog.records if r.name == ANSWER_LOGGER] == []
