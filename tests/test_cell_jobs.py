"""`cells._jobs`: the job graph of input builds and cells is acyclic when a world's vector index and RAG corpus
are built on the same days (the paper's cells: classic RAG reads both), and each day's corpus comes after its
index in the per-world embedding chain."""

from __future__ import annotations

import datetime as dt

from churn_assets.freshness.scenario import RAG_INDEX, VECTOR_INDEX, ScenarioInput
from churn_assets.orchestration.cells import _jobs, _Prepared, _topological
from churn_assets.orchestration.scenario_materializer import Step, depends_on, plan_steps

WORLD = "w-s1-000000"
DAYS = (dt.date(2024, 3, 29), dt.date(2024, 4, 26))


def _ancestors(asset: str) -> frozenset[str]:
    return frozenset({VECTOR_INDEX}) if asset == RAG_INDEX else frozenset()


def test_same_day_index_and_corpus_chain_without_a_cycle() -> None:
    missing = [ScenarioInput(a, WORLD, d) for d in DAYS for a in (RAG_INDEX, VECTOR_INDEX)]
    steps = plan_steps(missing, _ancestors)
    needs = {s: {o for o in steps if depends_on(s, o, _ancestors)} for s in steps}
    prepared = _Prepared([], [], {}, {}, {}, steps, needs)
    jobs = _jobs(prepared, {})
    ordered = [j.id for j in _topological(jobs)]  # raised "form a cycle" before the fix
    labels = [(s.day, s.inputs[0].asset) for s in ordered if isinstance(s, Step)]
    assert labels == [(DAYS[0], VECTOR_INDEX), (DAYS[0], RAG_INDEX), (DAYS[1], VECTOR_INDEX), (DAYS[1], RAG_INDEX)]


def test_cells_that_call_the_saas_api_rank_before_corpus_cells_and_a_corpus_cell_asks_for_the_preload() -> None:
    from churn_assets.arms.registry import ARMS
    from churn_assets.orchestration.cells import Cell

    assert {name for name, spec in ARMS.items() if spec.searches_corpus} == {
        "classic_rag", "grounding_no_source_routing"}
    t_prime, t = DAYS
    cells = [Cell(WORLD, arm, "tiered", t_prime, t) for arm in ("classic_rag", "grounding", "naive")]
    prepared = _Prepared(cells, ["k0", "k1", "k2"], {}, {"k0": 0, "k1": 1, "k2": 2}, {"k0": [], "k1": [], "k2": []},
                         [], {})
    jobs = {j.id[1]: j for j in _jobs(prepared, {})}
    assert jobs["k0"].rank < jobs["k1"].rank == jobs["k2"].rank  # the SaaS cells are taken first
    assert all(j.args[2] is True for j in jobs.values())  # some cell needs the model: a preload may be asked for
    only_saas = _Prepared(cells[1:], ["k1", "k2"], {}, {"k1": 0, "k2": 1}, {"k1": [], "k2": []}, [], {})
    assert all(j.args[2] is False for j in _jobs(only_saas, {}))


def test_a_cell_asks_for_the_preload_only_when_the_corpus_cells_come_next() -> None:
    """The embedding model is loaded beside the last cells that call the SaaS API, not beside every worker's
    first cell (whose work before its first call it slowed)."""
    from churn_assets.orchestration.cells import Cell, _submitted_args

    t_prime, t = DAYS
    arms = ("grounding", "naive", "hierarchical", "classic_rag")
    cells = [Cell(WORLD, arm, "tiered", t_prime, t) for arm in arms]
    keys = [f"k{i}" for i in range(len(cells))]
    prepared = _Prepared(cells, keys, {}, {k: i for i, k in enumerate(keys)}, {k: [] for k in keys}, [], {})
    jobs = {j.id[1]: j for j in _jobs(prepared, {})}
    assert [k for k, j in jobs.items() if j.corpus] == ["k3"]
    pending = dict(jobs.items())

    def submit(key: str) -> bool:
        job = pending.pop(key)
        return bool(_submitted_args(job, {j.id: j for j in pending.values()}, workers=2)[2])

    assert submit("k0") is False  # two other cells that call the API are still waiting
    assert submit("k1") is True  # one is left: this worker's next cell is likely the corpus cell
    assert submit("k2") is True
    assert submit("k3") is True
    assert _submitted_args(jobs["k0"], {}, workers=2)[:2] == jobs["k0"].args[:2]
