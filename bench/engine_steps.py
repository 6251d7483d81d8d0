"""Where an engine run's time goes, step by step (issue 47): from the Dagster event log of the runs that
`bench/bench_cell_executor.py --paths dask,celery` made on a state folder.

    CHURNBENCH_STATE_DIR=<the bench's state folder> python bench/engine_steps.py [--json]

Per run of `cells_on_dask` / `cells_on_celery` (newest first): wall time (RUN_START to RUN_SUCCESS), the time
to the first STEP_START (the engine's workers starting and importing the code), per step the median time from
STEP_START to STEP_SUCCESS (the cell itself, as the pool's worker runs it, plus the step's own events and output),
and per worker process the median gap between one step's STEP_SUCCESS and that worker's next STEP_START (what
the engine costs between two cells: dispatch, the step's set-up). The pool's own per-cell figures are in its
`sweep` progress lines, not in an event log.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections import defaultdict
from typing import Any

import dagster as dg

JOBS = ("cells_on_dask", "cells_on_celery")


def run_steps(instance: dg.DagsterInstance, run_id: str) -> dict[str, Any]:
    records = instance.all_logs(run_id)
    run_start = run_end = None
    steps: dict[str, dict[str, Any]] = defaultdict(dict)
    for r in records:
        event = r.dagster_event
        if event is None:
            continue
        kind = event.event_type
        if kind == dg.DagsterEventType.RUN_START:
            run_start = r.timestamp
        elif kind in (dg.DagsterEventType.RUN_SUCCESS, dg.DagsterEventType.RUN_FAILURE):
            run_end = r.timestamp
        elif kind == dg.DagsterEventType.STEP_START and event.step_key:
            steps[event.step_key].update(start=r.timestamp, pid=event.pid)
        elif kind == dg.DagsterEventType.STEP_SUCCESS and event.step_key:
            steps[event.step_key]["end"] = r.timestamp
    done = [s for s in steps.values() if "start" in s and "end" in s]
    by_worker: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for s in done:
        by_worker[s["pid"]].append(s)
    gaps = []
    for worker_steps in by_worker.values():
        worker_steps.sort(key=lambda s: s["start"])
        gaps += [b["start"] - a["end"] for a, b in itertools.pairwise(worker_steps)]
    durations = [s["end"] - s["start"] for s in done]
    first = min((s["start"] for s in done), default=None)
    return {"run_id": run_id[:8], "steps": len(done), "workers": len(by_worker),
            "wall_s": round(run_end - run_start, 1) if run_start and run_end else None,
            "to_first_step_s": round(first - run_start, 1) if first and run_start else None,
            "step_median_s": round(statistics.median(durations), 2) if durations else None,
            "step_sum_s": round(sum(durations), 1),
            "gap_between_steps_median_s": round(statistics.median(gaps), 2) if gaps else None,
            "gap_between_steps_sum_s": round(sum(gaps), 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.state import StatePaths

    with open_session(StatePaths.resolve()) as session:
        out = {job: [run_steps(session.instance, run.run_id)
                     for run in session.instance.get_runs(dg.RunsFilter(job_name=job, statuses=[
                         dg.DagsterRunStatus.SUCCESS]))] for job in JOBS}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for job, runs in out.items():
            for r in runs:
                print(job, " ".join(f"{k}={v}" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
