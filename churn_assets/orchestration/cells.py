"""Many evaluation cells in parallel worker processes (`run_cells`).

A *cell* is one scenario to evaluate: world, arm, policy, T', T, SaaS profile (and, for the LLM agent, its
settings). `scenario_runs.run_scenario` is the one way a cell is evaluated: define the scenario, build its
missing inputs (`scenario_materializer`), materialize its `eval_run` partition, return the summary.
`churnbench run` and `paper` call it in their own process; the sweeps call `run_cells`.

    results = run_cells(StatePaths.resolve(), [Cell(world, "grounding", "tiered", t_prime, t), ...],
                        workers=2, progress=print)

`run_cells` runs a list of cells on one state folder with `workers` at once and returns one `CellResult` per cell,
in input order: with one worker everything runs in the calling process, one job at a time; with more, the jobs go
to the cell engine (`engine.EnginePool`: celery workers on this host, started as services, and any worker of
another host on the same broker; decision 330). Three phases:

1. in the calling process: each distinct cell is defined and registered and gets its plan (stored, made
   once); worlds without a ledger get it; the union of every cell's missing inputs is put in dependency
   order (`scenario_materializer.plan_steps`);
2. the input builds run on the workers, each as soon as the builds it depends on are done, so two workers
   build independent partitions at once and no partition is built twice;
3. the cells run on the workers, each through `run_scenario` (which now finds its inputs and only evaluates).

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

import atexit
import contextlib
import datetime as dt
import importlib
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from churn_assets.arms.registry import ARMS
from churn_assets.error_traces import has_trace, trace_text, write_trace
from churn_assets.errors import UserFacingError, error_line
from churn_assets.evaluation.requests import Request
from churn_assets.freshness.scenario import LEDGER, RAG_INDEX, VECTOR_INDEX, ScenarioInput
from churn_assets.grounding.embeddings import load_model
from churn_assets.orchestration.code_location import CODE_LOCATION_MODULE
from churn_assets.orchestration.dead_runs import PID_TAG, runs_of_host, tag_value
from churn_assets.orchestration.engine import EnginePool, before_cancel, in_engine_worker
from churn_assets.orchestration.materialize import LAUNCHED_BY_TAG, open_session
from churn_assets.orchestration.requests import check_run
from churn_assets.orchestration.scenario_inputs import (
    blocking_checks,
    existing_inputs,
    needs_ledger_to_plan,
    scenario_plan,
)
from churn_assets.orchestration.scenario_materializer import (
    LAUNCHED_BY,
    STARTED_BY_TAG,
    Step,
    StepResult,
    asset_ancestors,
    build_step,
    depends_on,
    plan_steps,
)
from churn_assets.orchestration.scenario_runs import run_scenario
from churn_assets.orchestration.scenarios import register_scenario
from churn_assets.state import StatePaths
from churn_assets.world.ledger import LEDGER_FILE

if TYPE_CHECKING:
    import dagster as dg

    from churn_assets.arms.agents.llm_settings import LlmSettings
    from churn_assets.freshness.scenario import Scenario, ScenarioInput
    from churn_assets.orchestration.materialize import Session
    from churn_assets.orchestration.scenario_materializer import Step, StepResult


Progress = Callable[[str], None]


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

    def scenario(self, paths: StatePaths) -> Scenario:
        """The checked scenario on the state folder `paths` (the one request check: a bad one raises the user's
        error, before anything is registered)."""
        llm = self.llm
        return check_run(paths, Request(self.world, self.arm, self.policy, self.t_prime, self.t,
                                        llm.agent_id if llm else "", self.saas_profile,
                                        llm.to_json() if llm else None))


@dataclass(frozen=True)
class CellResult:
    """What became of one cell: its summary (`run_scenario`'s: summary.json plus `results`, `seconds`,
    `inputs_built`, `stale_answers`, ...) or the one-line error it failed with."""

    cell: Cell
    summary: dict[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0  # wall time of its evaluation (phase 3), 0 when it never ran
    log: tuple[str, ...] = field(default=(), repr=False)  # the materializer's lines while it ran
    worker: str = ""  # the engine worker that ran it (celery's name, `name@host`); "" in the calling process

    @property
    def ok(self) -> bool:
        return self.error is None


def run_cells(state_paths: StatePaths, cells: Sequence[Cell], *, workers: int = 1,
              progress: Progress | None = None, replan: bool = False, tags: dict[str, str] | None = None,
              on_cell: Callable[[CellResult], None] | None = None) -> list[CellResult]:
    """Evaluate `cells` on the state folder `state_paths`, `workers` jobs at once (`cell_pool`); one result per
    cell, in input order. The union of the cells' missing inputs is built once, each build as soon as the builds it
    depends on are done, and each cell as soon as its own inputs are; a failed cell fails alone. `replan`:
    plan every cell again (after a registry edit), as `churnbench run --replan` does. `tags`: added to every
    run launched (a sweep's id). `on_cell`: called in this process as each cell ends (a sweep saves its record
    there), with the cell's result. See the module docstring."""
    if workers < 1:
        raise UserFacingError(f"workers must be at least 1, not {workers}")
    say = progress or (lambda _line: None)
    started = time.perf_counter()

    cells = list(cells)
    with open_session(state_paths) as session, cell_pool(session, workers, say) as pool:
        pool.warm_up()  # the workers import Dagster and open their sessions while this process plans
        definitions = load_definitions(session.paths)
        prepared = _prepare(session, definitions, cells, replan, say, tags or {})
        if on_cell is not None:  # cells refused before anything ran end here
            for i, error in prepared.errors.items():
                on_cell(CellResult(cells[i], error=error))
        pool.definitions = definitions
        outcomes = _schedule(pool, _jobs(prepared, tags or {}), say, on_cell)
    results = _results(prepared, outcomes)
    ok = sum(r.ok for r in results)
    say(f"cells: {ok} of {len(results)} done, {len(results) - ok} failed, in {time.perf_counter() - started:.1f} s "
        f"({_workers_phrase(pool)})")
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
             say: Progress, tags: dict[str, str]) -> _Prepared:
    """In the calling process: define, register and plan every distinct cell; the union of missing inputs."""
    keys: list[str | None] = [None] * len(cells)
    errors: dict[int, str] = {}
    to_run: dict[str, int] = {}
    plans = {}
    for i, cell in enumerate(cells):
        try:
            scenario = cell.scenario(session.paths)
            keys[i] = key = scenario.key
            if key in to_run:
                continue
            register_scenario(session.paths, session.instance, scenario)
            world = scenario.world_id
            if needs_ledger_to_plan(scenario) and not (session.paths.ledger_dir(world) / LEDGER_FILE).exists():
                # Rates are measured on the ledger: build it before planning.
                step = Step((LEDGER,), (ScenarioInput(LEDGER, world),), world, None)
                built = build_step(session, definitions, step, _build_tags(tags), say)
                if not built.ok:
                    raise UserFacingError(built.error)
            plans[key] = scenario_plan(session, scenario, replan=replan)
            to_run[key] = i
        except UserFacingError as e:
            errors[i] = error_line(e)
    wanted = list(dict.fromkeys(item for plan in plans.values() for item in plan.inputs))
    existing, _ = existing_inputs(session, wanted, checks=blocking_checks(definitions.resolve_asset_graph()))
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


# Rough relative cost of one build (measured on the 30-day world: a dbt build ~10-40 s, an index day ~5-40 s
# with the model load, the warehouse pair ~10 s, other partitions ~1 s, a cell's evaluation ~5 s). Only a
# scheduling hint: the longest chain of work left below a job goes first, so the slow builds start early.
_COST_HINT = {"analytics_dbt": 20.0, "vector_index": 15.0, "rag_index": 15.0, "warehouse_raw": 8.0, "ledger": 2.0}
_CELL_COST = 5.0
# A cell of an arm that searches the RAG corpus calls no live store: it goes after the cells that call the SaaS
# API, so their calls start early (the quota refills at a fixed rate: every second before the first call is
# lost) and it runs on the cores beside the last of them, which mostly wait. Measured on the warm paper.
_CORPUS_CELL_COST = 4.0


@dataclass
class _Job:
    """One unit of work for the pool: an input build (`step`) or a cell's evaluation (`key`)."""

    id: Any  # the Step, or ("cell", scenario key)
    label: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    needs: set[Any]
    cost: float
    rank: float = 0.0  # cost plus the most expensive chain of jobs waiting on this one
    corpus: bool = False  # a cell of an arm that searches the RAG corpus (it needs the embedding model)


def _jobs(prepared: _Prepared, tags: dict[str, str]) -> list[_Job]:
    """The input builds and the cells as one graph: a cell needs the builds of its missing inputs, and the
    embedding builds of a world (vector index and RAG corpus days) run one after the other, in day order: each
    embeds only the chunks the earlier ones have not (two days built at once would both embed everything;
    measured on the 30-day world: 35 s for the first day, 1.7 s for the next one after it)."""
    step_of = {i: s for s in prepared.steps for i in s.inputs}
    jobs = [_Job(s, s.label, _worker_build, (s, tags), set(prepared.needs[s]),
                 max((_COST_HINT.get(i.asset, 1.0) for i in s.inputs), default=1.0)) for s in prepared.steps]
    previous: dict[str, _Job] = {}
    # Within a day, the steps' own dependency order (`plan_steps`): a day's RAG corpus reads its vector index,
    # so chaining them by label (rag_index before vector_index) would make a cycle.
    order = {s: n for n, s in enumerate(prepared.steps)}
    for job in sorted(jobs, key=lambda j: (j.id.world, j.id.day or dt.date.min, order[j.id])):
        if {i.asset for i in job.id.inputs} & {VECTOR_INDEX, RAG_INDEX}:
            if job.id.world in previous:
                job.needs.add(previous[job.id.world].id)
            previous[job.id.world] = job
    corpus = {name for name in {c.arm for c in prepared.cells} if name in ARMS and ARMS[name].searches_corpus}
    preload = bool(corpus)  # some cell will need the embedding model: each worker loads it in the background
    for key, index in prepared.to_run.items():
        cell = prepared.cells[index]
        jobs.append(_Job(("cell", key), cell.label, _worker_cell, (cell, tags, preload),
                         {step_of[i] for i in prepared.inputs_of[key]},
                         _CORPUS_CELL_COST if cell.arm in corpus else _CELL_COST, corpus=cell.arm in corpus))
    by_id = {j.id: j for j in jobs}
    waiting_on: dict[Any, list[_Job]] = {j.id: [] for j in jobs}
    for j in jobs:
        for need in j.needs:
            waiting_on[need].append(j)
    for j in _topological(jobs)[::-1]:
        j.rank = j.cost + max((d.rank for d in waiting_on[j.id]), default=0.0)
    assert len(by_id) == len(jobs)
    return jobs


def _topological(jobs: list[_Job]) -> list[_Job]:
    """The jobs, each after everything it needs (the graph is acyclic: the steps' order and day order agree)."""
    placed: set[Any] = set()
    out: list[_Job] = []
    todo = list(jobs)
    while todo:
        ready = [j for j in todo if j.needs <= placed]
        if not ready:
            raise RuntimeError("internal: the jobs' dependencies form a cycle")
        for j in ready:
            placed.add(j.id)
            out.append(j)
            todo.remove(j)
    return out


BUSY_RETRY_S = 1.0  # how soon a build whose lock another process holds is asked for again


def _schedule(pool: InProcessPool | EnginePool, jobs: list[_Job], say: Progress,
              on_cell: Callable[[CellResult], None] | None = None) -> dict[Any, Any]:
    """Run the jobs, at most `pool.workers` at a time, the highest-ranked ready job first. Returns each job's
    outcome: its result, or the reason it did not run (a string).

    A build whose lock another process holds comes back `busy` at once (a worker never idles on a lock while
    other work is ready) and is asked for again `BUSY_RETRY_S` later; when the other process has finished, it
    finds the inputs built and reuses them. A job whose worker died is sent again by the engine itself, once
    (`engine.EnginePool`)."""
    pending = {j.id: j for j in jobs}
    not_before: dict[Any, float] = {}  # busy builds: when to ask again
    outcomes: dict[Any, Any] = {}
    running: dict[Future[Any], _Job] = {}
    builds = sum(1 for j in jobs if not isinstance(j.id, tuple))
    cells = len(jobs) - builds
    counts = {"input": 0, "cell": 0}

    def report(job: _Job, outcome: Any) -> None:
        kind = "cell" if isinstance(job.id, tuple) else "input"
        counts[kind] += 1
        total = cells if kind == "cell" else builds
        say(f"  {kind} [{counts[kind]}/{total}] {_describe(job, outcome)}")
        if kind == "cell" and on_cell is not None:
            cell = job.args[0]
            on_cell(CellResult(cell, error=outcome) if isinstance(outcome, str) else outcome)

    while pending or running:
        for job in list(pending.values()):
            failed = next((n for n in job.needs if n in outcomes and not _succeeded(outcomes[n])), None)
            if failed is not None:
                del pending[job.id]
                outcomes[job.id] = f"input {failed.label} failed"
                report(job, outcomes[job.id])
        now = time.monotonic()
        ready = sorted((j for j in pending.values() if all(n in outcomes for n in j.needs)
                        and not_before.get(j.id, 0.0) <= now), key=lambda j: -j.rank)
        for job in ready[:max(0, pool.workers - len(running))]:
            del pending[job.id]
            running[pool.submit(job.fn, _submitted_args(job, pending, pool.workers))] = job
        backed_off = [t for i, t in not_before.items() if i in pending]
        if not running:
            if backed_off:
                time.sleep(max(0.0, min(backed_off) - time.monotonic()))
                continue
            if pending:  # every job's needs are jobs of the graph, which is acyclic
                raise RuntimeError(f"internal: {len(pending)} job(s) can never run")
            break
        timeout = max(0.0, min(backed_off) - time.monotonic()) if backed_off else None
        done, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
        for future in done:
            job = running.pop(future)
            try:
                outcome = future.result()
            except Exception as e:
                outcome = error_line(e)
            if getattr(outcome, "busy", False):
                if job.id not in not_before:
                    say(f"  input {job.label}: another process is building it; doing other work meanwhile")
                not_before[job.id] = time.monotonic() + BUSY_RETRY_S
                pending[job.id] = job
                continue
            outcomes[job.id] = outcome
            report(job, outcome)
    return outcomes


def _submitted_args(job: _Job, pending: dict[Any, _Job], workers: int) -> tuple[Any, ...]:
    """A cell's arguments as it is submitted. It asks its worker to preload the embedding model (`_worker_cell`)
    only when the corpus cells come next: fewer cells that do not search the corpus are left than there are
    workers, so this worker's next cell is likely one that needs the model. The load (about 10 s of CPU) then
    runs while this cell waits on the SaaS quota, which binds the end of the paper, instead of beside every
    worker's first cell, whose work before its first SaaS call it slowed (the quota's last call comes 76 s after
    the first at the earliest, so that call's delay is the warm paper's)."""
    if not isinstance(job.id, tuple) or not job.args[2]:
        return job.args
    others = sum(1 for j in pending.values() if isinstance(j.id, tuple) and not j.corpus)
    return (*job.args[:2], others < workers)


def _succeeded(outcome: Any) -> bool:
    return not isinstance(outcome, str) and outcome.ok


def _results(prepared: _Prepared, outcomes: dict[Any, Any]) -> list[CellResult]:
    """One result per cell, in input order; cells of one scenario key share its run."""
    out = []
    for i, cell in enumerate(prepared.cells):
        key = prepared.keys[i]
        if key is None or i in prepared.errors:
            out.append(CellResult(cell, error=prepared.errors.get(i, "not defined")))
            continue
        outcome = outcomes[("cell", key)]
        if isinstance(outcome, str):
            out.append(CellResult(cell, error=outcome))
        else:
            out.append(CellResult(cell, outcome.summary, outcome.error, outcome.seconds, outcome.log, outcome.worker))
    return out


def _describe(job: _Job, outcome: Any) -> str:
    if isinstance(outcome, str):
        return f"{job.label}: FAILED: {outcome}"
    if not outcome.ok:
        return f"{job.label}: FAILED: {error_line(outcome.error)}"
    if isinstance(job.id, tuple):
        s = outcome.summary or {}
        where = f", on {outcome.worker}" if outcome.worker else ""
        return (f"{job.label}: stale {s.get('stale_answers')}, exposure {s.get('exposure')}, accuracy "
                f"{100 * (s.get('accuracy') or 0):.1f}% ({outcome.seconds:.1f} s{where})")
    if outcome.built_elsewhere:
        return f"{job.label}: built meanwhile by another process"
    return f"{job.label}: {outcome.seconds:.1f} s"


def _failure_line(e: BaseException) -> str:
    """A worker's error as one line, naming the file its full trace was written to when it has one (the CLI's
    rule, `commands/error_output.py`: the worker's process is gone once the parent prints the line)."""
    line = error_line(e)
    path = write_trace(trace_text(e)) if has_trace(e) else None
    return f"{line} (trace: {path})" if path is not None else line


# ---------------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------------


def load_definitions(paths: StatePaths) -> dg.Definitions:
    """The code location's definitions bound to `paths` (one per process: `defs_for` caches them)."""
    module = importlib.import_module(CODE_LOCATION_MODULE)
    return module.defs_for(str(paths.root))


@dataclass
class _WorkerState:
    session: Session | None
    definitions: dg.Definitions | None
    error: str | None = None  # why the worker could not start (every job it gets fails with it)
    pooled: bool = False  # an engine worker (False: the caller itself, `workers == 1`)


_WORKER: _WorkerState | None = None


def start_engine_worker() -> None:
    """An engine worker process's session and definitions (`churnbench worker`: celery's process that runs jobs,
    at its start), on the state folder of its environment; an error is kept for its jobs (a worker that cannot
    start says why in every job it gets instead of dying without a word)."""
    global _WORKER

    if _WORKER is None:
        _WORKER = _open_worker(None)
        before_cancel(_mark_runs_canceling)


def _mark_runs_canceling() -> None:
    """Mark the Dagster runs this worker process has started canceling (its job is being canceled): the interrupt
    that follows ends them CANCELED, not failed."""
    from dagster import DagsterRunStatus

    if _WORKER is None or _WORKER.session is None:
        return
    instance = _WORKER.session.instance
    for run in runs_of_host(instance, socket.gethostname(), [DagsterRunStatus.STARTED]):
        if tag_value(run.tags, PID_TAG) == str(os.getpid()):
            instance.report_run_canceling(run, message="Canceling: the run that sent this cell ended")


def _open_worker(root: str | None) -> _WorkerState:
    """A worker's own session on the state folder `root` (None: its environment's), open until the process exits,
    and the definitions bound to it; an error is kept for the jobs."""
    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    try:
        session = stack.enter_context(open_session(StatePaths.resolve(root)))
        return _WorkerState(session, load_definitions(session.paths), pooled=True)
    except Exception as e:
        return _WorkerState(None, None, error=f"the worker could not start: {error_line(e)}", pooled=True)


def worker_session() -> tuple[Session, dg.Definitions]:
    """The session and definitions of the process a job runs in (an engine worker, or the caller itself with one
    worker; the sweeps' exposure-only worlds are jobs of another module)."""
    if _WORKER is None and in_engine_worker():
        start_engine_worker()
    if _WORKER is None:
        raise RuntimeError("internal: a job ran in a process whose worker was not started")
    if _WORKER.error is not None or _WORKER.session is None or _WORKER.definitions is None:
        raise UserFacingError(_WORKER.error or "the worker could not start")
    return _WORKER.session, _WORKER.definitions


def _build_tags(tags: dict[str, str]) -> dict[str, str]:
    """An input build's run tags: the caller's (a sweep's id and launcher), and what started it."""
    return {LAUNCHED_BY_TAG: "cli", **tags, STARTED_BY_TAG: LAUNCHED_BY}


def _worker_build(step: Step, tags: dict[str, str]) -> StepResult:
    """Build one input step in this worker (the materializer's own run: lock, look again, materialize)."""
    try:
        session, definitions = worker_session()
        return build_step(session, definitions, step, _build_tags(tags), lambda _line: None, wait=False)
    except Exception as e:  # a lock, service or start-up error outside the run itself: this step fails alone
        return StepResult(step, 0.0, error=_failure_line(e))


def _worker_cell(cell: Cell, tags: dict[str, str], preload_encoder: bool = False) -> CellResult:
    """Evaluate one cell in this worker through `run_scenario`; any error becomes the cell's own.
    `preload_encoder`: a cell of this run searches the RAG corpus, so an engine worker starts loading the
    embedding model in a thread now (about 10 s of imports, beside a cell that mostly waits on its stores)
    instead of in that cell."""
    if preload_encoder and _WORKER is not None and _WORKER.pooled:
        _preload_encoder()
    log: list[str] = []
    started = time.perf_counter()
    try:
        session, definitions = worker_session()
        summary = run_scenario(session, definitions, cell.world, cell.arm, cell.t_prime, cell.t, cell.policy,
                               cell.saas_profile, log.append, llm=cell.llm, tags=tags or None)
    except Exception as e:
        if not isinstance(e, UserFacingError):
            log += traceback.format_exc().splitlines()
        return CellResult(cell, error=_failure_line(e), seconds=time.perf_counter() - started, log=tuple(log))
    return CellResult(cell, summary, seconds=time.perf_counter() - started, log=tuple(log))


_PRELOAD: threading.Thread | None = None


def _preload_encoder() -> None:
    """Load the embedding model in a daemon thread, once per worker (`load_model` is thread-safe: a cell that
    needs it meanwhile waits for this load). A failed load is left for the cell that needs the model to
    report."""
    global _PRELOAD
    if _PRELOAD is not None:
        return

    def load() -> None:
        with contextlib.suppress(Exception):
            load_model()

    _PRELOAD = threading.Thread(target=load, name="churnbench-encoder-preload", daemon=True)
    _PRELOAD.start()


def cell_pool(session: Session, workers: int, say: Progress | None = None) -> InProcessPool | EnginePool:
    """Where `run_cells` and the sweeps' exposure-only worlds run their jobs: this process for one worker, the cell
    engine for more (decision 330: the process pool it replaced measured 1.04x faster, not enough to keep two ways
    of running a cell). `say`: told what the engine canceled when the run ends before its jobs."""
    return InProcessPool(session) if workers == 1 else EnginePool(session, workers, say)


def _workers_phrase(pool: InProcessPool | EnginePool) -> str:
    if isinstance(pool, InProcessPool):
        return "in this process"
    return f"{pool.workers} engine worker{'s' if pool.workers > 1 else ''}"


class InProcessPool:
    """The pool's interface for one worker: a job runs in this process when it is submitted, on the caller's
    session and `definitions` (set before the first job), and its future is done when `submit` returns."""

    workers = 1

    def __init__(self, session: Session) -> None:
        self.session = session
        self.definitions: dg.Definitions | None = None

    def __enter__(self) -> InProcessPool:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def warm_up(self) -> None:
        """Nothing to start: the caller is the worker."""

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Future[Any]:
        global _WORKER
        future: Future[Any] = Future()
        saved = _WORKER
        _WORKER = _WorkerState(self.session, self.definitions)
        try:
            future.set_result(fn(*args))
        except Exception as e:
            future.set_exception(e)
        finally:
            _WORKER = saved
        return future
