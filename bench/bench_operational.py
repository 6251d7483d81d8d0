"""Benchmark of one operational-store partition: fold the default world as of a day, project it, and write
the day's database into the MongoDB-protocol server (nx-27017), as the `operational_store` asset does.

    python bench/bench_operational.py [--runs 5] [--ledger DIR] [--check]

Target (issue 6): one partition under 2 s (median). Measured in a temporary state folder whose own
nx-27017 is started and stopped here. Two figures:
- `warm`: what each partition of a backfill costs once the process holds the verified ledger (the asset
  keeps it per process): fold + project + write, a different day each run. This is the target's figure.
- `cold`: the same plus loading and verifying the 180-day ledger from disk (a first partition in a fresh
  process).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

from churn_assets.fabric.mongo import write_partition
from churn_assets.fabric.operational import INDEXES, OPERATIONAL_SCHEMA_VERSION, project_operational
from churn_assets.services import mongo_client, purge_embedded_data, start_services
from churn_assets.state import StatePaths
from churn_assets.world.config import load_config
from churn_assets.world.fold import fold_ledger
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger

TARGET_S = 2.0
FIRST_DAY = dt.date(2024, 4, 27)  # T of the paper's windows; later runs take the days before it


def one_partition(client: object, world_id: str, head: str, records: list[dict], day: dt.date) -> dict[str, float]:
    t0 = time.perf_counter()
    state = fold_ledger(records, day)
    t1 = time.perf_counter()
    docs = project_operational(state, day)
    t2 = time.perf_counter()
    written = write_partition(client, world_id, day, docs, indexes=INDEXES, force=True,
                              content_key={"schema_version": OPERATIONAL_SCHEMA_VERSION, "ledger_head_hash": head})
    t3 = time.perf_counter()
    return {"fold": t1 - t0, "project": t2 - t1, "write": t3 - t2, "total": t3 - t0,
            "documents": float(sum(written.counts.values()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ledger", type=Path, help="an already generated default-world ledger directory")
    parser.add_argument("--check", action="store_true", help="exit 1 when the median misses its target")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-operational-") as tmp:
        ledger_dir = args.ledger
        if ledger_dir is None:
            ledger_dir = Path(tmp) / "ledger"
            generate_ledger(load_config(), ledger_dir)
        paths = StatePaths.resolve(Path(tmp) / "state")
        try:
            mongo = next(s for s in start_services(paths, names=["mongo"]) if s.name == "mongo")
            client = mongo_client(mongo.url or "")
            cold = []
            for _ in range(max(1, args.runs // 2)):
                started = time.perf_counter()
                loaded = load_ledger(ledger_dir)
                one_partition(client, loaded.manifest.world_id, loaded.head_hash or "", loaded.records, FIRST_DAY)
                cold.append(time.perf_counter() - started)
            world_id, head, records = loaded.manifest.world_id, loaded.head_hash or "", loaded.records
            warm = [one_partition(client, world_id, head, records, FIRST_DAY - dt.timedelta(days=i))
                    for i in range(args.runs)]
            client.close()
        finally:
            purge_embedded_data(paths)

    median = statistics.median(r["total"] for r in warm)
    ok = median < TARGET_S
    print(f"default world: {len(records):,} events; {int(warm[0]['documents']):,} documents per partition "
          f"(as of {FIRST_DAY})")
    parts = "  ".join(f"{k} {statistics.median(r[k] for r in warm):.3f} s" for k in ("fold", "project", "write"))
    print(f"operational partition, warm (ledger held)   median {median:.3f} s  (min "
          f"{min(r['total'] for r in warm):.3f}, max {max(r['total'] for r in warm):.3f}, n={len(warm)})  "
          f"target < {TARGET_S:g} s: {'ok' if ok else 'MISSED'}")
    print(f"  of which: {parts}")
    print(f"operational partition, cold (+ ledger load) median {statistics.median(cold):.3f} s  (n={len(cold)})")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
