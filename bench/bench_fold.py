"""Benchmark of the fold: the walker over the default timeline, and the v1 reference ledger load + stats.

    python bench/bench_fold.py [--runs 5] [--ledger DIR] [--reference FILE] [--check]

The reference (ChurnBench v1) ledger is not part of this repository: `--reference` (or CHURNBENCH_REFERENCE_DIR,
the folder holding `churnbench-v1-ledger.jsonl.gz`) names it; without it that measurement is skipped, saying so.

Targets (issue 3): walker over the default 180-day world < 1 s; v1 reference ledger load + stats < 5 s.
Prints the median (and min, max) of several runs; `--check` exits 1 when a median misses its target.
The default world is generated into a temporary folder unless `--ledger` names one already generated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from churn_assets.world.config import load_config
from churn_assets.world.fold import fold_ledger, fold_vintage, uniform_vintage, walk_ledger
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger
from churn_assets.world.stats import stats_of

REFERENCE_NAME = "churnbench-v1-ledger.jsonl.gz"
T, T_PRIME_D28 = "2024-04-27", "2024-03-29"


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def report(name: str, seconds: list[float], target: float | None) -> bool:
    median = statistics.median(seconds)
    ok = target is None or median < target
    verdict = "" if target is None else f"  target < {target:g} s: {'ok' if ok else 'MISSED'}"
    print(f"{name:<44} median {median:7.3f} s  (min {min(seconds):.3f}, max {max(seconds):.3f}, "
          f"n={len(seconds)}){verdict}")
    return ok


def walk_all(records: list[dict]) -> int:
    days = 0
    for _day, _state in walk_ledger(records):
        days += 1
    return days


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ledger", type=Path, help="an already generated default-world ledger directory")
    reference_dir = os.environ.get("CHURNBENCH_REFERENCE_DIR")
    parser.add_argument("--reference", type=Path,
                        default=Path(reference_dir) / REFERENCE_NAME if reference_dir else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when a median misses its target")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        world = args.ledger
        if world is None:
            world = Path(tmp) / "default"
            generate_ledger(load_config(), world)
        records = load_ledger(world).records
        print(f"default world: {len(records):,} events, {records[0]['at']} .. {records[-1]['at']}")
        ok = report("walker over the default timeline", timed(lambda: walk_all(records), args.runs), 1.0)
        report(f"fold_ledger at T = {T}", timed(lambda: fold_ledger(records, T), args.runs), None)
        d28 = {**uniform_vintage(T), "assignments": T_PRIME_D28, "user_status": T_PRIME_D28}
        report("fold_vintage (D+28 hot classes at T')", timed(lambda: fold_vintage(records, d28), args.runs), None)

    if args.reference is not None and args.reference.exists():
        ok &= report("v1 reference ledger load + stats at T",
                     timed(lambda: stats_of(load_ledger(args.reference), T), args.runs), 5.0)
    else:
        print(f"v1 reference ledger: {'not found at ' + str(args.reference) if args.reference else 'not given'} "
              "(--reference FILE or CHURNBENCH_REFERENCE_DIR): skipped")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
