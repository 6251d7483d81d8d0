"""Differential gold: the Python gold (fold) against the independent SQL gold (truth schema), task by task.

    python bench/differential_gold.py                          # seeds 42 43, 180 days, T = 2024-04-27
    python bench/differential_gold.py --seeds 42 43 44 --tasks 600 --json figures.json
    python bench/differential_gold.py --world default-s42-1baecb --at 2024-01-30 --tasks 200

For each world (simulated from the default config and a seed, or a registered world of the state folder with
`--world`): the ledger is loaded into `<world>_truth` (left as it is when it holds this ledger already; a
schema this script created is dropped at the end unless `--keep`), task sets are generated at T
(`tasks.generator.generate_task_set`, one per `--task-seed`), and every task is answered by both golds under
four vintage maps (`evaluation/independent/differential.py`: every class at T, the paper's tiered map at
T' = T - 29, every cached class at T - 29, and a staggered map). Prints every disagreement and the figures
per world and map; exits 1 on any disagreement, 0 when there is none.

Needs Postgres: the state folder's embedded services are started when they are not running
(`CHURNBENCH_STATE_DIR`, or `CHURNBENCH_POSTGRES_URL` for an external server).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PAPER_T = dt.date(2024, 4, 27)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43], help="world seeds to simulate (default 42 43)")
    p.add_argument("--days", type=int, default=180, help="calendar length of simulated worlds (default 180)")
    p.add_argument("--world", dest="worlds", action="append", default=[],
                   help="a registered world of the state folder instead of simulated ones (repeatable)")
    p.add_argument("--at", dest="anchors", type=dt.date.fromisoformat, action="append", default=None,
                   help="T (repeatable; default 2024-04-27, or the world's last day when it ends earlier)")
    p.add_argument("--tasks", type=int, default=540, help="tasks per task set (default 540)")
    p.add_argument("--task-seed", dest="task_seeds", type=int, action="append", default=None,
                   help="task-set seeds per world (repeatable; default 0)")
    p.add_argument("--sweep", type=int, default=0, metavar="K",
                   help="also every parameter combination of every template at T, at most K per template")
    p.add_argument("--limit", type=int, default=30, help="disagreements printed per world (default 30)")
    p.add_argument("--json", dest="json_path", type=Path, default=None, help="write the figures to this file")
    p.add_argument("--keep", action="store_true", help="keep the truth schemas this script created")
    return p


def _worlds(args: argparse.Namespace, tmp: Path) -> list[tuple[str, Any]]:
    """(world id, loaded ledger) of every world to compare."""
    from churn_assets.state import StatePaths
    from churn_assets.world.config import load_config
    from churn_assets.world.ledger import load_ledger
    from churn_assets.world.simulator import generate_ledger

    out = []
    if args.worlds:
        paths = StatePaths.resolve()
        for world_id in args.worlds:
            ledger_dir = paths.ledger_dir(world_id)
            if not ledger_dir.is_dir():
                raise SystemExit(f"world {world_id} has no ledger in {ledger_dir.parent} "
                                 "(`churnbench worlds add --materialize` makes one)")
            out.append((world_id, load_ledger(ledger_dir)))
        return out
    for seed in args.seeds:
        config = load_config(seed=seed, days=args.days)
        folder = tmp / config.world_id
        generate_ledger(config, folder)
        out.append((config.world_id, load_ledger(folder)))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from psycopg import sql

    from churn_assets.evaluation.independent import SqlGold
    from churn_assets.evaluation.independent.differential import compare, sweep_tasks, vintage_maps
    from churn_assets.fabric.postgres import connection, schema_name
    from churn_assets.fabric.truth import load_truth, truth_head
    from churn_assets.services import ensure_services
    from churn_assets.state import StatePaths
    from churn_assets.tasks.generator import generate_task_set
    from churn_assets.tasks.gold import GoldResolver

    urls = ensure_services(StatePaths.resolve())
    figures: dict[str, Any] = {"worlds": [], "tasks": 0, "comparisons": 0, "disagreements": 0}
    with tempfile.TemporaryDirectory(prefix="differential-") as tmp, \
            connection(urls.warehouse, autocommit=True) as conn:
        created: list[str] = []
        try:
            for world_id, loaded in _worlds(args, Path(tmp)):
                started = time.perf_counter()
                if truth_head(conn, world_id) is None:
                    created.append(world_id)
                load_truth(conn, world_id, loaded)  # a no-op when the schema holds this head already
                first = dt.date.fromisoformat(loaded.first_day)
                last = dt.date.fromisoformat(loaded.last_day)
                resolver = GoldResolver(loaded.records, format_version=loaded.format_version)
                sql_gold = SqlGold(conn, world_id)
                for anchor in args.anchors or [min(PAPER_T, last)]:
                    if not first <= anchor <= last:
                        raise SystemExit(f"T={anchor} is outside world {world_id}'s calendar {first}..{last}")
                    tasks = []
                    for task_seed in args.task_seeds or [0]:
                        tasks += generate_task_set(loaded.records, world_id=world_id, anchor=anchor, n=args.tasks,
                                                   task_seed=task_seed, resolver=resolver).tasks
                    if args.sweep:
                        tasks += sweep_tasks(resolver, world_id, anchor, first, args.sweep)
                    maps = vintage_maps(anchor, first)
                    result = compare(world_id, resolver, sql_gold, tasks, maps, anchor)
                    _print_world(result, maps, args.limit, time.perf_counter() - started)
                    started = time.perf_counter()
                    figures["worlds"].append(_world_figures(result, maps))
                    figures["tasks"] += result.tasks
                    figures["comparisons"] += sum(m.tasks for m in result.maps.values())
                    figures["disagreements"] += len(result.disagreements)
        finally:
            if not args.keep:
                for world_id in created:
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(schema_name(world_id, "truth"))))
    return figures


def _print_world(result: Any, maps: dict[str, dict[str, dt.date]], limit: int, seconds: float) -> None:
    print(f"world {result.world_id}, T={result.anchor}: {result.tasks} tasks, "
          f"{len({d.template_id for d in result.disagreements})} template(s) disagreeing "
          f"({seconds:.1f} s; python gold {result.python_seconds:.1f} s, sql gold {result.sql_seconds:.1f} s "
          f"in {result.sql_queries} queries)")
    width = max(len(n) for n in maps)
    for name, f in result.maps.items():
        print(f"  {name:<{width}}  tasks {f.tasks:>5}  disagreements {f.disagreements:>3}  "
              f"moved from gold at T {f.moved:>4}  no answer {f.none:>3}")
    for d in result.disagreements[:limit]:
        print(f"  DISAGREE {d}")
    if len(result.disagreements) > limit:
        print(f"  ... and {len(result.disagreements) - limit} more")


def _world_figures(result: Any, maps: dict[str, dict[str, dt.date]]) -> dict[str, Any]:
    return {
        "world_id": result.world_id, "t": result.anchor.isoformat(), "tasks": result.tasks,
        "maps": {name: {"vintage": {c: d.isoformat() for c, d in maps[name].items()}, **vars(f)}
                 for name, f in result.maps.items()},
        "disagreements": [str(d) for d in result.disagreements],
        "disagreements_by_template": dict(result.by_template),
        "python_seconds": round(result.python_seconds, 2), "sql_seconds": round(result.sql_seconds, 2),
        "sql_queries": result.sql_queries,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    figures = run(args)
    figures["seconds"] = round(time.perf_counter() - started, 1)
    print(f"{len(figures['worlds'])} world(s), {figures['tasks']} tasks, {figures['comparisons']} comparisons "
          f"(task x vintage map): {figures['disagreements']} disagreement(s) ({figures['seconds']} s)")
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return 1 if figures["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
