"""What each stage of `churnbench bench` measures, each the way the pipeline runs it.

A stage is a function `(ctx, repeats) -> Measured`, run in a process of its own (`child.py`); what it needs
that is not measured (a loaded ledger, the embedding model, a built warehouse) is prepared before its clock
starts. Ledger-side stages (generate, verify, fold, exposure) read only the bench's ledger folder; the pipeline
stages run on the state folder the cold `paper` of the same bench run built (every input of the nine cells
exists there), and write what they rebuild under a world id of their own where a rebuild would disturb the
paper's world (vector index, RAG corpus, operational store, documents).

Each stage imports what it runs inside its function: a stage's process measures its peak resident memory, which
module-level imports of every stage's dependencies (Dagster, the fold, the services) would inflate alike.
"""

from __future__ import annotations

import datetime as dt
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LEDGER_STAGES = ("generate", "verify", "fold", "exposure", "exposure_window")
PIPELINE_STAGES = ("truth_raw", "dbt", "staged", "vector_index", "rag_corpus", "operational", "documents", "eval")
PAPER_STAGES = ("paper_cold", "paper_cold_serial", "paper_warm")
STAGES = (*LEDGER_STAGES, *PAPER_STAGES, *PIPELINE_STAGES)  # the order a bench runs them in
BENCH_WORLD_NAME = "bench"  # world name of the rebuilt index, corpus, store and documents (`bench<scale>-s0-...`)


@dataclass
class Context:
    """What a stage is given (JSON between the runner and the child)."""

    scale: float
    days: int
    ledger_dir: str  # the bench's ledger of this scale (generate writes it)
    state_dir: str  # the state folder the cold paper built
    world_id: str  # the paper's world in it
    overrides: list[str] = field(default_factory=list)  # the world config's `--set` lines of this scale

    def config(self) -> Any:
        from churn_assets.world.config import load_config

        return load_config(days=self.days, overrides=list(self.overrides))

    @property
    def t(self) -> dt.date:
        from churn_assets.evaluation.paper import T

        config = self.config()
        return T if config.start <= T <= config.end else config.end

    def windows(self) -> dict[str, dt.date]:
        """The paper's T' per window (D+1, D+28), clipped to the world's first day on a short world."""
        from churn_assets.evaluation.paper import WINDOWS, T

        start = self.config().start
        return {w: max(start, self.t - (T - d)) for w, d in WINDOWS.items()}


_CPU: list[float] = []  # CPU seconds of this process per timed repeat (`_timed`), for `Measured.to_json`


@dataclass
class Measured:
    """Seconds of each repeat (the median is the figure) and what else the stage reports. The CPU seconds of
    this process per repeat go beside them: on a machine others load, wall time grows with the load and CPU
    time says what the stage itself cost (work in other processes, dbt or the servers, is not in it)."""

    seconds: list[float]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        cpu = {"cpu_seconds": [round(c, 4) for c in _CPU], "cpu_median": round(statistics.median(_CPU), 4)} \
            if _CPU else {}
        return {"seconds": [round(s, 4) for s in self.seconds], "median": round(statistics.median(self.seconds), 4),
                **cpu, "extra": self.extra}


def _timed(fn: Callable[[int], Any], repeats: int) -> tuple[list[float], Any]:
    out, last = [], None
    for i in range(repeats):
        started, cpu = time.perf_counter(), time.process_time()
        last = fn(i)
        out.append(time.perf_counter() - started)
        _CPU.append(time.process_time() - cpu)
    return out, last


def scaled_overrides(scale: float) -> list[str]:
    """`--set` lines multiplying every daily rate of the default world config by `scale` (day-0 sizes
    unchanged): the `rates_per_day` of every event kind, as the `ttl-grid` sweep's multipliers do, and the
    usage events per day (most of a world's events: a 10x world has ~10x the events)."""
    if scale == 1:
        return []
    from churn_assets.world.config import load_config

    data = load_config().data
    lines = [f"rates_per_day.{k}={round(float(v) * scale, 6)}" for k, v in sorted(data["rates_per_day"].items())]
    per_day = data["consumption"]["events_per_day"]
    lines.append(f"consumption.events_per_day={round(per_day * scale)}")
    return lines


def _records(ctx: Context, *, packed: bool = False) -> Any:
    from churn_assets.world.ledger import load_ledger

    return load_ledger(ctx.ledger_dir, packed=packed)


# --- ledger-side stages ----------------------------------------------------------------------------


def generate(ctx: Context, repeats: int) -> Measured:
    """Simulate the world and write its ledger (hash chain, manifest), as the `ledger` asset does."""
    from churn_assets.world.simulator import generate_ledger

    config = ctx.config()
    out = Path(ctx.ledger_dir)
    seconds, manifest = _timed(lambda _i: generate_ledger(config, out), repeats)
    return Measured(seconds, {"events": manifest.count, "world_id": config.world_id})


def verify(ctx: Context, repeats: int) -> Measured:
    """Read and verify the ledger (schema, order, hash chain, manifest) as a stream, holding no record
    (`world.ledger.LedgerStream`; `load_ledger` is the same checks keeping the records)."""
    from churn_assets.world.ledger import LedgerStream

    def read(_i: int) -> int:
        stream = LedgerStream(ctx.ledger_dir)
        for _ in stream:
            pass
        return stream.count

    seconds, count = _timed(read, repeats)
    return Measured(seconds, {"events": count})


def fold(ctx: Context, repeats: int) -> Measured:
    """The fold walker over the whole timeline (every day's state, as the staged caches and gold see it), over
    the verified ledger stream: read + verify + walk, no record held (the walk alone: this minus `verify`)."""
    from churn_assets.world.fold import walk_ledger
    from churn_assets.world.ledger import LedgerStream

    def walk(_i: int) -> int:
        stream = LedgerStream(ctx.ledger_dir)
        fmt = stream.format_version or 2
        return sum(1 for _ in walk_ledger(stream, format_version=fmt))

    seconds, days = _timed(walk, repeats)
    return Measured(seconds, {"days": days})


def exposure(ctx: Context, repeats: int) -> Measured:
    """The exposure-only path of the sweeps (`sweeps/exposure_cells.exposure_of_world`): the ledger read packed,
    the task set at T, then plan, exposure and prediction of the paper's 2x2 (grounding tiered and off at D+1 and
    D+28)."""
    from churn_assets.arms.registry import TIERED_ARM, UNTIERED_ARM
    from churn_assets.deployment import task_settings
    from churn_assets.grounding.registry import load_registry
    from churn_assets.sweeps.exposure_cells import world_exposure
    from churn_assets.sweeps.spec import Cell

    loaded, config, settings = _records(ctx, packed=True), ctx.config(), task_settings()
    cells = [Cell(config.world_id, arm, policy, t_prime, ctx.t) for t_prime in ctx.windows().values()
             for arm, policy in ((TIERED_ARM, "tiered"), (UNTIERED_ARM, "off"))]

    def run(_i: int) -> list[dict[str, Any]]:
        from churn_assets.evaluation import exposure as exposure_module

        exposure_module.RATES.clear()  # each repeat measures the rates again, as a new process would
        return world_exposure(config, loaded.records, cells, load_registry(), task_count=settings.count,
                              task_seed=settings.seed, format_version=loaded.format_version)

    seconds, rows = _timed(run, repeats)
    return Measured(seconds, {"cells": len(cells), "exposure": [r["exposure"] for r in rows]})


WINDOW_POLICIES = ("tiered", "off", "uniform:8", "proportional:8")  # the issue-34 table's four policies


def exposure_window(ctx: Context, repeats: int) -> Measured:
    """The arrival-averaged exposure of `churnbench exposure --window 28` (`evaluation/window.world_windows`), in
    this one process (no worker): the ledger read packed, the task set at T, the answer-change rates, then for
    each of four policies the exposure and prediction of each of the 28 days ending at T with T' = T - 29 (the
    paper's D+28 window), their means, bootstrap intervals and the window prediction."""
    from churn_assets.deployment import task_settings
    from churn_assets.evaluation.paper import WINDOW_DAYS
    from churn_assets.evaluation.window import Window, world_windows
    from churn_assets.grounding.registry import load_registry

    loaded, config, settings = _records(ctx, packed=True), ctx.config(), task_settings()
    window = Window(ctx.windows()["D+28"], min(WINDOW_DAYS, (ctx.t - ctx.windows()["D+28"]).days + 1), ctx.t)

    def run(_i: int) -> list[Any]:
        from churn_assets.evaluation import exposure as exposure_module

        exposure_module.RATES.clear()  # each repeat measures the rates again, as a new process would
        return world_windows(loaded.records, config.world_id, window, WINDOW_POLICIES, load_registry(),
                             task_count=settings.count, task_seed=settings.seed, format_version=loaded.format_version,
                             predict=True)

    seconds, found = _timed(run, repeats)
    return Measured(seconds, {"workers": 1, "days": window.days, "t_prime": window.t_prime.isoformat(),
                              "policies": {w.policy: {"mean": round(w.exposure.mean, 2),
                                                      "interval_90": [round(x, 2) for x in w.exposure.interval_90],
                                                      "min": w.exposure.low, "max": w.exposure.high,
                                                      "prediction": None if w.prediction is None
                                                      else round(w.prediction, 2)} for w in found}})


# --- pipeline stages (on the state folder the cold paper built) -----------------------------------


def _session(ctx: Context) -> Any:
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.state import StatePaths

    return open_session(StatePaths.resolve(ctx.state_dir))


def _bench_world(ctx: Context) -> str:
    return f"{BENCH_WORLD_NAME}{int(ctx.scale) if ctx.scale == int(ctx.scale) else ctx.scale}-s0-000000".replace(
        ".", "_")


def truth_raw(ctx: Context, repeats: int) -> Measured:
    """Read and verify the ledger, project the raw tables, load truth and raw (`warehouse_truth` and
    `warehouse_raw`), reloading every repeat (`force`: the idempotent skip is not what is timed)."""
    from churn_assets.fabric.postgres import connection, replace_tables, schema_name
    from churn_assets.fabric.truth import load_truth
    from churn_assets.fabric.warehouse_raw import META_TABLE, WorldInfo, project_raw
    from churn_assets.world.ledger import load_ledger

    with _session(ctx) as session:
        ledger_dir = session.paths.ledger_dir(ctx.world_id)
        config = ctx.config()

        def load(_i: int) -> None:
            loaded = load_ledger(ledger_dir)
            info = WorldInfo(ctx.world_id, config.start, config.end, head_hash=loaded.head_hash)
            projection = project_raw(loaded.records, info)
            with connection(session.urls.warehouse, autocommit=True) as conn:
                load_truth(conn, ctx.world_id, loaded, force=True)
                replace_tables(conn, world_id=ctx.world_id, schema=schema_name(ctx.world_id, "raw"),
                               tables=projection.table_data(), meta_table=META_TABLE, load_key=info.load_key(),
                               force=True)

        seconds, _ = _timed(load, repeats)
    return Measured(seconds)


def dbt(ctx: Context, repeats: int) -> Measured:
    """The `analytics/*` assets of the world materialized in process (`dbt build` with every dbt test, then the
    parity checks), as `churnbench project` and the paper's inputs run them."""
    import contextlib
    import io

    from churn_assets.orchestration.assets.dbt import analytics_dbt
    from churn_assets.orchestration.cells import load_definitions
    from churn_assets.orchestration.materialize import materialize

    keys = sorted(k.to_user_string() for k in analytics_dbt.keys)
    with _session(ctx) as session:
        defs = load_definitions(session.paths)

        def build(_i: int) -> None:
            with contextlib.redirect_stdout(io.StringIO()):  # dagster-dbt echoes dbt's log
                materialize(session, defs, keys, [ctx.world_id])

        seconds, _ = _timed(build, repeats)
    return Measured(seconds, {"assets": len(keys)})


def staged(ctx: Context, repeats: int) -> Measured:
    """One staged partition per class (`staged_<class>` with its blocking check) for days the paper did not
    build; the figure is the median over classes and repeats, each class's median in `per_class`."""
    from churn_assets.orchestration.assets.staging import STAGED_SPECS
    from churn_assets.orchestration.cells import load_definitions
    from churn_assets.orchestration.materialize import materialize
    from churn_assets.orchestration.partitions import world_day_key

    config = ctx.config()
    with _session(ctx) as session:
        defs = load_definitions(session.paths)
        per_class: dict[str, list[float]] = {}
        for spec in STAGED_SPECS:
            for i in range(repeats):
                day = min(config.end, config.start + dt.timedelta(days=3 + i))
                [r] = materialize(session, defs, [spec.asset_name], [world_day_key(ctx.world_id, day)])
                per_class.setdefault(spec.class_name, []).append(r.seconds)
    every = [s for v in per_class.values() for s in v]
    return Measured(every, {"per_class": {c: round(statistics.median(v), 3) for c, v in per_class.items()}})


def _documents(records: Any, day: dt.date, format_version: int) -> dict[str, str]:
    from contracts.facts import contract_facts_as_of
    from contracts.render import render_markdown

    return {f.contract_id: render_markdown(f) for f in contract_facts_as_of(records, day,
                                                                            format_version=format_version)}


def _embedding_days(ctx: Context) -> tuple[dt.date, dt.date]:
    second = ctx.t
    return second - dt.timedelta(days=1), second


def vector_index(ctx: Context, repeats: int) -> Measured:
    """The vector index of a day's contracts from an empty store (every chunk embedded), then the next day (only
    what changed is embedded); the embedding model loaded before the clock starts. Median of each."""
    return _embeddings(ctx, repeats, corpus=False)


def rag_corpus(ctx: Context, repeats: int) -> Measured:
    """The RAG corpus of a day after that day's index (the pipeline's order: its contract chunks are embedded
    already: fold + serialise + embed + store), then the next day."""
    return _embeddings(ctx, repeats, corpus=True)


def _embeddings(ctx: Context, repeats: int, *, corpus: bool) -> Measured:
    from churn_assets.fabric.postgres import connection
    from churn_assets.grounding.embeddings import default_encoder, torch_threads
    from churn_assets.grounding.rag_corpus import build_rag_corpus
    from churn_assets.grounding.vector_index import build_vector_index, drop_world_vectors
    from churn_assets.world.fold import fold_ledger

    loaded = _records(ctx)
    world = _bench_world(ctx)
    first, second = _embedding_days(ctx)
    docs = {d: _documents(loaded.records, d, loaded.format_version) for d in (first, second)}
    encoder = default_encoder()
    encoder.load()
    firsts: list[float] = []
    nexts: list[float] = []
    extra: dict[str, Any] = {"torch_threads": torch_threads(), "contracts": len(docs[first])}
    with _session(ctx) as session, connection(session.urls.warehouse, autocommit=True) as conn:
        for _ in range(repeats):
            drop_world_vectors(conn, world)
            for day, out in ((first, firsts), (second, nexts)):
                if corpus:
                    build_vector_index(conn, world, day, docs[day], encoder)
                started = time.perf_counter()
                if corpus:
                    state = fold_ledger(loaded.records, day, format_version=loaded.format_version)
                    corpus_built = build_rag_corpus(conn, world, day, state, docs[day], encoder)
                    extra["records"], embedded = corpus_built.records, corpus_built.embedded
                else:
                    index_built = build_vector_index(conn, world, day, docs[day], encoder)
                    extra["chunks"], embedded = index_built.chunks, index_built.embedded
                out.append(time.perf_counter() - started)
                extra[f"embedded_{'first' if day == first else 'next'}"] = embedded
        drop_world_vectors(conn, world)
    extra["next_day"] = {"seconds": [round(s, 3) for s in nexts], "median": round(statistics.median(nexts), 3)}
    return Measured(firsts, extra)


def operational(ctx: Context, repeats: int) -> Measured:
    """One operational-store partition with the ledger held (what each partition of a backfill costs): fold as
    of the day, project, write the day's database (`operational_store`)."""
    from churn_assets.fabric.mongo import write_partition
    from churn_assets.fabric.operational import INDEXES, OPERATIONAL_SCHEMA_VERSION, project_operational
    from churn_assets.services import mongo_client
    from churn_assets.world.fold import fold_ledger

    loaded = _records(ctx)
    world = _bench_world(ctx)
    with _session(ctx) as session:
        client = mongo_client(session.urls.mongodb)
        try:
            def one(i: int) -> int:
                day = ctx.t - dt.timedelta(days=i)
                state = fold_ledger(loaded.records, day, format_version=loaded.format_version)
                written = write_partition(client, world, day, project_operational(state, day), indexes=INDEXES,
                                          force=True, content_key={"schema_version": OPERATIONAL_SCHEMA_VERSION,
                                                                   "ledger_head_hash": loaded.head_hash or ""})
                return sum(written.counts.values())

            seconds, documents = _timed(one, repeats)
            for i in range(repeats):
                client.drop_database(_operational_db(world, ctx.t - dt.timedelta(days=i)))
        finally:
            client.close()
    return Measured(seconds, {"documents": documents})


def _operational_db(world: str, day: dt.date) -> str:
    from churn_assets.fabric.mongo import database_name

    return database_name(world, day)


def documents(ctx: Context, repeats: int) -> Measured:
    """One contract-documents partition with the ledger held: every contract as of T rendered (Markdown + PDF)
    and the day written atomically with its manifest (`contract_documents`)."""
    from contracts.build import build_day

    loaded = _records(ctx)
    tmp = Path(tempfile.mkdtemp(prefix="bench-documents-"))
    try:
        seconds, built = _timed(lambda i: build_day(loaded.records, _bench_world(ctx), ctx.t, tmp / str(i),
                                                    format_version=loaded.format_version), repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Measured(seconds, {"contracts": len(built.facts)})


def eval_arms(ctx: Context, repeats: int) -> Measured:
    """One evaluation per arm at D+28 (the paper's cells; its inputs built by the cold paper): every task
    answered through the arm and scored, as `eval_run` does, into a results folder of its own (so nothing is
    reused), with SaaS latency off (the SaaS API's `unlimited` plan; `repeats` times) and with the `default`
    profile (once). The figure is the median over arms and repeats with latency off; tasks/s per arm and profile
    in `per_arm`."""
    from churn_assets.arms.registry import make_arm
    from churn_assets.evaluation.exposure import run_exposure
    from churn_assets.evaluation.results import ResultsStore
    from churn_assets.evaluation.runner import RunSpec, evaluate
    from churn_assets.fabric.roles import arm_secret, prepare_arm
    from churn_assets.fabric.sources import close_sources, connect_sources
    from churn_assets.fabric.warehouse_content import verified_views
    from churn_assets.grounding.embeddings import default_encoder, model_load_seconds
    from churn_assets.grounding.registry import load_registry
    from churn_assets.grounding.routes import warehouse_views
    from churn_assets.orchestration.scenario_inputs import scenario_plan
    from churn_assets.orchestration.world_registry import load_world_config
    from churn_assets.services import saas_api_key
    from churn_assets.tasks.gold import GoldResolver
    from churn_assets.tasks.task_set import read_tasks, task_set_hash

    cells = _paper_scenarios(ctx)
    profiles = ["unlimited", "default"]
    per_arm: dict[str, dict[str, float]] = {}
    off_seconds: list[float] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-eval-"))
    try:
        with _session(ctx) as session:
            paths, urls = session.paths, session.urls
            config = load_world_config(paths, ctx.world_id)
            try:  # a SaaS deployment of its own (CHURNBENCH_SAAS_URL) may issue no key on the `unlimited` plan
                saas_api_key(paths, "unlimited", world_id=ctx.world_id)
            except Exception:
                profiles = ["default"]
            from churn_assets.world.ledger import load_ledger

            loaded = load_ledger(paths.ledger_dir(ctx.world_id))
            resolver = GoldResolver(loaded.records, format_version=loaded.format_version)
            # The corpus arms' embedding model, loaded before any clock starts (once per process, as every
            # `eval_run` pays it once): its load is reported beside the rates, not inside the first arm's.
            default_encoder().load()
            warehouse_secret = arm_secret(paths.arm_secret_file)  # the world's arm role, as eval_run connects
            prepare_arm(urls.warehouse, ctx.world_id, warehouse_secret)
            for label, scenario in cells:
                plan = scenario_plan(session, scenario)
                tasks = read_tasks(paths.task_set_file(ctx.world_id, scenario.t))
                spec = RunSpec(scenario, config.config_hash, task_set_hash(tasks), plan)
                for profile in profiles:
                    times = []
                    # The default profile's latency is injected (50 ms a request): one repeat says its rate.
                    for i in range(repeats if profile == "unlimited" else 1):
                        sources = connect_sources(ctx.world_id, warehouse_url=urls.warehouse, mongo_url=urls.mongodb,
                                                  saas_url=urls.saas,
                                                  saas_key=saas_api_key(paths, profile, world_id=ctx.world_id),
                                                  documents_root=paths.contracts_root(ctx.world_id),
                                                  warehouse_secret=warehouse_secret)
                        try:
                            sources.warehouse_content = verified_views(urls.warehouse, ctx.world_id,
                                                                       warehouse_views(load_registry()))
                            arm = make_arm(scenario, sources, served=plan.served_vintage)
                            run = run_exposure(loaded.records, tasks, anchor=scenario.t, t_prime=scenario.t_prime,
                                               vintage=arm.planned_vintage, resolver=resolver)
                            store = ResultsStore(tmp / f"{label}-{profile}-{i}")
                            started = time.perf_counter()
                            evaluate(arm, tasks, resolver, store, spec, exposure=run, code=f"bench{i}")
                            times.append(time.perf_counter() - started)
                        finally:
                            close_sources(sources)
                    median = statistics.median(times)
                    name = "latency_off" if profile == "unlimited" else profile
                    per_arm.setdefault(label, {})[f"tasks_per_s_{name}"] = round(len(tasks) / median, 1)
                    if profile == "unlimited":
                        off_seconds += [s / len(tasks) * 100 for s in times]  # seconds per 100 tasks
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    first = "tasks_per_s_latency_off" if "unlimited" in profiles else "tasks_per_s_default"
    if not off_seconds:  # no latency-off key: the default profile's figures stand in, and say so
        off_seconds = [100 / min(v[first] for v in per_arm.values())]
    return Measured(off_seconds, {"unit": "seconds per 100 tasks, latency off", "per_arm": per_arm,
                                  "embedding_model_load_seconds": round(model_load_seconds() or 0.0, 2),
                                  f"slowest_arm_{first}": min(v[first] for v in per_arm.values())})


def _paper_scenarios(ctx: Context) -> list[tuple[str, Any]]:
    """(label, scenario) of the paper's D+28 cells: every arm tiered, and the off ablation."""
    from churn_assets.arms.registry import define_scenario
    from churn_assets.evaluation.paper import paper_cells

    d28 = ctx.windows()["D+28"]
    return [(arm + (" (off)" if policy == "off" else ""), define_scenario(ctx.world_id, arm, policy, d28, ctx.t))
            for arm, policy, window in paper_cells() if window == "D+28"]


FUNCTIONS: dict[str, Callable[[Context, int], Measured]] = {
    "generate": generate, "verify": verify, "fold": fold, "exposure": exposure, "exposure_window": exposure_window,
    "truth_raw": truth_raw, "dbt": dbt,
    "staged": staged, "vector_index": vector_index, "rag_corpus": rag_corpus, "operational": operational,
    "documents": documents, "eval": eval_arms,
}
