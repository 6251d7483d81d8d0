"""One batch of cells, run as its own process by tests/integration/test_figures_unchanged.py (its second test):

    python parallel_batch.py '{"world_days": 30, "world_name": "figures", "workers": 2,
                               "cells": [["grounding", "tiered", "2024-01-29", "2024-01-30"], ...]}'

Registers the world (idempotent), runs the cells with `run_cells` on the state folder of CHURNBENCH_STATE_DIR
and prints one JSON line: the results, in input order. The task count comes from CHURNBENCH_DEPLOYMENT
(worker processes inherit the environment, not a test's monkeypatch).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import warnings


def main(spec: dict) -> None:
    from churn_assets.orchestration.cells import Cell, run_cells
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import add_world
    from churn_assets.services import start_services
    from churn_assets.state import StatePaths
    from churn_assets.world.config import load_config

    warnings.simplefilter("ignore")
    started = time.perf_counter()

    def say(line: str) -> None:
        print(f"{time.perf_counter() - started:6.1f} {line}", file=sys.stderr, flush=True)

    paths = StatePaths.resolve()
    config = load_config(days=spec["world_days"], name=spec["world_name"])
    statuses = start_services(paths)
    say("services: " + ("started" if any(s.action == "started" for s in statuses) else "reused"))
    with open_session(paths) as session:
        add_world(paths, session.instance, config)
    say("world registered")
    cells = [Cell(config.world_id, arm, policy, dt.date.fromisoformat(tp), dt.date.fromisoformat(t))
             for arm, policy, tp, t in spec["cells"]]
    results = run_cells(paths, cells, workers=spec["workers"], progress=say)
    print(json.dumps([{"ok": r.ok, "error": r.error, "results": (r.summary or {}).get("results"),
                       "experiment_hash": (r.summary or {}).get("experiment_hash")} for r in results]))


if __name__ == "__main__":  # the pool's workers import this file too (as __mp_main__): only the parent runs a batch
    main(json.loads(sys.argv[1]))
