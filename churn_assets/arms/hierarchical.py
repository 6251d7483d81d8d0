"""The `hierarchical` arm: a worker per source, and a coordinator that splits each retrieval among them.

Workers (`WORKERS`, the auditable table; the router's `RoutingMode.HIERARCHICAL` rules say where each view
is read):

- `warehouse`: user_status, cost_center_membership, assignments, prices, vendor_dims, consumption; reads the
  Mongo partition of T (`operational`) and the dbt as-of views at T (`live_warehouse`); data time T.
- `saas`: utilization, tickets; reads the SaaS API at T (`saas_origin`); data time T.
- `documents`: contract_terms; reads the `vector_index` partition of T' (`vector_lookup`); data time T'.

The agent asks its tools for rows as for any other arm. The coordinator (`Coordinator.retrieve`) decides which
workers to ask from the classes the requests name (`assign`), each worker executes its own requests against
its own source only (a request routed to another store is refused) and returns its partial answer (the rows
of its requests, one traced retrieval noted `worker <name>`), and the coordinator merges the partial answers
back into the order of the requests (`merge`) and leaves a `coordinator` trace entry naming the workers it
asked (no reads: no data time, no cost). Workers never see each other's rows; joins across sources happen
in the agent's computation over the merged rows.

Planned vintage: every class at T except `contract_terms` at T' (`hierarchical_vintage`, from the workers'
data times; docs/rules.md, "Planned vintage per arm"). With the deterministic agent it answers every task equal
to gold at that vintage; single-source tasks (no contract terms) equal gold at T.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from churn_assets.arms.agents.interface import Agent
from churn_assets.arms.base import ArmError, RouterArm
from churn_assets.fabric.sources import Sources
from churn_assets.freshness.scenario import (
    CONTRACT_DOCUMENTS,
    OPERATIONAL_STORE,
    VECTOR_INDEX,
    ArmReads,
    Scenario,
)
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.router import Router
from churn_assets.grounding.routes import RouterError, RoutingMode
from churn_assets.grounding.rows import Request, Row
from churn_assets.grounding.traces import COORDINATOR, TraceEntry
from churn_assets.world.calendar import Day
from churn_assets.world.events import ENTITY_CLASSES


@dataclass(frozen=True)
class Worker:
    """One source worker: the classes it answers for, the stores it may read, and whether its data time is
    T' (an index built at T') rather than T (a live source)."""

    name: str
    classes: tuple[str, ...]
    stores: tuple[str, ...]
    at_t_prime: bool = False


WORKERS: tuple[Worker, ...] = (
    Worker("warehouse", ("user_status", "cost_center_membership", "assignments", "prices", "vendor_dims",
                         "consumption"), ("operational", "warehouse")),
    Worker("saas", ("utilization", "tickets"), ("saas",)),
    Worker("documents", ("contract_terms",), ("vector_index",), at_t_prime=True),
)
WORKER_OF: dict[str, Worker] = {c: w for w in WORKERS for c in w.classes}  # every class has one (tested)


def hierarchical_vintage(t_prime: Day, t: Day) -> dict[str, Day]:
    """The arm's planned vintage: each class at its worker's data time (T, or T' for the documents)."""
    return {c: t_prime if WORKER_OF[c].at_t_prime else t for c in ENTITY_CLASSES}


# Live stores at T (Mongo; the as-of views are the world's dbt build), contract terms from the index of T'.
HIERARCHICAL_READS = ArmReads(((OPERATIONAL_STORE, "t"), (CONTRACT_DOCUMENTS, "t_prime"), (VECTOR_INDEX, "t_prime")),
                              hierarchical_vintage)


# ---------------------------------------------------------------------------------------------------
# the coordinator's decisions (pure)
# ---------------------------------------------------------------------------------------------------


def assign(requests: Sequence[Request]) -> dict[str, list[int]]:
    """Worker name -> the indices of the requests it answers, for the workers the requests' classes need
    (in `WORKERS` order; a worker no request needs is not asked)."""
    out: dict[str, list[int]] = {w.name: [] for w in WORKERS}
    for i, r in enumerate(requests):
        out[WORKER_OF[r.entity_class].name].append(i)
    return {name: idx for name, idx in out.items() if idx}


def merge(n: int, parts: Mapping[str, tuple[Sequence[int], Sequence[list[Row]]]]) -> list[list[Row]]:
    """The workers' partial answers (worker -> (request indices, row lists)) back in request order; every
    request must be answered exactly once."""
    out: list[list[Row] | None] = [None] * n
    for name, (indices, rows) in parts.items():
        if len(indices) != len(rows):
            raise ArmError(f"worker {name} answered {len(rows)} of its {len(indices)} requests")
        for i, r in zip(indices, rows, strict=True):
            if out[i] is not None:
                raise ArmError(f"request {i} was answered twice (again by worker {name})")
            out[i] = r
    missing = [i for i, r in enumerate(out) if r is None]
    if missing:
        raise ArmError(f"requests {missing} were answered by no worker")
    return [r for r in out if r is not None]


# ---------------------------------------------------------------------------------------------------
# workers and the coordinator at work
# ---------------------------------------------------------------------------------------------------


def ask_worker(worker: Worker, router: Router, requests: Sequence[Request], note: str
               ) -> tuple[list[list[Row]], TraceEntry]:
    """One worker's partial answer: its requests read from its own stores, one traced retrieval."""
    for r in requests:
        if r.entity_class not in worker.classes:
            raise ArmError(f"worker {worker.name} does not answer for class {r.entity_class}")
        route = router.route(r)
        if route.store not in worker.stores:
            raise RouterError(f"worker {worker.name} reads {', '.join(worker.stores)}, not {route.store} "
                              f"({r.describe()})")
    return router.retrieve(requests, note=f"worker {worker.name}" + (f" ({note})" if note else ""))


class Coordinator:
    """The agent's tools on the hierarchical arm: splits each retrieval among the workers, merges their rows,
    and keeps every trace (the workers' retrievals, then its own entry)."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.traces: list[TraceEntry] = []

    def retrieve(self, requests: Sequence[Request], note: str = "") -> list[list[Row] | None]:
        if not requests:
            return []
        by_worker = assign(requests)
        parts: dict[str, tuple[Sequence[int], Sequence[list[Row]]]] = {}
        for worker in WORKERS:
            if worker.name in by_worker:
                indices = by_worker[worker.name]
                rows, entry = ask_worker(worker, self.router, [requests[i] for i in indices], note)
                self.traces.append(entry)
                parts[worker.name] = (indices, rows)
        started = time.perf_counter()
        merged = merge(len(requests), parts)
        asked = ", ".join(parts)
        self.traces.append(TraceEntry(COORDINATOR, (), (time.perf_counter() - started) * 1000.0,
                                      note=f"coordinator: asked workers {asked}; merged {len(requests)} row lists"
                                           + (f" ({note})" if note else "")))
        return list(merged)


class HierarchicalArm(RouterArm):
    name = "hierarchical"

    def __init__(self, scenario: Scenario, registry: Registry, sources: Sources, agent: Agent | None = None) -> None:
        served = hierarchical_vintage(scenario.t_prime, scenario.t)
        super().__init__(scenario, Router(registry, sources, t=scenario.t, served=served,
                                          mode=RoutingMode.HIERARCHICAL))
        if agent is not None:
            self.agent = agent

    def tools(self, question: str) -> Coordinator:
        return Coordinator(self.router)
