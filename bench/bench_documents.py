"""Benchmark of one contract documents partition: Markdown + PDF for every contract of the default world.

    python bench/bench_documents.py [--runs 5] [--ledger DIR] [--day 2024-04-27] [--check]

Target (issue 7): one documents partition under 5 s. Measured as the asset runs it, without Dagster's
own bookkeeping: load and verify the world's ledger, fold the document classes as of the day, render
every contract (Markdown and PDF), write the day atomically with its manifest, and compare with the day
before. Also printed, not targeted: the same partition with the ledger already loaded (what each further
day of a backfill costs, since the asset keeps the loaded ledger per process) and rendering alone.
Prints the median wall time (min, max) and the median CPU time of several runs, and the machine's load;
`--check` exits 1 when the median wall time misses the target.
The default world (180 days, ~60 contracts) is generated into a temporary folder unless `--ledger`
names one already generated.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from churn_assets.world.config import load_config
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger
from contracts.build import build_day
from contracts.facts import contract_facts_as_of
from contracts.render import render_contract

T = "2024-04-27"  # the paper's evaluation day (ARCHITECTURE.md section 10)
TARGET_SECONDS = 5.0


def timed(fn: Callable[[], object], runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds of this process) per run. On a shared machine the CPU time says what the
    work costs; the wall time also counts waiting for a core."""
    wall, cpu = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return wall, cpu


def report(name: str, seconds: tuple[list[float], list[float]], target: float | None) -> bool:
    wall, cpu = seconds
    median = statistics.median(wall)
    ok = target is None or median < target
    verdict = "" if target is None else f"  target < {target:g} s: {'ok' if ok else 'MISSED'}"
    print(f"{name:<44} median {median:6.3f} s (min {min(wall):.3f}, max {max(wall):.3f}, n={len(wall)}; "
          f"CPU {statistics.median(cpu):.3f} s){verdict}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ledger", type=Path, help="an already generated default-world ledger directory")
    parser.add_argument("--day", default=T, help=f"the partition's day (default {T})")
    parser.add_argument("--check", action="store_true", help="exit 1 when the median misses the target")
    args = parser.parse_args(argv)
    day = dt.date.fromisoformat(args.day)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} CPUs, load average {load:.2f} (wall times grow with it)")
    with tempfile.TemporaryDirectory(prefix="bench-documents-") as tmp:
        ledger_dir = args.ledger
        if ledger_dir is None:
            config = load_config()
            ledger_dir = Path(tmp) / "ledger"
            print(f"generating the default world {config.world_id} ({config.days} days) ...", flush=True)
            generate_ledger(config, ledger_dir)
        out = Path(tmp) / "contracts"
        records = load_ledger(ledger_dir).records
        facts = contract_facts_as_of(records, day)
        print(f"{len(records)} events; {len(facts)} contracts as of {day}")

        def partition() -> None:
            loaded = load_ledger(ledger_dir)
            build_day(loaded.records, "bench", day, out, format_version=loaded.format_version)

        ok = report("documents partition (load ledger + build)", timed(partition, args.runs), TARGET_SECONDS)
        report("documents partition, ledger loaded", timed(lambda: build_day(records, "bench", day, out),
                                                           args.runs), None)
        report("render only (Markdown + PDF, all contracts)",
               timed(lambda: [render_contract(f) for f in facts], args.runs), None)
        size = sum(p.stat().st_size for p in (out / day.isoformat()).iterdir())
        print(f"{len(facts)} contracts: {2 * len(facts) + 1} files, {size / 1e6:.2f} MB on disk for the day")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
