"""Benchmark of parallel cells (issue 20, item 3): a cold set of cells, inputs included, with 1 and 2 workers.

    python bench/bench_parallel.py [--days 30] [--tasks 20] [--gaps 1,4,7,14,21,28] [--runs 2] [--workers 1,2]

The cells are a small cache-age sweep: the grounding arm tiered and its off ablation at T = the world's last day,
T' = T - gap for each gap. Each run starts cold on a world of its own (the same config and seed under another
name, so the same events under another world id): nothing of it exists but its registration, and `run_cells`
builds the ledger, the warehouse, the dbt build, every staged, index, document and operational partition and the
task set, then evaluates every cell. Runs alternate between the worker counts (1, 2, 1, 2, ...) so that a change
in the machine's load falls on both. Prints each run's wall time with the load average before and after, the
median per worker count and the ratio (the issue's later target: at least 1.5x on the default world's
cache-age sweep).

Runs against embedded services in a temporary state folder (stopped and deleted at the end); the services are
started, and the instance's storage created, before the clock starts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=30, help="world length (30: docs/rules.md, Test budget)")
    parser.add_argument("--tasks", type=int, default=20, help="tasks per task set")
    parser.add_argument("--gaps", default="1,4,7,14,21,28", help="T - T' in days, comma-separated")
    parser.add_argument("--runs", type=int, default=2, help="runs per worker count (the median is reported)")
    parser.add_argument("--workers", default="1,2", help="worker counts to compare, comma-separated")
    parser.add_argument("--verbose", action="store_true", help="print run_cells' progress lines")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    for name in ("CHURNBENCH_POSTGRES_URL", "CHURNBENCH_MONGODB_URI", "CHURNBENCH_SAAS_URL"):
        os.environ.pop(name, None)  # measure the embedded services

    with tempfile.TemporaryDirectory(prefix="bench-parallel-") as tmp:
        deployment = Path(tmp) / "deployment.yaml"
        deployment.write_text(f'calendar:\n  start: "2024-01-01"\n  days: 180\ntasks:\n  count: {args.tasks}\n'
                              "  seed: 0\n")
        os.environ["CHURNBENCH_DEPLOYMENT"] = str(deployment)  # the workers inherit it
        os.environ["CHURNBENCH_STATE_DIR"] = str(Path(tmp) / "state")
        from churn_assets.services import purge_embedded_data
        from churn_assets.state import StatePaths

        paths = StatePaths.resolve()
        try:
            return run(args, paths)
        finally:
            purge_embedded_data(paths)


def run(args: argparse.Namespace, paths: object) -> int:
    from churn_assets.orchestration.cells import Cell, run_cells
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import add_world
    from churn_assets.world.config import load_config

    gaps = [int(g) for g in args.gaps.split(",")]
    counts = [int(w) for w in args.workers.split(",")]
    with open_session(paths) as session:  # type: ignore[arg-type]
        instance = session.instance
        print(f"state folder {session.paths.root}; {len(os.sched_getaffinity(0))} cores", flush=True)
        seconds: dict[int, list[float]] = {w: [] for w in counts}
        n = 0
        for r in range(args.runs):
            for workers in counts:
                n += 1
                config = load_config(days=args.days, name=f"benchpar{n}")
                add_world(session.paths, instance, config)  # registered only: every input is built by the run
                t = config.end
                cells = [Cell(config.world_id, arm, policy, t - dt.timedelta(days=gap), t)
                         for gap in gaps for arm, policy in (("grounding", "tiered"),
                                                             ("grounding_no_freshness_tiers", "off"))]
                load_before = os.getloadavg()
                started = time.perf_counter()
                results = run_cells(session.paths, cells, workers=workers,
                                    progress=(lambda line: print(f"    {line}", flush=True)) if args.verbose else None)
                elapsed = time.perf_counter() - started
                load_after = os.getloadavg()
                failed = [r for r in results if not r.ok]
                for f in failed:
                    print(f"  FAILED {f.cell.label}: {f.error}", file=sys.stderr)
                seconds[workers].append(elapsed)
                print(f"run {r + 1}, {workers} worker(s), world {config.world_id}: {len(cells)} cells "
                      f"({len(failed)} failed) in {elapsed:.1f} s; load average before "
                      f"{load_before[0]:.2f}/{load_before[1]:.2f}, after {load_after[0]:.2f}/{load_after[1]:.2f} "
                      "(1/5 min)", flush=True)
                if failed:
                    return 1
    medians = {w: statistics.median(s) for w, s in seconds.items()}
    print("\nmedian wall time per worker count (cold cells, inputs included):")
    for w, m in medians.items():
        print(f"  {w} worker(s): {m:.1f} s over {len(seconds[w])} run(s): "
              + ", ".join(f"{s:.1f}" for s in seconds[w]))
    if len(counts) >= 2:
        base, best = counts[0], counts[-1]
        print(f"speed-up {best} vs {base} worker(s): {medians[base] / medians[best]:.2f}x")
    return 0


if __name__ == "__main__":  # spawned workers import this file too: only the parent runs the benchmark
    sys.exit(main())
