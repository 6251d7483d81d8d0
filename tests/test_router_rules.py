"""The router's rules, the traces and the arms' class filters (pure: no store is opened)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pytest

from churn_assets.arms.base import TracingTools
from churn_assets.arms.grounding import keyword_classes
from churn_assets.freshness.planning import served_vintage
from churn_assets.freshness.policies import Off, Tiered
from churn_assets.grounding.readers.vector_index import contract_from_chunks
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.routes import (
    STAGED_GAPS,
    RouteRefused,
    RouterError,
    RoutingMode,
    check_relation,
    route_for,
)
from churn_assets.grounding.rows import VIEWS, Request, Row
from churn_assets.grounding.traces import (
    FEDERATED_JOIN,
    LIVE_WAREHOUSE,
    SAAS_ORIGIN,
    STAGED_SQL,
    VECTOR_LOOKUP,
    Read,
    TraceEntry,
    disagreements,
    route_of,
)
from churn_assets.grounding.traces import (
    served_vintage as traced_vintage,
)
from churn_assets.tasks.templates import template

T_PRIME, T = dt.date(2024, 3, 29), dt.date(2024, 4, 27)  # the paper's D+28 window
WORLD = "default-s42-3f9a1c"
REGISTRY = load_registry()
TIERED = served_vintage(REGISTRY, T_PRIME, T, Tiered())


def test_grounding_reads_staged_classes_at_their_served_day_and_live_ones_at_t() -> None:
    routes = {v: route_for(v, REGISTRY, RoutingMode.REGISTRY, TIERED, T) for v in VIEWS}
    for view in ("users", "memberships", "cost_centers", "holdings", "prices", "vendors"):
        r = routes[view]
        cls = REGISTRY[{"users": "user_status", "memberships": "cost_center_membership",
                        "cost_centers": "cost_center_membership", "holdings": "assignments", "prices": "prices",
                        "vendors": "vendor_dims"}[view]]
        assert (r.kind, r.store, r.relation, r.day, r.layer) == (STAGED_SQL, "staging", cls.staged_table,
                                                                 TIERED[cls.name], "staging")
    # Facts the staged tables do not copy: the warehouse as of the class's served day, never T.
    assert routes["licenses"].day == TIERED["assignments"] and routes["licenses"].relation == STAGED_GAPS["licenses"]
    assert routes["products"].day == TIERED["prices"] == dt.date(2024, 4, 22)
    assert (routes["contracts"].kind, routes["contracts"].store, routes["contracts"].day) == (
        VECTOR_LOOKUP, "vector_index", T_PRIME)
    assert (routes["consumption"].kind, routes["consumption"].relation, routes["consumption"].day) == (
        LIVE_WAREHOUSE, "consumption_as_of", T)
    for view in ("usage", "tickets"):
        assert (routes[view].kind, routes[view].store, routes[view].day) == (SAAS_ORIGIN, "saas", T)


def test_the_off_policy_moves_every_staged_read_to_t_prime() -> None:
    off = served_vintage(REGISTRY, T_PRIME, T, Off())
    for view in VIEWS:
        r = route_for(view, REGISTRY, RoutingMode.REGISTRY, off, T)
        assert r.day == (T if r.kind in (SAAS_ORIGIN, LIVE_WAREHOUSE) else T_PRIME), view


def test_naive_reads_everything_live_at_t_and_never_staging() -> None:
    everything_at_t = dict.fromkeys(REGISTRY.classes, T)
    for view in VIEWS:
        r = route_for(view, REGISTRY, RoutingMode.LIVE, everything_at_t, T)
        assert r.day == T and r.store != "staging" and r.store != "vector_index" and r.layer != "staging"
    assert route_for("users", REGISTRY, RoutingMode.LIVE, everything_at_t, T).store == "operational"
    assert route_for("contracts", REGISTRY, RoutingMode.LIVE, everything_at_t, T).store == "documents"


def test_the_router_never_plans_and_never_reads_the_future() -> None:
    with pytest.raises(RouterError, match="read at T"):
        route_for("tickets", REGISTRY, RoutingMode.REGISTRY, {**TIERED, "tickets": T_PRIME}, T)
    with pytest.raises(RouterError, match="after T"):
        route_for("prices", REGISTRY, RoutingMode.REGISTRY, {**TIERED, "prices": T + dt.timedelta(days=1)}, T)
    with pytest.raises(RouterError, match="no day for staged class"):
        route_for("vendors", REGISTRY, RoutingMode.REGISTRY, {c: d for c, d in TIERED.items() if c != "vendor_dims"}, T)


@pytest.mark.parametrize(("schema", "relation"), [
    ("default_s42_3f9a1c_truth", "ledger"),
    ("default_s42_3f9a1c_raw", "users"),
    ("default_s42_3f9a1c_analytics", "fct_price"),  # a mart: rows run past any as-of day
    ("default_s7_000000_staging", "prices"),  # another world
    ("public", "anything"),
])
def test_relations_outside_staging_and_as_of_views_are_refused(schema: str, relation: str) -> None:
    with pytest.raises(RouteRefused, match="refused"):
        check_relation(WORLD, schema, relation)


def test_staging_tables_and_as_of_views_are_readable() -> None:
    check_relation(WORLD, "default_s42_3f9a1c_staging", "prices")
    check_relation(WORLD, "default_s42_3f9a1c_analytics", "prices_history_as_of")


# ---------------------------------------------------------------------------------------------------
# traces
# ---------------------------------------------------------------------------------------------------


def _read(store: str, cls: str | None, day: dt.date, rows: int = 3) -> Read:
    return Read(store, f"{store}.t", cls, day, rows)


def test_route_of_a_retrieval() -> None:
    reads = [_read("staging", "assignments", T), _read("saas", "utilization", T)]
    assert route_of(reads[:1], [STAGED_SQL]) == STAGED_SQL
    assert route_of(reads, [STAGED_SQL, SAAS_ORIGIN]) == FEDERATED_JOIN


def test_trace_data_times_cost_and_disagreements() -> None:
    entry = TraceEntry(FEDERATED_JOIN, (_read("staging", "assignments", T - dt.timedelta(days=1), 1000),
                                        _read("saas", "utilization", T, 10)), latency_ms=12.0)
    assert entry.data_times == {"assignments": T - dt.timedelta(days=1), "utilization": T}
    assert entry.cost_units == pytest.approx(1.0 + 5.0 + 1.01)
    assert entry.to_json()["tables"] == ["staging.t", "saas.t"]
    plan = {"assignments": T - dt.timedelta(days=1), "utilization": T}
    assert disagreements([entry], plan) == []
    assert disagreements([entry], {**plan, "assignments": T}) != []
    assert "does not name" in disagreements([entry], {"utilization": T})[0]
    with pytest.raises(ValueError, match="two data times"):
        traced_vintage([entry, TraceEntry(STAGED_SQL, (_read("staging", "assignments", T),))])
    with pytest.raises(ValueError, match="two data times"):
        _ = TraceEntry(STAGED_SQL, (_read("staging", "prices", T), _read("staging", "prices", T_PRIME))).data_times


class _StubRouter:
    def __init__(self) -> None:
        self.asked: list[Request] = []

    def retrieve(self, requests: Sequence[Request], note: str = "") -> tuple[list[list[Row]], TraceEntry]:
        self.asked.extend(requests)
        reads = tuple(_read("staging", r.entity_class, T) for r in requests)
        return [[] for _ in requests], TraceEntry(STAGED_SQL, reads)


def test_tools_serve_only_the_classes_an_arm_may_read() -> None:
    router = _StubRouter()
    tools = TracingTools(router, frozenset({"assignments"}))  # type: ignore[arg-type]
    got = tools.retrieve([Request("licenses"), Request("prices")], note="x")
    assert got == [[], None]
    assert [r.view for r in router.asked] == ["licenses"] and len(tools.traces) == 1
    assert tools.retrieve([Request("prices")]) == [None] and len(tools.traces) == 1  # nothing read, no trace


def test_keyword_classes_miss_what_a_computed_measure_needs() -> None:
    spend = template("t2_cost_center_spend").render({"cost_center": "cc_001"})
    assert keyword_classes(spend) == {"assignments", "cost_center_membership"}  # no prices, no user status
    assert not set(template("t2_cost_center_spend").classes) <= keyword_classes(spend)
    vendor = template("t1_vendor_name").render({"vendor": "vnd_001"})
    assert keyword_classes(vendor) == {"vendor_dims"}
    idle = template("t2_idle_license_cost").render({"days": 7})
    assert set(template("t2_idle_license_cost").classes) <= keyword_classes(idle)


def test_contract_rows_from_chunks() -> None:
    summary = ("## Contract summary\n\n| Field | Value |\n| --- | --- |\n| Contract ID | ctr_0001 |\n"
               "| Vendor ID | vnd_002 |\n| Renewal notice | 60 days |\n")
    history = ("## Schedule B: Term history\n\n| # | Event | Recorded on | Effective on | Expires on | Term (months) "
               "| Annual value (USD) | Committed seats |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"
               "| 1 | Signed | 2024-01-01 | 2023-06-01 | 2024-05-31 | 12 | 1,200.00 | 5 |\n"
               "| 2 | Renewed | 2024-04-01 | 2024-06-01 | 2025-05-31 | 12 | not stated | 6 |\n")
    row = contract_from_chunks("ctr_0001", [("Contract summary", summary), ("Schedule B: Term history", history)])
    assert (row.vendor_id, row.renewal_notice_days) == ("vnd_002", 60)
    assert [(t.expires_on.isoformat(), t.annual_value_usd, t.committed_seats) for t in row.terms] == [
        ("2024-05-31", 1200.0, 5), ("2025-05-31", None, 6)]


class _RefusingRouter(_StubRouter):
    served: dict[str, dt.date] = dict.fromkeys(REGISTRY.classes, T)

    def retrieve(self, requests: Sequence[Request], note: str = "") -> tuple[list[list[Row]], TraceEntry]:
        from churn_assets.fabric.saas_client import TransportError

        raise TransportError("GET /v1/tenants/x/tickets failed after 7 attempt(s): 429", attempts=7, last_status=429)


def test_a_source_that_keeps_refusing_is_a_transport_failure_not_an_answer() -> None:
    from churn_assets.arms.base import RouterArm
    from churn_assets.freshness.scenario import Scenario
    from churn_assets.tasks.task_set import Task

    arm = RouterArm(Scenario(WORLD, "grounding", "tiered", T_PRIME, T), _RefusingRouter())  # type: ignore[arg-type]
    question = template("t1_tickets_opened").render({"days": 7})
    answer = arm.answer(Task("q1", WORLD, T.isoformat(), "t1_tickets_opened", {"days": 7}, question))
    assert answer.transport_error is not None and "429" in answer.transport_error
    assert answer.value is None and answer.traces == ()
    with pytest.raises(Exception, match="evaluates at"):
        arm.answer(Task("q2", WORLD, T_PRIME.isoformat(), "t1_tickets_opened", {"days": 7}, question))
