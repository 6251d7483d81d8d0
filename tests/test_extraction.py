"""The extraction rule (pure): records are read back exactly, point lookups come out right whenever their
record is retrieved, and an aggregate is computed over the retrieved records only, so it comes out wrong
when the answer needs more records than `K`.

Records are the RAG corpus's own (`rag_corpus.corpus_records` over a fold of a generated world); retrieval
is stood in for by a ranking that puts the records naming the question's ids first, then corpus order.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from test_deterministic_agent import records_of

from churn_assets.arms.agents.deterministic import DeterministicAgent
from churn_assets.arms.extraction import SPECS, K, extract, read_record
from churn_assets.grounding.chunks import chunk_documents, identifiers_in
from churn_assets.grounding.rag_corpus import RagRecord, corpus_records
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task
from churn_assets.tasks.templates import TEMPLATES, template
from churn_assets.world.fold import fold_ledger
from contracts.facts import contract_facts
from contracts.render import render_markdown

DAY = dt.date(2024, 2, 4)  # the corpus build day (T' = T here: the corpus is as fresh as gold at T)
POINT_LOOKUPS = ("t1_list_price", "t1_vendor_name", "t1_vendor_tier", "t3_contract_annual_value",
                 "t3_committed_seats", "t3_notice_deadline", "t3_months_remaining", "t3_contract_vendor_name")


@dataclass
class World:
    records: list[dict[str, Any]]
    resolver: GoldResolver
    corpus: list[RagRecord]
    tasks: list[Task]


@pytest.fixture(scope="module")
def world() -> World:
    records = records_of(35, 5)
    state = fold_ledger(records, DAY)
    documents = {f.contract_id: render_markdown(f) for f in contract_facts(state, DAY)}
    corpus = corpus_records(state, DAY, chunk_documents(documents, DAY))
    resolver = GoldResolver(records)
    tasks = generate_task_set(records, world_id="default-s5-000000", anchor=DAY, n=180, resolver=resolver).tasks
    return World(records, resolver, corpus, tasks)


def ranked_search(corpus: Sequence[RagRecord]) -> Any:
    """Stand-in for similarity search: records naming more of the question's ids first, then corpus order."""
    def search(query: str, kinds: Sequence[str], k: int) -> list[RagRecord]:
        named = set(identifiers_in(query))
        pool = [r for r in corpus if r.kind in kinds]
        return sorted(pool, key=lambda r: -len(named & set(r.refs)))[:k]
    return search


def test_every_template_has_a_spec() -> None:
    assert set(SPECS) == {t.template_id for t in TEMPLATES}


def test_records_read_back_their_facts(world: World) -> None:
    state = fold_ledger(world.records, DAY)
    seen = set()
    for rec in world.corpus:
        f = read_record(rec.kind, rec.entity_id, rec.text)
        seen.add(rec.kind)
        if rec.kind == "user":
            u = state.user_status.users[rec.entity_id]
            assert (f["hired_on"], f["offboarded_on"], f["active"]) == (u.hired_on, u.offboarded_on, u.active)
            assert f["cost_center"] == state.cost_center_membership.memberships[u.user_id][-1].cost_center_id
        elif rec.kind == "license":
            lic = state.assignments.licenses[rec.entity_id]
            assert (f["product"], f["purchased_on"], f["contract"], f["holder"]) == (
                lic.product_id, lic.purchased_on, lic.contract_id, lic.holder_on(DAY))
            assert f["unit_price"] == pytest.approx(lic.unit_price_usd)
        elif rec.kind == "product":
            p = state.prices.products[rec.entity_id]
            assert (f["vendor"], f["price"]) == (p.vendor_id, p.list_price_on(DAY))
        elif rec.kind == "vendor":
            v = state.vendor_dims.vendors[rec.entity_id]
            assert (f["name"], f["tier"]) == (v.name, v.tier)
        elif rec.kind == "ticket":
            t = state.tickets.tickets[rec.entity_id]
            assert (f["priority"], f["opened_on"], f["product"], f["status"]) == (
                t.priority, t.opened_on, t.product_id, t.status_on(DAY))
        elif rec.kind == "consumption":
            assert set(f["windows"]) == {7, 30, 90} and f["last_used"] <= DAY
    assert seen == {"user", "license", "product", "vendor", "cost_center", "ticket", "contract_chunk", "consumption"}


def test_point_lookups_are_right_when_their_record_is_retrieved(world: World) -> None:
    agent, search = DeterministicAgent(), ranked_search(world.corpus)
    lookups = [t for t in world.tasks if t.template_id in POINT_LOOKUPS]
    assert {t.template_id for t in lookups} == set(POINT_LOOKUPS)
    for task in lookups:
        got = agent.answer_from_records(task.question_text, DAY, search)
        assert task.template.answer.equal(got.value, world.resolver.gold(task.template, task.params, anchor=DAY)), \
            (task.template_id, task.params, got.value)


def test_an_aggregate_over_more_records_than_k_comes_out_wrong(world: World) -> None:
    agent, search = DeterministicAgent(), ranked_search(world.corpus)
    tmpl = template("t2_total_spend")
    got = agent.answer_from_records(tmpl.render({}), DAY, search)
    gold = world.resolver.gold(tmpl, {}, anchor=DAY)
    licenses = [r for r in world.corpus if r.kind == "license"]
    assert len(licenses) > K
    assert got.value is not None and not tmpl.answer.equal(got.value, gold)
    # The same rule over every license record (a retriever with K large enough) gets the list-price total.
    every_license = [r for r in world.corpus if r.kind in ("license", "product")]
    everything = extract("t2_total_spend", "money", {}, DAY, every_license)
    assert everything == pytest.approx(gold)


@dataclass(frozen=True)
class Rec:
    kind: str
    entity_id: str
    text: str


def test_counts_are_over_the_retrieved_records_only() -> None:
    def lic(n: int, held: bool) -> Rec:
        tail = "Assigned to user usr_000001 since 2024-01-02." if held else "Never assigned."
        return Rec("license", f"lic_{n:06d}", f"License lic_{n:06d}: prd_0001 (CRM), bought 2024-01-01 at USD 10.00 "
                   f"per seat per month under contract ctr_0001. {tail}")
    few = [lic(1, True), lic(2, False), lic(3, False)]
    assert extract("t1_unassigned_licenses", "integer", {}, DAY, few) == 2
    many = [lic(n, False) for n in range(12)]
    assert extract("t1_unassigned_licenses", "integer", {}, DAY, many[:K]) == K  # 12 exist, K were retrieved


def test_windows_end_today_and_unknown_facts_stay_unknown() -> None:
    users = [Rec("user", "usr_000001", "User usr_000001: active, hired 2024-02-01. No cost center."),
             Rec("user", "usr_000002", "User usr_000002: active, hired 2024-01-20. No cost center.")]
    assert extract("t1_hires", "integer", {"days": 7}, DAY, users) == 1
    assert extract("t1_hires", "integer", {"days": 30}, DAY, users) == 2
    assert extract("t1_held_licenses_change", "integer", {"day1": "2024-01-02", "day2": "2024-01-09"}, DAY, []) is None
    assert extract("t1_list_price", "money", {"product": "prd_0009"}, DAY, []) is None
