"""Benchmark: embedded services cold start, warm `churnbench services up`, and the overhead of one
in-process materialization on the persistent (Postgres-backed) Dagster instance.

    python bench/bench_services.py [--runs 5]

Runs in a temporary state folder (its services are stopped and deleted at the end) and prints
medians. Targets (issue 4): cold start < 5 s, warm up < 1 s, overhead per partition < 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from churn_assets.services import purge_embedded_data, start_services, stop_services
from churn_assets.state import STATE_DIR_ENV, StatePaths


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def samples(runs: int, fn: Callable[[], object],
            before: Callable[[], object] | None = None) -> list[float]:
    out = []
    for _ in range(runs):
        if before is not None:
            before()
        out.append(timed(fn))
    return out


def fmt(values: list[float]) -> str:
    return (f"median {statistics.median(values):6.3f} s   "
            f"(min {min(values):.3f}, max {max(values):.3f}, n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for name in ("CHURNBENCH_POSTGRES_URL", "CHURNBENCH_MONGODB_URI", "CHURNBENCH_SAAS_URL"):
        os.environ.pop(name, None)  # measure the embedded services
    churnbench = str(Path(sys.executable).parent / "churnbench")

    base = Path(tempfile.mkdtemp(prefix="bench-services-"))
    fresh_paths: list[StatePaths] = []
    try:
        # Cold start of a brand-new state folder (initdb, create databases, Mongo), several folders.
        def fresh() -> None:
            paths = StatePaths.resolve(base / f"fresh{len(fresh_paths)}")
            fresh_paths.append(paths)
            start_services(paths)

        first = samples(args.runs, fresh)
        for paths in fresh_paths[1:]:
            purge_embedded_data(paths)
        paths = fresh_paths[0]
        # Cold start of an existing state folder whose services are stopped (after a reboot, `down`).
        restart = samples(args.runs, lambda: start_services(paths), before=lambda: stop_services(paths))
        env = {**os.environ, STATE_DIR_ENV: str(paths.root)}
        warm_cli = samples(args.runs, lambda: subprocess.run(
            [churnbench, "services", "up"], env=env, check=True, capture_output=True))
        warm_api = samples(args.runs, lambda: start_services(paths))

        noop, ledger_total, ledger_compute = materialization_overhead(paths, args.runs)

        print(f"services cold start, new state folder : {fmt(first)}")
        print(f"services cold start, stopped services : {fmt(restart)}")
        print(f"warm `churnbench services up` (CLI)   : {fmt(warm_cli)}")
        print(f"warm start_services() (in process)    : {fmt(warm_api)}")
        print(f"materialize no-op partition           : {fmt(noop)}   <- per-partition overhead")
        print(f"materialize ledger, 30-day world      : {fmt(ledger_total)}")
        print(f"  of which ledger + check compute     : {fmt(ledger_compute)}")
        overhead = statistics.median(ledger_total) - statistics.median(ledger_compute)
        print(f"  overhead (ledger - compute)         : {overhead:6.3f} s")
    finally:
        for p in fresh_paths:
            purge_embedded_data(p)
        shutil.rmtree(base, ignore_errors=True)


def materialization_overhead(paths: StatePaths, runs: int) -> tuple[list[float], list[float], list[float]]:
    warnings.simplefilter("ignore")
    import dagster as dg

    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import materialize, open_session
    from churn_assets.orchestration.partitions import world_partitions
    from churn_assets.orchestration.world_registry import add_world
    from churn_assets.world.config import load_config
    from churn_assets.world.ledger import load_ledger
    from churn_assets.world.simulator import generate_ledger

    @dg.asset(partitions_def=world_partitions)
    def bench_noop(context):  # no annotations: Dagster cannot resolve string hints of a local import

        return dg.MaterializeResult(metadata={"world": context.partition_key})

    noop_defs = dg.Definitions(assets=[bench_noop])
    config = load_config(days=30)
    with open_session(paths) as session:
        add_world(paths, session.instance, config)
        key = [config.world_id]
        materialize(session, noop_defs, ["bench_noop"], key)  # warm-up: first run creates rows, caches
        noop = samples(runs, lambda: materialize(session, noop_defs, ["bench_noop"], key))
        defs = defs_for(str(paths.root))
        materialize(session, defs, ["ledger"], key)
        ledger_total = samples(runs, lambda: materialize(session, defs, ["ledger"], key))
    out = paths.root / "bench-ledger"
    compute = samples(runs, lambda: (generate_ledger(config, out), load_ledger(out)))
    return noop, ledger_total, compute


if __name__ == "__main__":
    main()
