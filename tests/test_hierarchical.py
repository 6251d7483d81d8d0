"""The hierarchical arm's coordinator (worker selection and merge, pure), its routes, and the inputs scenarios of
the classic-RAG and hierarchical arms need (no services)."""

from __future__ import annotations

import datetime as dt

import pytest

from churn_assets.arms.base import ArmError
from churn_assets.arms.corpus import corpus_trace
from churn_assets.arms.hierarchical import WORKER_OF, WORKERS, Coordinator, assign, hierarchical_vintage, merge
from churn_assets.freshness.scenario import DBT_BUILD, ScenarioInput, ScenarioPlan, plan_scenario
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.routes import Route, RouterError, RoutingMode, route_for
from churn_assets.grounding.rows import VIEW_CLASS, VIEWS, Request, UserRow
from churn_assets.grounding.traces import COORDINATOR, DataIntegrityError, Read, TraceEntry, served_vintage
from churn_assets.world.events import ENTITY_CLASSES

T_PRIME, T = dt.date(2024, 3, 29), dt.date(2024, 4, 27)
WORLD = "default-s42-3f9a1c"


def test_every_class_has_exactly_one_worker() -> None:
    assert sorted(WORKER_OF) == sorted(ENTITY_CLASSES)
    assert sum(len(w.classes) for w in WORKERS) == len(ENTITY_CLASSES)
    assert hierarchical_vintage(T_PRIME, T) == {**dict.fromkeys(ENTITY_CLASSES, T), "contract_terms": T_PRIME}


def test_the_coordinator_asks_only_the_workers_the_requests_need_and_merges_in_request_order() -> None:
    requests = [Request("users"), Request("usage", window_days=7, products=("prd_0001",)), Request("contracts"),
                Request("holdings"), Request("tickets")]
    assert assign(requests) == {"warehouse": [0, 3], "saas": [1, 4], "documents": [2]}
    assert assign([Request("prices"), Request("vendors")]) == {"warehouse": [0, 1]}
    u = [UserRow("u1", T_PRIME, None)]
    rows = {i: [UserRow(f"u{i}", T_PRIME, None)] for i in range(5)}
    merged = merge(5, {"warehouse": ([0, 3], [rows[0], rows[3]]), "saas": ([1, 4], [rows[1], rows[4]]),
                       "documents": ([2], [rows[2]])})
    assert merged == [rows[i] for i in range(5)]
    with pytest.raises(ArmError, match="answered by no worker"):
        merge(2, {"warehouse": ([0], [u])})
    with pytest.raises(ArmError, match="twice"):
        merge(1, {"warehouse": ([0], [u]), "saas": ([0], [u])})
    with pytest.raises(ArmError, match="answered 0 of its 1"):
        merge(1, {"warehouse": ([0], [])})


class FakeRouter:
    """Routes as the hierarchical router does; answers every request with one user row."""

    def __init__(self) -> None:
        self.registry = load_registry()
        self.served = hierarchical_vintage(T_PRIME, T)
        self.calls: list[str] = []

    def route(self, request: Request) -> Route:
        return route_for(request.view, self.registry, RoutingMode.HIERARCHICAL, self.served, T)

    def retrieve(self, requests: list[Request], note: str = "") -> tuple[list[list[UserRow]], TraceEntry]:
        self.calls.append(note)
        reads = tuple(Read(self.route(r).store, "t", r.entity_class, self.route(r).day, 1) for r in requests)
        return [[UserRow(r.view, T, None)] for r in requests], TraceEntry("x", reads, note=note)


def test_the_coordinator_traces_each_worker_then_itself() -> None:
    router = FakeRouter()
    tools = Coordinator(router)  # type: ignore[arg-type]
    rows = tools.retrieve([Request("tickets"), Request("users"), Request("contracts")], note="t2_x")
    assert [r[0].user_id for r in rows if r] == ["tickets", "users", "contracts"]
    assert router.calls == ["worker warehouse (t2_x)", "worker saas (t2_x)", "worker documents (t2_x)"]
    assert [e.route for e in tools.traces][-1] == COORDINATOR
    coordinator = tools.traces[-1]
    assert coordinator.note.startswith("coordinator: asked workers warehouse, saas, documents;")
    assert coordinator.reads == () and coordinator.cost_units == 0 and coordinator.data_times == {}
    assert served_vintage(tools.traces) == {"tickets": T, "user_status": T, "contract_terms": T_PRIME}


def test_hierarchical_routes_live_at_t_and_contract_terms_from_the_index_of_t_prime() -> None:
    registry, served = load_registry(), hierarchical_vintage(T_PRIME, T)
    routes = {v: route_for(v, registry, RoutingMode.HIERARCHICAL, served, T) for v in VIEWS}
    live = {v: route_for(v, registry, RoutingMode.LIVE, dict.fromkeys(ENTITY_CLASSES, T), T) for v in VIEWS}
    assert routes.pop("contracts") == Route("vector_lookup", "vector_index", "vector_index", T_PRIME, "staging")
    assert all(routes[v] == live[v] for v in routes)
    for view, route in routes.items():
        assert route.store in WORKER_OF[VIEW_CLASS[view]].stores, (view, route)
    with pytest.raises(RouterError, match="no day"):
        route_for("contracts", registry, RoutingMode.HIERARCHICAL, {}, T)


def test_a_corpus_search_over_every_kind_is_attributed_to_every_class_at_t_prime() -> None:
    class Hit:
        def __init__(self, kind: str, day: dt.date = T_PRIME) -> None:
            self.kind, self.day, self.content_hash = kind, day, f"h-{kind}"

    hits = [Hit("license"), Hit("user"), Hit("license")]
    entry = corpus_trace("s.rag_corpus_records@x", T_PRIME, None, hits, 10, 1.0)
    assert {r.planned_day for r in entry.reads} == {T_PRIME} and all(r.observed_hash for r in entry.reads)
    with pytest.raises(DataIntegrityError, match="returned records of"):  # a record of another day: refused
        corpus_trace("s.rag_corpus_records@x", T_PRIME, None, [Hit("user", T)], 10, 1.0)
    assert entry.data_times == dict.fromkeys(ENTITY_CLASSES, T_PRIME)
    assert entry.note == "top 10 of every kind: 3 records"
    rows = {r.entity_class: r.rows for r in entry.reads}
    assert rows["assignments"] == 2 and rows["user_status"] == rows["cost_center_membership"] == 1
    assert sum(r.accesses for r in entry.reads) == 1  # one search, one cost
    narrow = corpus_trace("t", T_PRIME, ["license"], hits, 10, 1.0)
    assert narrow.data_times == {"assignments": T_PRIME} and narrow.note == "top 10 of license: 3 records"


def arm_plan(arm: str, world: str, t_prime: dt.date, t: dt.date, policy: str) -> ScenarioPlan:
    from churn_assets.arms.registry import arm_spec, define_scenario

    return plan_scenario(define_scenario(world, arm, policy, t_prime, t), arm_spec(arm).reads, load_registry())


def test_scenarios_of_the_new_arms_need_only_their_own_inputs() -> None:
    def assets(plan_inputs: tuple[ScenarioInput, ...]) -> dict[str, list[dt.date | None]]:
        out: dict[str, list[dt.date | None]] = {}
        for i in plan_inputs:
            out.setdefault(i.asset, []).append(i.day)
        return out

    world_level = {"ledger": [None], "warehouse_truth": [None], "warehouse_raw": [None], DBT_BUILD: [None]}
    rag = arm_plan("classic_rag", WORLD, T_PRIME, T, "tiered")
    assert assets(rag.inputs) == {**world_level, "contract_documents": [T_PRIME], "vector_index": [T_PRIME],
                                  "rag_index": [T_PRIME], "task_set": [T]}
    assert rag.served_vintage == dict.fromkeys(ENTITY_CLASSES, T_PRIME) and rag.refresh_days == {}
    ablation = arm_plan("grounding_no_source_routing", WORLD, T_PRIME, T, "tiered")
    assert ablation.inputs == rag.inputs and ablation.served_vintage == rag.served_vintage
    naive = arm_plan("naive", WORLD, T_PRIME, T, "tiered")
    assert assets(naive.inputs) == {**world_level, "operational_store": [T], "contract_documents": [T],
                                    "task_set": [T]}
    assert naive.served_vintage == dict.fromkeys(ENTITY_CLASSES, T)
    hier = arm_plan("hierarchical", WORLD, T_PRIME, T, "tiered")
    assert assets(hier.inputs) == {**world_level, "operational_store": [T], "contract_documents": [T_PRIME],
                                   "vector_index": [T_PRIME], "task_set": [T]}
    assert hier.served_vintage == hierarchical_vintage(T_PRIME, T)
    order = [i.asset for i in hier.inputs]
    assert order[:4] == ["ledger", "warehouse_truth", "warehouse_raw", DBT_BUILD] and order[-1] == "task_set"


def test_the_paper_runs_every_registered_arm() -> None:
    from churn_assets.arms.registry import ARMS
    from churn_assets.evaluation.paper import paper_cells

    assert sorted({arm for arm, _, _ in paper_cells()}) == sorted(ARMS)  # a new arm must reach the paper
