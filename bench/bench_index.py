"""Benchmark of the vector index and the RAG corpus on the default world, model loaded (issue 8).

    HF_HUB_OFFLINE=1 python bench/bench_index.py [--runs 3] [--ledger DIR] [--day 2024-04-26] [--check]

Targets (medians, the embedding model already loaded in the process):

- vector index, first build of every contract of a day (~60 documents, empty store)    < 30 s
- vector index, the next day with one changed contract                                  < 3 s
- RAG corpus, one (world, day) (fold + serialise + embed + store), after the day's index
  (the pipeline's order: its contract chunks are embedded already)                      < 120 s
- RAG corpus, the next day                                                              < 30 s
- RAG corpus, one (world, day) from an empty store: reported, no target (the asset graph builds the
  day's index first: `rag_index` depends on `vector_index`, so the pipeline never meets this case)

Measured as the assets run them, without Dagster's bookkeeping, against a temporary embedded Postgres
(or `CHURNBENCH_POSTGRES_URL`): documents are rendered in memory (the asset reads the same Markdown
from disk), the ledger is loaded once (the assets keep it per process). Each run starts from an empty
store (the world's vector tables are dropped), so every "first build" really embeds everything.
The default day pair is 2024-04-26 -> 2024-04-27: one contract (an expiry) changes between them.
Prints each median (wall clock) with min and max, and the median CPU time of this process (the encoder
runs in it, on `CHURNBENCH_TORCH_THREADS` or 2 threads): CPU time is what the step
costs, wall time what it waited. `--check` exits 1 when a wall-clock median misses its target.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from churn_assets.fabric.postgres import connection
from churn_assets.grounding.embeddings import MiniLMEncoder, default_encoder, model_load_seconds, torch_threads
from churn_assets.grounding.rag_corpus import build_rag_corpus
from churn_assets.grounding.vector_index import build_vector_index, drop_world_vectors
from churn_assets.services import POSTGRES_URL_ENV, ensure_services, purge_embedded_data
from churn_assets.state import StatePaths
from churn_assets.world.config import load_config
from churn_assets.world.fold import fold_ledger
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger
from contracts.facts import contract_facts_as_of
from contracts.render import render_markdown

DAY = "2024-04-26"
INDEX_FIRST = "vector index: first build, all contracts"
INDEX_NEXT = "vector index: next day, one changed contract"
RAG_FIRST = "RAG corpus: first (world, day), index built"
RAG_NEXT = "RAG corpus: next day"
RAG_EMPTY = "RAG corpus: first (world, day), empty store"
TARGETS: dict[str, float | None] = {INDEX_FIRST: 30.0, INDEX_NEXT: 3.0, RAG_FIRST: 120.0, RAG_NEXT: 30.0,
                                   RAG_EMPTY: None}


def documents_of(records: list[dict], day: dt.date) -> dict[str, str]:
    return {f.contract_id: render_markdown(f) for f in contract_facts_as_of(records, day)}


def report(name: str, seconds: list[float], cpu: list[float], target: float | None, note: str = "") -> bool:
    median = statistics.median(seconds)
    ok = target is None or median < target
    verdict = "" if target is None else f"  target < {target:g} s: {'ok' if ok else 'MISSED'}"
    print(f"{name:<46} median {median:7.2f} s  (min {min(seconds):.2f}, max {max(seconds):.2f}, "
          f"n={len(seconds)}; this process's CPU {statistics.median(cpu):.2f} s){verdict}{note}", flush=True)
    return ok


def calibrate(encoder: MiniLMEncoder) -> None:
    """The machine's embedding speed right now, in the unit ENVIRONMENT.md quotes (~180 short sentences/s on
    one thread of an idle machine), so that the figures below can be read against a busy machine."""
    sentences = [f"The license number {i} of the sales team was reassigned to a new user today." for i in range(300)]
    started, cpu_started = time.perf_counter(), time.process_time()
    encoder.encode(sentences)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    print(f"calibration: {len(sentences) / wall:.0f} short sentences/s wall, {len(sentences) / cpu:.0f} per CPU "
          f"second (ENVIRONMENT.md: ~180/s on an idle machine); load average {os.getloadavg()[0]:.1f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ledger", type=Path, help="an already generated default-world ledger directory")
    parser.add_argument("--day", default=DAY, help=f"the first day (default {DAY}); the next day follows it")
    parser.add_argument("--check", action="store_true", help="exit 1 when a median misses its target")
    args = parser.parse_args(argv)
    first = dt.date.fromisoformat(args.day)
    second = first + dt.timedelta(days=1)

    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        ledger_dir = args.ledger
        if ledger_dir is None:
            config = load_config()
            ledger_dir = Path(tmp) / "ledger"
            print(f"generating the default world {config.world_id} ({config.days} days) ...", flush=True)
            generate_ledger(config, ledger_dir)
        loaded = load_ledger(ledger_dir)
        records, world_id = loaded.records, loaded.manifest.world_id if loaded.manifest else "bench-s0-000000"
        docs = {first: documents_of(records, first), second: documents_of(records, second)}
        changed = sorted(c for c in docs[second] if docs[second][c] != docs[first].get(c))
        print(f"{world_id}: {len(records):,} events; {len(docs[first])} contracts on {first}; changed on "
              f"{second}: {', '.join(changed) or 'none'}", flush=True)

        encoder = default_encoder()
        started = time.perf_counter()
        encoder.load()
        print(f"model load (import included) {time.perf_counter() - started:.2f} s "
              f"(process's first load: {model_load_seconds() or 0:.2f} s)", flush=True)
        calibrate(encoder)

        paths = StatePaths.resolve(Path(tmp) / "state")
        try:
            url = ensure_services(paths).warehouse  # embedded, or CHURNBENCH_POSTGRES_URL when set
            results: dict[str, list[float]] = {name: [] for name in TARGETS}
            cpu: dict[str, list[float]] = {name: [] for name in TARGETS}
            notes: dict[str, str] = {}
            with connection(url, autocommit=True) as conn:
                for run in range(args.runs):
                    load = os.getloadavg()[0]
                    drop_world_vectors(conn, world_id)
                    # The pipeline's order: the index of a day, then its corpus (which reuses the index's
                    # contract chunks), then the next day of each; last, a corpus alone from an empty store.
                    steps = ((INDEX_FIRST, "index", first), (INDEX_NEXT, "index", second), (RAG_FIRST, "rag", first),
                             (RAG_NEXT, "rag", second), (RAG_EMPTY, "drop+rag", first))
                    for name, what, day in steps:
                        if what == "drop+rag":
                            drop_world_vectors(conn, world_id)
                        started, cpu_started = time.perf_counter(), time.process_time()
                        if what == "index":
                            build = build_vector_index(conn, world_id, day, docs[day], encoder)
                            note = f"{build.chunks} chunks, {build.unique_chunks} unique"
                        else:
                            state = fold_ledger(records, day, format_version=loaded.format_version)
                            build = build_rag_corpus(conn, world_id, day, state, docs[day], encoder)
                            note = f"{build.records} records, {build.unique_texts} unique"
                        results[name].append(time.perf_counter() - started)
                        cpu[name].append(time.process_time() - cpu_started)
                        notes[name] = f"  [{note}, {build.embedded} embedded, {build.encoder_calls} encoder calls]"
                    print(f"run {run + 1}/{args.runs} done (load average at start {load:.1f}): "
                          + ", ".join(f"{results[n][-1]:.1f} s" for n in TARGETS), flush=True)
                drop_world_vectors(conn, world_id)
        finally:
            if not os.environ.get(POSTGRES_URL_ENV):
                purge_embedded_data(paths)

    print(f"load average (1 min) now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"torch on {torch_threads()} thread(s)")
    ok = True
    for name, target in TARGETS.items():
        ok = report(name, results[name], cpu[name], target, notes.get(name, "")) and ok
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
