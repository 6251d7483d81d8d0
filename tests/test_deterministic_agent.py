"""The deterministic agent against gold, on generated worlds, from rows built by hand (no service).

The agent reads only the question text and the rows its requests return; gold folds the ledger. Equal
answers on every task, at T and at mixed vintage maps (each class served from its own day, as a staged
cache serves it), mean the agent's second implementation of every template agrees with gold's.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from agent_rows import StateTools

from churn_assets.arms.agents.deterministic import DeterministicAgent
from churn_assets.grounding.measures.context import IMPLEMENTATIONS
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task
from churn_assets.tasks.templates import TEMPLATES, template
from churn_assets.world.config import load_config
from churn_assets.world.events import EVENT_KINDS
from churn_assets.world.fold import fold_vintage, uniform_vintage
from churn_assets.world.ledger import round_payload
from churn_assets.world.simulator import simulate

D = dt.date.fromisoformat


def records_of(days: int, seed: int) -> list[dict[str, Any]]:
    return [{"seq": i, "at": e.at.isoformat(), "kind": e.kind, "entity_type": e.entity_type,
             "entity_id": e.entity_id, "payload": round_payload(EVENT_KINDS[e.kind], e.payload)}
            for i, e in enumerate(simulate(load_config(days=days, seed=seed)))]


@pytest.fixture(scope="module")
def small() -> tuple[list[dict[str, Any]], GoldResolver, list[Task]]:
    records = records_of(45, 7)
    resolver = GoldResolver(records)
    tasks = generate_task_set(records, world_id="default-s7-000000", anchor="2024-02-14", n=180,
                              resolver=resolver).tasks
    return records, resolver, tasks


def test_every_template_has_a_measure_implementation() -> None:
    """The coverage test: a template whose measure has no implementation is named."""
    missing = [t.template_id for t in TEMPLATES if t.measure not in IMPLEMENTATIONS]
    assert not missing, f"templates whose measure has no implementation: {missing}"


def _vintages(t: dt.date) -> dict[str, dict[str, dt.date]]:
    def back(n: int) -> dt.date:
        return t - dt.timedelta(days=n)
    return {
        "at T": uniform_vintage(t),
        "tiered": {"assignments": back(1), "user_status": back(1), "prices": back(6),
                   "cost_center_membership": back(6), "contract_terms": back(20), "vendor_dims": back(20),
                   "consumption": t, "utilization": t, "tickets": t},
        "untiered": {**uniform_vintage(back(28)), "consumption": t, "utilization": t, "tickets": t},
        # Each class at a different day, so a computation that takes a fact from the wrong class shows.
        "scrambled": {"assignments": back(3), "user_status": back(9), "prices": back(14),
                      "cost_center_membership": back(1), "contract_terms": back(25), "vendor_dims": back(5),
                      "consumption": back(2), "utilization": t, "tickets": back(4)},
    }


@pytest.mark.parametrize("vintage_name", ["at T", "tiered", "untiered", "scrambled"])
def test_agent_equals_gold_at_every_vintage(small: tuple[list[dict[str, Any]], GoldResolver, list[Task]],
                                            vintage_name: str) -> None:
    records, resolver, tasks = small
    t = D(tasks[0].anchor)
    vintage = _vintages(t)[vintage_name]
    state = fold_vintage(records, vintage)
    agent = DeterministicAgent()
    wrong = []
    for task in tasks:
        got = agent.answer(task.question_text, t, StateTools(state, t))
        want = resolver.gold(task.template, task.params, anchor=t, vintage=vintage)
        assert got.template_id == task.template_id and got.params == task.params
        if not task.template.answer.equal(got.value, want) and not (got.value is None and want is None):
            wrong.append(f"{task.template_id} {task.params}: agent {got.value!r}, gold {want!r}")
    assert not wrong, "\n".join(wrong)
    assert {task.template_id for task in tasks} == {t.template_id for t in TEMPLATES}  # every template asked


@pytest.mark.parametrize("seed", [3, 11])
def test_agent_equals_gold_on_other_seeds(seed: int) -> None:
    records = records_of(35, seed)
    resolver = GoldResolver(records)
    t = D("2024-02-04")
    tasks = generate_task_set(records, world_id=f"default-s{seed}-000000", anchor=t, n=90, resolver=resolver).tasks
    vintage = _vintages(t)["scrambled"]
    state = fold_vintage(records, vintage)
    agent = DeterministicAgent()
    for task in tasks:
        got = agent.answer(task.question_text, t, StateTools(state, t))
        want = resolver.gold(task.template, task.params, anchor=t, vintage=vintage)
        assert task.template.answer.equal(got.value, want) or (got.value is None and want is None), \
            (task.template_id, task.params, got.value, want)


def test_a_question_no_template_matches_is_a_parse_failure() -> None:
    got = DeterministicAgent().answer("What is the airspeed of an unladen swallow?", D("2024-01-30"),
                                      StateTools(fold_vintage([], uniform_vintage(D("2024-01-30"))), D("2024-01-30")))
    assert got.parse_error is not None and got.value is None and got.text == "unknown"


def test_a_class_the_arm_does_not_serve_takes_the_documented_fallback(
        small: tuple[list[dict[str, Any]], GoldResolver, list[Task]]) -> None:
    records, resolver, tasks = small
    t = D(tasks[0].anchor)
    state = fold_vintage(records, uniform_vintage(t))
    agent = DeterministicAgent()
    total = next(task for task in tasks if task.template_id == "t2_total_spend")
    # Without prices, licenses are priced at their purchase price: a different total.
    without = agent.answer(total.question_text, t, StateTools(state, t, unavailable={"prices"})).value
    purchase_total = round(sum(lic.unit_price_usd for lic in state.assignments.licenses.values()), 2)
    assert without == pytest.approx(purchase_total)
    assert without != resolver.gold(total.template, total.params, anchor=t)
    # Without the class a question cannot do without, the answer is unknown.
    vendor = next(task for task in tasks if task.template_id == "t1_vendor_name")
    assert agent.answer(vendor.question_text, t, StateTools(state, t, unavailable={"vendor_dims"})).value is None
    assert template("t1_vendor_name").answer.format(None) == "unknown"
