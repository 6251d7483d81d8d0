"""Evaluation cells, one at a time (`run_scenario`) or many in parallel worker processes (`run_cells`).

A *cell* is one scenario to evaluate: world, arm, policy, T', T, SaaS profile (and, for the LLM agent, its
settings). `run_scenario` is the one way a cell is evaluated: define the scenario, build its missing inputs
(`scenario_materializer`), materialize its `eval_run` partition, return the summary. `churnbench run` and
`paper` call it in their own process.

    results = run_cells(StatePaths.resolve(), [Cell(world, "grounding", "tiered", t_prime, t), ...],
                        workers=2, progress=print)

`run_cells` runs a list of cells on one state folder in `workers` processes (`spawn`ed; `workers=1` runs in
the calling process) and returns one `CellResult` per cell, in input order. Three phases:

1. in the calling process: each distinct cell is defined and registered and gets its plan (stored, made
   once); worlds without a ledger get it; the union of every cell's missing inputs is put in dependency
   order (`scenario_materializer.plan_steps`);
2. the input builds run in the pool, each as soon as the builds it depends on are done, so two workers
   build independent partitions at once and no partition is built twice;
3. the cells run in the pool, each through `run_scenario` (which now finds its inputs and only evaluates).

A cell that fails (a bad scenario, an input build that failed, an evaluation that raised, a worker that
died) fails alone: its `CellResult.error` says why in one line and the other cells go on. Two cells with the
same scenario key are run once and share the result. `progress` gets one line per phase, per input built
and per cell done.

Concurrency with other processes on the same state folder (another `run_cells`, `churnbench run`, the UI) is
safe: every build a cell may share with another holds a lock (`docs/decisions.md`, "Cells in parallel"), an
input found built meanwhile is reused, and a second run of a finished experiment waits for the first and
reuses its results folder.

Each worker opens its own session (services found through the state folder, its own connection to the
Dagster instance) and loads the code location by module name, as Dagster's code servers do: this module sits
below `definitions.py` (the sweep job in `jobs.py` builds on it) and never imports it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError
from churn_assets.state import StatePaths

if TYPE_CHECKING:  # the pool's modules are imported when a pool starts: `churnbench --help` stays fast
    from concurrent.futures import Future, ProcessPoolExecutor

    import dagster as dg

    from churn_assets.arms.agents.llm import LlmSettings
    from churn_assets.freshness.scenario import Scenario, ScenarioInput
    from churn_assets.orchestration.materialize import Session
    from churn_assets.orchestration.scenario_materializer import Step, StepResult

# The code location (workspace.yaml's `module_name`); its `defs_for(state_dir)` binds definitions to a folder.
CODE_LOCATION_MODULE = "churn_assets.orchestration.definitions"
TORCH_THREADS_ENV = "CHURNBENCH_TORCH_THREADS"  # grounding/embeddings.py reads it when the model loads

Progress = Callable[[str], None]


# ---------------------------------------------------------------------------------------------------
# One cell
# ---------------------------------------------------------------------------------------------------


def run_scenario(session: Session, definitions: dg.Definitions, world: str, arm: str, t_prime: dt.date,
                 t: dt.date, policy: str, saas_profile: str, echo: Callable[[str], None], *,
                 llm: LlmSettings | None = None, replan: bool = False) -> dict[str, Any]:
    """Define the scenario, build its inputs, run `eval_run` for it, return its summary (plus where it is).
    `llm`: the `LlmSettings` of an LLM agent (its agent id goes into the key, its settings into the experiment
    hash). `replan`: plan the scenario again (after a registry edit) instead of refusing its stored plan."""
    from churn_assets.evaluation.verdicts import STALE_VERDICTS
    from churn_assets.orchestration.materialize import materialize
    from churn_assets.orchestration.scenario_materializer import materialize_scenario
    from churn_assets.orchestration.scenarios import register_scenario

    scenario = _define(world, arm, policy, t_prime, t, saas_profile, llm)
    key = register_scenario(session.paths, session.instance, scenario)
    build = materialize_scenario(session, definitions, scenario, replan=replan, echo=echo)
    started = time.perf_counter()
    [result] = materialize(session, definitions, ["eval_run"], [key])
    seconds = time.perf_counter() - started
    # This run's own folder (experiment hash + code version), as the asset recorded it: never a folder of
    # an earlier code version under the same scenario key.
    folder = Path(str(result.metadata["eval_run"]["results"]))
    summary = json.loads((folder / "summary.json").read_text())
    timings = json.loads((folder / "timings.json").read_text())
    summary.update(results=str(folder), seconds=round(seconds, 1), inputs_built=len(build.built),
                   mean_latency_ms=timings.get("mean_latency_ms"), saas=timings.get("saas", {}))
    summary["stale_answers"] = sum(summary["verdicts"].get(v, 0) for v in STALE_VERDICTS)
    return summary


def _define(world: str, arm: str, policy: str, t_prime: dt.date, t: dt.date, saas_profile: str,
            llm: LlmSettings | None) -> Scenario:
    from churn_assets.arms.registry import define_scenario
    from churn_assets.freshness.scenario import DETERMINISTIC_AGENT

    return define_scenario(world, arm, policy, t_prime, t, agent_id=llm.agent_id if llm else DETERMINISTIC_AGENT,
                           saas_profile=saas_profile, model_settings=llm.to_json() if llm else None)


# ---------------------------------------------------------------------------------------------------
# Many cells
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One scenario to evaluate (what `churnbench run` takes). `llm`: the settings of an LLM agent; None is
    the deterministic agent."""

    world: str
    arm: str
    policy: str
    t_prime: dt.date
    t: dt.date
    saas_profile: str = "default"
    llm: LlmSettings | None = None

    @property
    def label(self) -> str:
        agent = "" if self.llm is None else f" {self.llm.agent_id}"
        return f"{self.arm} ({self.policy}) T'={self.t_prime} T={self.t}{agent} [{self.world}]"

    def scenario(self) -> Scenario:
        """The checked scenario (raises the user's error for a bad one)."""
        return _define(self.world, self.arm, self.policy, self.t_prime, self.t, self.saas_profile, self.llm)


@dataclass(frozen=True)
class CellResult:
    """What became of one cell: its summary (`run_scenario`'s: summary.json plus `results`, `seconds`,
    `inputs_built`, `stale_answers`, ...) or the one-line error it failed with."""

    cell: Cell
    summary: dict[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0  # wall time of its evaluation (phase 3), 0 when it never ran
    log: tuple[str, ...] = field(default=(), repr=False)  # the materializer's lines while it ran

    @property
    def ok(self) -> bool:
        return self.error is None


def run_cells(state_paths: StatePaths, cells: Sequence[Cell], *, workers: int = 1,
              progress: Progress | None = None, replan: bool = False) -> list[CellResult]:
    """Evaluate `cells` on the state folder `state_paths` in `workers` processes; one result per cell, in
    input order. Builds the union of the cells' missing inputs first (each once, in parallel where the
    dependency order allows), then evaluates the cells in parallel. A failed cell fails alone. `replan`: plan
    every cell again (after a registry edit), as `churnbench run --replan` does. See the module docstring."""
    if workers < 1:
        raise UserFacingError(f"workers must be at least 1, not {workers}")
    say = progress or (lambda _line: None)
    started = time.perf_counter()
    from churn_assets.orchestration.materialize import open_session

    with open_session(state_paths) as session:
        definitions = load_definitions(session.paths)
        prepared = _prepare(session, definitions, list(cells), replan, say)
        n = min(workers, max(len(prepared.steps), len(prepared.to_run), 1))
        with _pool(session, definitions, n) as pool:
            failed_steps = _build_inputs(pool, prepared, say)
            results = _evaluate(pool, prepared, failed_steps, say)
    ok = sum(r.ok for r in results)
    say(f"cells: {ok} of {len(results)} done, {len(results) - ok} failed, in {time.perf_counter() - started:.1f} s "
        f"({n} worker{'s' if n > 1 else ''})")
    return results


@dataclass
class _Prepared:
    cells: list[Cell]
    keys: list[str | None]  # the scenario key of each cell (None: it could not be defined)
    errors: dict[int, str]  # cell index -> why it failed before running
    to_run: dict[str, int]  # scenario key -> index of the first cell with it
    inputs_of: dict[str, list[ScenarioInput]]  # scenario key -> its missing inputs
    steps: list[Step]
    needs: dict[Step, set[Step]]  # step -> the steps it depends on


def _prepare(session: Session, definitions: dg.Definitions, cells: list[Cell], replan: bool,
             say: Progress) -> _Prepared:
    """Phase 1, in the calling process: define, register and plan every distinct cell; the missing inputs."""
    from churn_assets.freshness.scenario import LEDGER, ScenarioInput
    from churn_assets.orchestration.scenario_inputs import existing_inputs, needs_ledger_to_plan, scenario_plan
    from churn_assets.orchestration.scenario_materializer import (
        Step,
        asset_ancestors,
        build_step,
        depends_on,
        plan_steps,
    )
    from churn_assets.orchestration.scenarios import register_scenario
    from churn_assets.world.ledger import LEDGER_FILE

    keys: list[str | None] = [None] * len(cells)
    errors: dict[int, str] = {}
    to_run: dict[str, int] = {}
    plans = {}
    for i, cell in enumerate(cells):
        try:
            scenario = cell.scenario()
            keys[i] = key = scenario.key
            if key in to_run:
                continue
            register_scenario(session.paths, session.instance, scenario)
            world = scenario.world_id
            if needs_ledger_to_plan(scenario) and not (session.paths.ledger_dir(world) / LEDGER_FILE).exists():
                # Rates are measured on the ledger: build it before planning.
                step = Step((LEDGER,), (ScenarioInput(LEDGER, world),), world, None)
                built = build_step(session, definitions, step, {}, say)
                if not built.ok:
                    raise UserFacingError(built.error)
            plans[key] = scenario_plan(session, scenario, replan=replan)
            to_run[key] = i
        except UserFacingError as e:
            errors[i] = _one_line(e)
    wanted = list(dict.fromkeys(item for plan in plans.values() for item in plan.inputs))
    existing, _ = existing_inputs(session, wanted)
    missing = [item for item in wanted if item not in existing]
    ancestors = asset_ancestors(definitions)
    steps = plan_steps(missing, ancestors)
    needs = {s: {o for o in steps if depends_on(s, o, ancestors)} for s in steps}
    missing_set = set(missing)
    inputs_of = {key: [i for i in plan.inputs if i in missing_set] for key, plan in plans.items()}
    say(f"cells: {len(cells)} ({len(to_run)} distinct, {len(errors)} refused); inputs: {len(wanted)}, "
        f"{len(wanted) - len(missing)} exist, {len(missing)} to build in {len(steps)} run(s)")
    for i, error in errors.items():
        say(f"  cell {cells[i].label}: FAILED: {error}")
    return _Prepared(cells, keys, errors, to_run, inputs_of, steps, needs)


def _build_inputs(pool: _Pool, prepared: _Prepared, say: Progress) -> dict[Step, str]:
    """Phase 2: every missing input, each build submitted once the builds it depends on are done. Returns the
    steps that failed (or were skipped because one they need failed), with the reason."""
    pending = list(prepared.steps)
    done: set[Step] = set()
    failed: dict[Step, str] = {}
    total = len(pending)

    def submit_ready() -> list[tuple[Step, Callable[..., Any], tuple[Any, ...]]]:
        ready = []
        for step in list(pending):
            blocker = next((f for f in prepared.needs[step] if f in failed), None)
            if blocker is not None:
                pending.remove(step)
                failed[step] = f"needs {blocker.label}, which failed"
                say(f"  input [{total - len(pending)}/{total}] {step.label}: skipped ({blocker.label} failed)")
            elif prepared.needs[step] <= done:
                pending.remove(step)
                ready.append((step, _worker_build, (step,)))
        return ready

    def finished(step: Step, result: StepResult | BaseException) -> None:
        n = len(done) + len(failed) + 1
        if isinstance(result, BaseException):
            failed[step] = _one_line(result)
        elif result.ok:
            done.add(step)
            how = "built meanwhile by another process" if result.built_elsewhere else f"{result.seconds:.1f} s"
            say(f"  input [{n}/{total}] {step.label}: {how}")
            return
        else:
            failed[step] = _one_line(result.error)
        say(f"  input [{n}/{total}] {step.label}: FAILED: {failed[step]}")

    pool.drive(submit_ready, finished)
    return failed


def _evaluate(pool: _Pool, prepared: _Prepared, failed_steps: dict[Step, str], say: Progress
              ) -> list[CellResult]:
    """Phase 3: every distinct cell whose inputs were built, through `run_scenario` in the pool."""
    failed_inputs = {i: (s, error) for s, error in failed_steps.items() for i in s.inputs}
    by_key: dict[str, CellResult] = {}
    queue: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = []
    for key, index in prepared.to_run.items():
        cell = prepared.cells[index]
        blocked = next((failed_inputs[i] for i in prepared.inputs_of[key] if i in failed_inputs), None)
        if blocked is not None:
            by_key[key] = CellResult(cell, error=f"input {blocked[0].label} failed: {blocked[1]}")
            say(f"  cell {cell.label}: FAILED: {by_key[key].error}")
        else:
            queue.append((key, _worker_cell, (cell,)))
    total = len(queue)

    def submit_ready() -> list[tuple[str, Callable[..., Any], tuple[Any, ...]]]:
        ready = list(queue)
        queue.clear()
        return ready

    def finished(key: str, result: CellResult | BaseException) -> None:
        if isinstance(result, BaseException):
            result = CellResult(prepared.cells[prepared.to_run[key]], error=_one_line(result))
        by_key[key] = result
        say(f"  cell [{sum(k in by_key for k in prepared.to_run) - (len(prepared.to_run) - total)}/{total}] "
            f"{_describe(result)}")

    pool.drive(submit_ready, finished)
    out = []
    for i, cell in enumerate(prepared.cells):
        key = prepared.keys[i]
        if key is None or i in prepared.errors:
            out.append(CellResult(cell, error=prepared.errors.get(i, "not defined")))
            continue
        shared = by_key[key]
        out.append(shared if shared.cell == cell else CellResult(cell, shared.summary, shared.error, shared.seconds,
                                                                 shared.log))
    return out


def _describe(result: CellResult) -> str:
    if not result.ok:
        return f"{result.cell.label}: FAILED: {result.error}"
    s = result.summary or {}
    accuracy = s.get("accuracy")
    return (f"{result.cell.label}: stale {s.get('stale_answers')}, exposure {s.get('exposure')}, accuracy "
            f"{100 * (accuracy or 0):.1f}% ({result.seconds:.1f} s)")


def _one_line(e: BaseException | str | None) -> str:
    text = " ".join(str(e or "").split())
    if isinstance(e, BaseException) and not isinstance(e, UserFacingError):
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text[:1000] or "unknown error"


# ---------------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------------


def load_definitions(paths: StatePaths) -> dg.Definitions:
    """The code location's definitions bound to `paths` (one per process: `defs_for` caches them)."""
    module = importlib.import_module(CODE_LOCATION_MODULE)
    return module.defs_for(str(paths.root))  # type: ignore[no-any-return]


@dataclass
class _WorkerState:
    session: Session
    definitions: dg.Definitions
    stack: contextlib.ExitStack


_WORKER: _WorkerState | None = None


def _start_worker(root: str, torch_threads: int | None) -> None:
    """Pool initializer: this worker's own session on the state folder, and the definitions bound to it."""
    global _WORKER
    if torch_threads is not None:
        os.environ.setdefault(TORCH_THREADS_ENV, str(torch_threads))  # before the embedding model loads
    from churn_assets.orchestration.materialize import open_session

    stack = contextlib.ExitStack()
    session = stack.enter_context(open_session(StatePaths.resolve(root)))
    import atexit

    atexit.register(stack.close)
    _WORKER = _WorkerState(session, load_definitions(session.paths), stack)


def _worker() -> _WorkerState:
    if _WORKER is None:
        raise RuntimeError("internal: a cell ran in a process whose worker was not started")
    return _WORKER


def _worker_build(step: Step) -> StepResult:
    """Build one input step in this worker (the materializer's own run: lock, look again, materialize)."""
    from churn_assets.orchestration.materialize import LAUNCHED_BY_TAG
    from churn_assets.orchestration.scenario_materializer import LAUNCHED_BY, StepResult, build_step

    w = _worker()
    try:
        return build_step(w.session, w.definitions, step, {LAUNCHED_BY_TAG: LAUNCHED_BY}, lambda _line: None)
    except Exception as e:  # a lock or service error outside the run itself: this step fails alone
        return StepResult(step, 0.0, error=_one_line(e))


def _worker_cell(cell: Cell) -> CellResult:
    """Evaluate one cell in this worker through `run_scenario`; any error becomes the cell's own."""
    w = _worker()
    log: list[str] = []
    started = time.perf_counter()
    try:
        summary = run_scenario(w.session, w.definitions, cell.world, cell.arm, cell.t_prime, cell.t, cell.policy,
                               cell.saas_profile, log.append, llm=cell.llm)
    except UserFacingError as e:
        return CellResult(cell, error=_one_line(e), seconds=time.perf_counter() - started, log=tuple(log))
    except Exception as e:
        log += traceback.format_exc().splitlines()
        return CellResult(cell, error=_one_line(e), seconds=time.perf_counter() - started, log=tuple(log))
    return CellResult(cell, summary, seconds=time.perf_counter() - started, log=tuple(log))


class _Pool:
    """The workers: `workers` spawned processes, or this process itself when `workers` is 1.

    `drive(next_jobs, finished)` submits the jobs `next_jobs()` returns (`(id, fn, args)`), waits for any to
    finish, reports it with `finished(id, result or exception)`, and repeats until nothing is running and
    `next_jobs` has nothing more. A worker that dies (a crash, the OOM killer) breaks a process pool and
    every job running in it: the pool is started again and each of those jobs retried once, so only a job
    that kills its worker twice fails (with the pool's error).
    """

    def __init__(self, session: Session, definitions: dg.Definitions, workers: int) -> None:
        self.session, self.definitions, self.workers = session, definitions, workers
        self.executor: ProcessPoolExecutor | None = None

    def _start(self) -> ProcessPoolExecutor:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        cores = len(os.sched_getaffinity(0))
        # spawn, not fork: this process holds Dagster's storage connections, pymongo clients and threads.
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_worker,
                                   initargs=(str(self.session.paths.root), max(1, cores // self.workers)))

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None

    def drive(self, next_jobs: Callable[[], list[tuple[Any, Callable[..., Any], tuple[Any, ...]]]],
              finished: Callable[[Any, Any], None]) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        if self.workers == 1:
            self._drive_inline(next_jobs, finished)
            return
        running: dict[Future[Any], tuple[Any, Callable[..., Any], tuple[Any, ...]]] = {}
        retried: set[Any] = set()
        while True:
            for job in next_jobs():
                running[self._submit(job[1], job[2])] = job
            if not running:  # jobs only become ready when running ones finish: nothing more will come
                return
            ready, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in ready:
                job = running.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool as e:
                    if job[0] not in retried:
                        retried.add(job[0])
                        running[self._submit(job[1], job[2])] = job
                        continue
                    result = UserFacingError(f"its worker process died twice ({_one_line(e)})")
                except Exception as e:
                    result = e
                finished(job[0], result)

    def _submit(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Future[Any]:
        from concurrent.futures.process import BrokenProcessPool

        if self.executor is None:
            self.executor = self._start()
        try:
            return self.executor.submit(fn, *args)
        except BrokenProcessPool:
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.executor = self._start()
            return self.executor.submit(fn, *args)

    def _drive_inline(self, next_jobs: Callable[[], list[tuple[Any, Callable[..., Any], tuple[Any, ...]]]],
                      finished: Callable[[Any, Any], None]) -> None:
        global _WORKER
        saved = _WORKER
        _WORKER = _WorkerState(self.session, self.definitions, contextlib.ExitStack())
        try:
            while jobs := next_jobs():
                for job_id, fn, args in jobs:
                    try:
                        result = fn(*args)
                    except Exception as e:
                        result = e
                    finished(job_id, result)
        finally:
            _WORKER = saved


@contextlib.contextmanager
def _pool(session: Session, definitions: dg.Definitions, workers: int) -> Iterator[_Pool]:
    pool = _Pool(session, definitions, workers)
    try:
        yield pool
    finally:
        pool.close()
