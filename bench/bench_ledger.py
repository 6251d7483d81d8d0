"""Benchmark: default world generate + write + verify, verify versus a plain parse, and 10x scaling.

    python bench/bench_ledger.py [--repeat 5] [--skip-10x]

Prints medians (these machines are shared and noisy: compare ratios, not absolute seconds).
Targets (issue 2): generate + write + verify under 6 s; verify within 3x of a stdlib parse of the same
file; a 10x world (~570k events) costs time linear in its event count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from churn_assets.world.config import WorldConfig, load_config
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger


def _median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _parse_only(path: Path) -> int:
    with path.open() as fh:
        return sum(1 for line in fh if json.loads(line))


def bench_world(config: WorldConfig, repeat: int, label: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "w"
        gen = _median_time(lambda: generate_ledger(config, out), repeat)
        events = load_ledger(out).count
        verify = _median_time(lambda: load_ledger(out), repeat)
        parse = _median_time(lambda: _parse_only(out / "ledger.jsonl"), repeat)
    row = {"events": events, "generate_write_s": gen, "verify_s": verify, "parse_s": parse,
           "total_s": gen + verify, "verify_over_parse": verify / parse, "us_per_event": (gen + verify) / events * 1e6}
    print(f"{label:<10} events={events:>8,}  generate+write={gen:6.2f}s  verify={verify:6.2f}s  "
          f"parse={parse:6.2f}s  total={gen + verify:6.2f}s  verify/parse={verify / parse:4.2f}x  "
          f"{row['us_per_event']:5.1f} us/event")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-10x", action="store_true")
    args = ap.parse_args()
    base = bench_world(load_config(), args.repeat, "default")
    print(f"  target: total < 6 s -> {'OK' if base['total_s'] < 6 else 'MISSED'}; "
          f"verify/parse < 3x -> {'OK' if base['verify_over_parse'] < 3 else 'MISSED'}")
    if not args.skip_10x:
        ten = load_config(overrides=["consumption.events_per_day=3000", "rates_per_day.tickets_opened=20"])
        big = bench_world(ten, max(1, args.repeat // 2), "10x")
        ratio_events = big["events"] / base["events"]
        ratio_time = big["total_s"] / base["total_s"]
        print(f"  10x: {ratio_events:.1f}x events in {ratio_time:.1f}x time "
              f"(per-event cost ratio {big['us_per_event'] / base['us_per_event']:.2f}; 1.0 = linear)")


if __name__ == "__main__":
    main()
