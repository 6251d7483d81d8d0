"""Benchmark of the warehouse: truth + raw load of the default world, and its dbt build.

    python bench/bench_warehouse.py [--runs 3] [--dbt-runs 2] [--check]

Targets (issue 5), default 180-day world:
- truth + raw load < 15 s: read and verify the ledger, project the raw tables, COPY both layers (each run
  reloads: `force=True`, so the idempotent skip is not what is timed; the skip is reported apart).
- dbt build < 60 s: the `analytics/*` assets materialized in process for the world (what `churnbench
  project` runs: `dbt build` with every dbt test, then the four parity checks), on the warm instance.
  The plain `dbt build` subprocess is reported beside it.

Runs against embedded services in a temporary state folder (stopped and deleted at the end). Prints the
median (min, max) of each; `--check` exits 1 when a median misses its target.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from churn_assets.fabric.postgres import connection, dbt_connection_env, replace_tables, schema_name
from churn_assets.fabric.truth import load_truth
from churn_assets.fabric.warehouse_raw import META_TABLE, WorldInfo, project_raw
from churn_assets.world.config import load_config
from churn_assets.world.ledger import load_ledger

ROOT = Path(__file__).resolve().parents[1]


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
    print(f"{name:<46} median {median:7.2f} s  (min {min(seconds):.2f}, max {max(seconds):.2f}, "
          f"n={len(seconds)}){verdict}", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="truth + raw load runs")
    parser.add_argument("--dbt-runs", type=int, default=2, help="dbt build runs (each ~30-60 s)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a median misses its target")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")

    with tempfile.TemporaryDirectory(prefix="bench-warehouse-") as tmp:
        os.environ["CHURNBENCH_STATE_DIR"] = str(Path(tmp) / "state")
        from churn_assets.services import ensure_services, purge_embedded_data
        from churn_assets.state import StatePaths

        paths = StatePaths.resolve()
        try:
            urls = ensure_services(paths)
            return run(args, paths, urls.warehouse)
        finally:
            purge_embedded_data(paths)


def run(args: argparse.Namespace, paths: object, url: str) -> int:
    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import materialize, open_session
    from churn_assets.orchestration.world_registry import add_world

    config = load_config()
    world = config.world_id
    with open_session(paths) as session:  # type: ignore[arg-type]
        defs = defs_for(str(session.paths.root))
        add_world(session.paths, session.instance, config)
        materialize(session, defs, ["ledger"], [world])
        ledger_dir = session.paths.ledger_dir(world)
        print(f"default world {world}: {json.loads((ledger_dir / 'manifest.json').read_text())['count']:,} events")

        def truth_and_raw(force: bool = True) -> None:
            loaded = load_ledger(ledger_dir)
            info = WorldInfo(world, config.start, config.end, head_hash=loaded.head_hash)
            projection = project_raw(loaded.records, info)
            with connection(url, autocommit=True) as conn:
                load_truth(conn, world, loaded, force=force)
                replace_tables(conn, world_id=world, schema=schema_name(world, "raw"), tables=projection.table_data(),
                               meta_table=META_TABLE, load_key=info.load_key(), force=force)

        ok = report("truth + raw load (verify, project, COPY)", timed(truth_and_raw, args.runs), 15.0)
        report("truth + raw when already loaded (skip)", timed(lambda: truth_and_raw(False), args.runs), None)

        # The assets as `churnbench project` runs them (the first run pays dbt's full parse for the world).
        materialize(session, defs, ["warehouse_truth", "warehouse_raw"], [world])
        from churn_assets.orchestration.assets.dbt import analytics_dbt

        dbt_keys = sorted(k.to_user_string() for k in analytics_dbt.keys)

        def dbt_assets() -> None:
            with contextlib.redirect_stdout(io.StringIO()):  # dagster-dbt echoes dbt's log to stdout
                materialize(session, defs, dbt_keys, [world])

        report("dbt build, first for the world (full parse)", timed(dbt_assets, 1), None)
        ok &= report("dbt build (Dagster assets + checks)", timed(dbt_assets, args.dbt_runs), 60.0)

        env = {**os.environ, **dbt_connection_env(url), "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
        dbt = str(Path(sys.executable).parent / "dbt")
        target = Path(tempfile.mkdtemp(prefix="bench-dbt-target-"))

        def dbt_cli() -> None:
            subprocess.run([dbt, "build", "--profiles-dir", ".", "--target-path", str(target), "--quiet",
                            "--vars", json.dumps({"world": world})], cwd=ROOT / "dbt_project", env=env, check=True)

        dbt_cli()  # parse state for this target path
        report("dbt build (plain subprocess, warm parse)", timed(dbt_cli, args.dbt_runs), None)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
