"""Benchmark of the SaaS API: requests per second with latency off, against the real server.

    python bench/bench_saas.py [--requests 3000] [--concurrency 8] [--rounds 3] [--ledger DIR] [--check]

Target (issue 6): over 300 requests/s with latency off, the first request per (world, day) excluded.
In a temporary state folder: the embedded Postgres gets the default 180-day world's truth schema; a
`python -m saas_mock` process serves it with one unlimited key (`--latency-ms 0 --rate-per-minute 0`);
the first request of each (world, day) used is sent before the clock starts (it builds that day's
projection). Then `--requests` requests, a mix of the four endpoints over four days, from `--concurrency`
threads with keep-alive connections. Client and server share the machine's two cores, so the figure is
a floor for the server alone. Prints the median of `--rounds` rounds and the per-endpoint latency.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

from churn_assets.fabric.postgres import connection
from churn_assets.fabric.truth import load_truth
from churn_assets.services import ensure_saas_keys, free_port, purge_embedded_data, start_services, urls_from
from churn_assets.state import StatePaths
from churn_assets.world.config import load_config
from churn_assets.world.fold import assigned_licenses, fold_ledger
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger

TARGET_RPS = 300.0
KEY = "bench-" + "k" * 26
DAYS = ("2024-03-29", "2024-04-26", "2024-04-27", "2024-06-01")


def request_mix(world: str, records: list[dict]) -> list[tuple[str, str]]:
    """(endpoint name, path with query) for the four endpoints over the benchmark days."""
    out = []
    for day in DAYS:
        state = fold_ledger(records, day)
        holders = sorted(assigned_licenses(state, day).items())
        users = [u for _, u in holders[:20]]
        products = sorted({state.assignments.licenses[lid].product_id for lid, _ in holders})[:10]
        base = f"/v1/tenants/{world}"
        for i in range(20):
            out.append(("entitlements", f"{base}/entitlements/{users[i % len(users)]}?as_of={day}"))
            out.append(("utilization", f"{base}/products/{products[i % len(products)]}/utilization?"
                        + urlencode({"as_of": day, "window_days": (7, 30)[i % 2]})))
            out.append(("tickets", f"{base}/tickets?" + urlencode(
                {"as_of": day, "status": ("open", "in_progress", "resolved")[i % 3], "page_size": 50})))
            if i % 4 == 0:
                out.append(("prices", f"{base}/prices?as_of={day}"))
    return out


def run_round(port: int, mix: list[tuple[str, str]], total: int, concurrency: int
              ) -> tuple[float, dict[str, list[float]], int]:
    """Send `total` requests from `concurrency` threads; (requests/s, latencies per endpoint, errors)."""
    counter = itertools.count()
    latencies: dict[str, list[float]] = {}
    errors = [0]
    lock = threading.Lock()

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: dict[str, list[float]] = {}
        bad = 0
        while (i := next(counter)) < total:
            name, path = mix[i % len(mix)]
            started = time.perf_counter()
            conn.request("GET", path, headers={"X-API-Key": KEY})
            response = conn.getresponse()
            response.read()
            mine.setdefault(name, []).append(time.perf_counter() - started)
            bad += response.status != 200
        conn.close()
        with lock:
            for k, v in mine.items():
                latencies.setdefault(k, []).extend(v)
            errors[0] += bad

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return total / (time.perf_counter() - started), latencies, errors[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ledger", type=Path, help="an already generated default-world ledger directory")
    parser.add_argument("--check", action="store_true", help="exit 1 when the median misses its target")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-saas-") as tmp:
        ledger_dir = args.ledger
        if ledger_dir is None:
            ledger_dir = Path(tmp) / "ledger"
            generate_ledger(load_config(), ledger_dir)
        loaded = load_ledger(ledger_dir)
        world = loaded.manifest.world_id
        paths = StatePaths.resolve(Path(tmp) / "state")
        proc = None
        try:
            urls = urls_from(start_services(paths, names=["postgres", "mongo"]), paths)
            with connection(urls.warehouse) as conn:
                load_truth(conn, world, loaded)
            ensure_saas_keys(paths)  # unused: the bench key below replaces them
            port = free_port()
            keys = {"keys": [{"id": "bench", "key": KEY, "profile": "unlimited"}]}
            env = {**os.environ, "CHURNBENCH_SAAS_API_KEYS": json.dumps(keys)}
            proc = subprocess.Popen([sys.executable, "-m", "saas_mock", "--state-dir", str(paths.root),
                                     "--port", str(port), "--latency-ms", "0", "--rate-per-minute", "0"],
                                    env=env, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while True:
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                    c.request("GET", "/health")
                    if c.getresponse().status == 200:
                        break
                except OSError:
                    time.sleep(0.1)
                if time.monotonic() > deadline:
                    raise SystemExit("saas_mock did not start")
            mix = request_mix(world, loaded.records)
            warm_started = time.perf_counter()
            run_round(port, [(n, p) for n, p in mix if n == "prices"], len(DAYS) * 2, 1)  # one per (world, day)
            warm = time.perf_counter() - warm_started
            rounds = [run_round(port, mix, args.requests, args.concurrency) for _ in range(args.rounds)]
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(10)
            purge_embedded_data(paths)

    rates = [r[0] for r in rounds]
    errors = sum(r[2] for r in rounds)
    median = statistics.median(rates)
    ok = median > TARGET_RPS and errors == 0
    print(f"default world {world}: {loaded.count:,} events; first requests of {len(DAYS)} days "
          f"(projection builds, excluded) {warm:.2f} s")
    print(f"SaaS API, latency off, {args.concurrency} connections  median {median:,.0f} req/s  (min {min(rates):,.0f}, "
          f"max {max(rates):,.0f}, {args.requests} requests x {len(rounds)} rounds, {errors} non-200)  "
          f"target > {TARGET_RPS:g}: {'ok' if ok else 'MISSED'}")
    latencies = rounds[len(rounds) // 2][1]
    for name in sorted(latencies):
        values = sorted(latencies[name])
        p50, p95 = values[len(values) // 2], values[int(len(values) * 0.95)]
        print(f"  {name:<13} p50 {1000 * p50:6.1f} ms  p95 {1000 * p95:6.1f} ms")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
