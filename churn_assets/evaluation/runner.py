"""One evaluation run: answer every task of a task set through an arm, score it, write the results.

    spec = RunSpec(scenario, world_config_hash, task_set_hash)
    summary = evaluate(arm, tasks, resolver, store, spec, exposure=run_exposure(...))

The run is keyed by its experiment hash (everything that can change an answer or a count) and the code
version; answers are checkpointed per task, so an interrupted run resumes where it stopped and gives the
same per-task answers, verdicts and counts. Timings go to a sidecar outside anything compared.

With a results catalog (`catalog=`: a `RunCatalog`, or the warehouse URL to open one on), the run is
recorded there as `running` when it starts, `complete` with its figures once its results folder is
complete, and `failed` when it raises (errors and interrupts alike): a failed run never looks complete.
Without one (unit tests) nothing is recorded outside the results folder.

`retry_transport=True` re-answers the transport failures of the experiment's finished result (a rate limit
or an outage is a verdict, but a short outage should not stay in the results forever): the answered rows
are kept as they are, only the `transport_failure` rows are asked again, into a retry folder of the same
experiment (`results.ResultsStore.next_retry`); its summary says `retry`, `retry_of` and how many transport
failures it re-asked. A finished result without transport failures is reused as always.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from churn_assets.errors import DataIntegrityError, UserFacingError, add_context
from churn_assets.evaluation.answer_lines import ANSWER_LOGGER, answer_line
from churn_assets.evaluation.awareness import staleness_awareness
from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.efficiency import efficiency_summary, seconds_summary
from churn_assets.evaluation.exposure import RunExposure
from churn_assets.evaluation.results import (
    IDENTITY_VERSION,
    ResultsStore,
    RunKey,
    RunWriter,
    code_version,
    experiment_hash,
    package_versions,
)
from churn_assets.evaluation.verdicts import STALE_VERDICTS, TRANSPORT_FAILURE, VERDICTS, Outcome, score
from churn_assets.freshness.scenario import DETERMINISTIC_AGENT, Scenario, ScenarioPlan
from churn_assets.grounding.traces import COORDINATOR
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Drawn, Task, TaskSetError, drawn_with, read_tasks, task_set_hash
from churn_assets.world.calendar import Day


class AnswerLike(Protocol):
    """What the runner needs of an arm's answer (`arms.base.ArmAnswer` provides it). Read-only: an answer is a
    frozen dataclass."""

    @property
    def task_id(self) -> str: ...

    @property
    def value(self) -> Any: ...

    @property
    def text(self) -> str: ...

    @property
    def parse_error(self) -> str | None: ...

    @property
    def transport_error(self) -> str | None: ...

    @property
    def budget_error(self) -> str | None: ...

    @property
    def data_as_of(self) -> Day | None: ...

    @property
    def grounded(self) -> bool | None: ...

    @property
    def copied_example(self) -> bool | None: ...

    @property
    def measure_calls(self) -> int: ...

    @property
    def measures_called(self) -> tuple[tuple[str, Any], ...]: ...

    @property
    def transcript(self) -> tuple[Mapping[str, Any], ...] | None: ...

    @property
    def timings_ms(self) -> dict[str, float]: ...

    @property
    def served_vintage(self) -> dict[str, Day]: ...

    @property
    def cost_units(self) -> float: ...

    @property
    def routes(self) -> list[str]: ...

    def to_json(self) -> dict[str, Any]: ...


class ContentCheck(Protocol):
    """A check of the stores' content that runs beside the answers (`eval_run`'s of the warehouse, decision 252):
    `poll` raises the `DataIntegrityError` it has found, if any (cheap: called after every answer); `finish` waits
    for it and checks once more, before the results are written."""

    def poll(self) -> None: ...

    def finish(self) -> None: ...


class ArmLike(Protocol):
    name: str

    @property
    def planned_vintage(self) -> dict[str, Day]: ...

    def answer(self, task: Task) -> AnswerLike: ...


@dataclass(frozen=True)
class RunSpec:
    """The identity of a run: its scenario, its plan and what it was asked on (hashed) — never how long it
    took. `plan` None: a run outside a stored scenario (unit tests), its plan fields then read None. `repeat`:
    which repeat of the experiment this run is (`evaluation/repeats.py`): part of the run's key and folder,
    not of the experiment hash, which all repeats share."""

    scenario: Scenario
    world_config_hash: str
    task_set_hash: str
    plan: ScenarioPlan | None = None
    repeat: int = 0

    @property
    def scenario_key(self) -> str:
        return self.scenario.key

    def experiment(self) -> dict[str, Any]:
        s = self.scenario
        plan = self.plan
        return {
            "identity_version": IDENTITY_VERSION,
            "world_id": s.world_id, "world_config_hash": self.world_config_hash, "arm": s.arm,
            "policy_id": s.policy_id, "policy_params": {"policy": s.policy},
            "effective_ttls": None if plan is None else dict(sorted(plan.effective_ttls.items())),
            "planned_vintage": None if plan is None else _day_json(plan.served_vintage),
            "t_prime": s.t_prime.isoformat(), "t": s.t.isoformat(), "task_set_hash": self.task_set_hash,
            "agent_id": s.agent_id, "model_settings": dict(s.model_settings or {}),
            "saas_profile": s.saas_profile, "packages": package_versions(),
        }

    def key(self, code: str | None = None) -> RunKey:
        return RunKey(self.scenario.world_id, self.scenario_key, experiment_hash(self.experiment()),
                      code or code_version(), repeat=self.repeat)

    def repeated(self, repeat: int) -> RunSpec:
        """The same experiment's repeat `repeat`."""
        return dataclasses.replace(self, repeat=repeat)


def _day_json(vintage: Mapping[str, Day]) -> dict[str, str]:
    return {c: d.isoformat() for c, d in sorted(vintage.items())}


def score_answer(resolver: GoldResolver, task: Task, answer: AnswerLike, planned: Mapping[str, Day],
                 exposed: bool | None) -> dict[str, Any]:
    """One task's result row: question, answer, gold at T, planned vintage and gold under it, verdict, trace; the
    as-of day the agent stated for its data (`data_as_of`, ISO day or null) and a model agent's usage block
    (calls, tool calls, input and output tokens, cost, seconds)."""
    outcome = Outcome(answer_text=answer.text, answer=answer.value, has_value=answer.value is not None,
                      read_days=answer.served_vintage, transport_failed=answer.transport_error is not None,
                      budget_exhausted=answer.budget_error is not None, question_parsed=answer.parse_error is None)
    scored = score(resolver, task, outcome)
    template = task.template  # (not T, the evaluation day)
    anchor = dt.date.fromisoformat(task.anchor)
    planned_gold = resolver.gold(template, task.params, anchor=anchor, vintage=dict(planned))
    stale_classes = sorted(c for c, d in scored.served_vintage.items() if d < anchor)
    trace = answer.to_json()
    return {
        "task_id": task.task_id, "template": template.template_id, "task_tier": template.task_tier,
        "intent": template.intent,
        "question_text": task.question_text, "answer": scored.answer, "answer_text": answer.text,
        "verdict": scored.verdict, "gold_at_t": scored.gold_at_anchor, "gold_served": scored.served_gold,
        "served_degenerate": scored.served_degenerate,
        "served_vintage": _day_json(scored.served_vintage), "planned_vintage": _day_json(planned),
        "gold_planned": planned_gold, "exposed": exposed, "classes_stale": stale_classes,
        "cost_units": answer.cost_units, "routes": answer.routes, "parse_error": answer.parse_error,
        "transport_error": answer.transport_error, "budget_error": answer.budget_error,
        "data_as_of": answer.data_as_of.isoformat() if answer.data_as_of else None,
        "grounded": answer.grounded, "copied_example": answer.copied_example, "measure_calls": answer.measure_calls,
        "measures_called": [{"call": call, "value": value} for call, value in answer.measures_called],
        "traces": trace.get("traces", []),
        **({"usage": trace["usage"]} if "usage" in trace else {}),  # a model-backed agent's tokens and cost
        # a model-backed agent's conversation (what `verify-results --replay` replays); none for the deterministic one
        **({"transcript": [dict(t) for t in answer.transcript]} if answer.transcript is not None else {}),
    }


def evaluate(
    arm: ArmLike,
    tasks: Sequence[Task],
    resolver: GoldResolver,
    store: ResultsStore,
    spec: RunSpec,
    *,
    exposure: RunExposure | Future[RunExposure] | None = None,
    code: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    transport_counters: Callable[[], Mapping[str, Any]] | None = None,
    catalog: RunCatalog | str | None = None,
    on_wait: Callable[[], None] | None = None,
    retry_transport: bool = False,
    content_check: ContentCheck | None = None,
    dagster_run_id: str | None = None,
) -> dict[str, Any]:
    """Answer, score and record every task; resume from a checkpoint with the same key. Returns the summary.

    `catalog` (a `RunCatalog` or a warehouse URL) records the run's status and figures; None records nothing.
    Holds the results folder's lock throughout (`ResultsStore.run_lock`); `on_wait` is called when another
    run of the same key holds it. `exposure` may still be being computed (a `Future`, as `eval_run` passes it:
    the ledger's side of a run then overlaps the arm's waits on its stores); answers are scored and
    checkpointed once it is known, in task order. `retry_transport`: re-answer the finished result's transport
    failures (the module doc); without any, the finished result is returned. `content_check` is polled after each
    answer and finished before the results are written: a store whose content it finds not what was recorded
    (`fabric/warehouse_content.py`) fails the run with its error, and the checkpoint is dropped, since no answer
    of this attempt can be shown to rest on the content that was checked.
    """
    key = spec.key(code)
    cat = RunCatalog(catalog) if isinstance(catalog, str) else catalog
    # One writer per results folder: a second run of this key (another cell of a parallel sweep) waits here,
    # then reuses the finished folder, or resumes the checkpoint of a run that died. The first folder's lock
    # covers the experiment's retry folders too.
    with store.run_lock(key, on_wait=on_wait):
        finished = finished_summary(store, spec, code=code, catalog=cat)
        retried: dict[str, Any] = {}
        if finished is not None:
            if not (retry_transport and transport_failures(finished)):
                return finished
            done = store.latest_complete(key)
            assert done is not None  # finished_summary read it
            key = store.next_retry(key)
            retried = {"retry": key.retry, "retry_of": done.folder_name,
                       "transport_failures_retried": transport_failures(finished)}
            keep = [r for r in store.read_tasks(done) if r["verdict"] != TRANSPORT_FAILURE]
        run_dir = store.run_dir(key)
        writer = store.open_run(key, spec.experiment())
        if retried and not writer.completed:  # a fresh retry folder: the answered rows, as they were
            for row in keep:
                writer.append(row)
        if cat is not None:
            cat.start(spec.scenario, key, run_dir, dagster_run_id)
        try:
            summary, timings = _answer_all(arm, tasks, resolver, writer, spec, key, exposure, progress,
                                           transport_counters, retried, content_check)
        except BaseException as e:
            if cat is not None:
                _record_failure(cat, key, e)
            raise
        if cat is not None:
            cat.complete(spec.scenario, key, run_dir, summary, timings)
        return summary


def transport_failures(summary: Mapping[str, Any]) -> int:
    """How many of a finished run's tasks are transport failures."""
    return int((summary.get("verdicts") or {}).get(TRANSPORT_FAILURE, 0))


def finished_summary(store: ResultsStore, spec: RunSpec, *, code: str | None = None,
                     catalog: RunCatalog | str | None = None) -> dict[str, Any] | None:
    """The summary of the finished run with this spec's identity (its newest complete retry), or None. Needs
    neither the ledger nor the stores: a reused cell costs a file read (and the catalog row, recorded again if
    it was missed)."""
    key = store.latest_complete(spec.key(code))
    if key is None:
        return None
    summary = store.read_summary(key)
    cat = RunCatalog(catalog) if isinstance(catalog, str) else catalog
    if cat is not None:  # recorded already, or the catalog was unreachable when the run finished
        cat.complete(spec.scenario, key, store.run_dir(key), summary, store.read_timings(key))
    return summary


def finished_run(store: ResultsStore, scenario: Scenario, config_hash: str, plan: ScenarioPlan, task_file: Path, *,
                 drawn: Drawn, catalog: RunCatalog | str | None = None
                 ) -> tuple[RunSpec, dict[str, Any]] | None:
    """(spec, summary) of the finished run of this scenario's identity, or None: also when its task set file is
    missing or unreadable, or is recorded as drawn with another count and seed than `drawn` (the deployment's)
    (the identity needs it; the caller's input check then says what is missing or out of date)."""
    recorded = drawn_with(task_file)
    if recorded is not None and recorded != drawn:
        return None
    try:
        tasks = read_tasks(task_file)
    except TaskSetError:
        return None
    spec = RunSpec(scenario, config_hash, task_set_hash(tasks), plan)
    summary = finished_summary(store, spec, catalog=catalog)
    return None if summary is None else (spec, summary)


def _record_failure(cat: RunCatalog, key: RunKey, error: BaseException) -> None:
    """Mark the run failed; a catalog that fails too must not hide the run's own error."""
    text = f"{type(error).__name__}: {' '.join(str(error).split())}".rstrip(": ")
    try:
        cat.fail(key, text)
    except Exception as e:  # reported on the original error instead
        error.add_note(f"(the results catalog could not record the failure: {type(e).__name__}: {e})")


def _answer_all(arm: ArmLike, tasks: Sequence[Task], resolver: GoldResolver, writer: RunWriter, spec: RunSpec,
                key: RunKey, exposure: RunExposure | Future[RunExposure] | None,
                progress: Callable[[int, int], None] | None,
                transport_counters: Callable[[], Mapping[str, Any]] | None, retried: Mapping[str, Any],
                content_check: ContentCheck | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    planned = dict(arm.planned_vintage)
    latencies: dict[str, float] = {}
    computing = exposure if isinstance(exposure, Future) else None
    known: RunExposure | None = None if isinstance(exposure, Future) else exposure
    exposed = {te.task_id: te.exposed for te in known.tasks} if known else {}
    unscored: list[tuple[Task, AnswerLike]] = []  # answered while the exposure is still being computed
    # A stochastic agent's answers take seconds each: one line per answer once it is scored (`answer_lines.py`).
    lines: dict[str, Callable[[str], str]] = {}  # task id -> its line, given the verdict
    log_answers = spec.scenario.agent_id != DETERMINISTIC_AGENT
    run_started, answered = time.perf_counter(), 0

    def score_unscored() -> None:
        while unscored:  # in order; a row whose write fails stays first (and is never written twice)
            task, answer = unscored[0]
            row = score_answer(resolver, task, answer, planned, exposed.get(task.task_id))
            writer.append(row)
            unscored.pop(0)
            line = lines.pop(task.task_id, None)
            if line is not None:
                logging.getLogger(ANSWER_LOGGER).info(line(str(row["verdict"])))

    def exposure_known(wait: bool) -> bool:
        nonlocal computing, known, exposed
        if computing is None:
            return True
        if not (wait or computing.done()):
            return False
        known, computing = computing.result(), None  # its error, if any, is the run's
        exposed = {te.task_id: te.exposed for te in known.tasks}
        return True

    def checked(step: Callable[[], None]) -> None:
        try:
            step()
        except DataIntegrityError:  # no answer of this attempt rests on content shown to be what was recorded
            writer.discard_checkpoint()
            raise

    prepare = getattr(arm, "prepare", None)  # optional (`arms.base.Arm.prepare`): the whole set, even on a resume
    prepare_ms = 0.0
    if callable(prepare) and len(writer.completed) < len(tasks):
        started = time.perf_counter()
        prepare(tasks)
        prepare_ms = (time.perf_counter() - started) * 1000.0
    for i, task in enumerate(tasks):
        if task.task_id not in writer.completed:
            try:
                try:
                    answer = arm.answer(task)
                except UserFacingError as e:  # say which task it happened in (its cause stays in the trace)
                    add_context(e, f"task {task.task_id} ({task.template.template_id})")
                    raise
            except Exception:
                # The arm failed (a store gone, say): the answers it made while the exposure was being computed
                # are checkpointed before its error goes on, so a resume does not ask them again. A failure to
                # compute the exposure or to write them leaves them unrecorded (the arm's error is reported).
                with contextlib.suppress(Exception):
                    exposure_known(wait=True)
                    score_unscored()
                raise
            unscored.append((task, answer))
            latencies[task.task_id] = float(answer.timings_ms.get("total", 0.0))
            if log_answers:
                answered += 1
                seconds = latencies[task.task_id] / 1000.0 if "total" in answer.timings_ms else None
                lines[task.task_id] = functools.partial(answer_line, i + 1, len(tasks), seconds=seconds,
                                                        elapsed=time.perf_counter() - run_started, answered=answered)
            if content_check is not None:
                checked(content_check.poll)
            if exposure_known(wait=False):
                score_unscored()
        if progress is not None:
            progress(i + 1, len(tasks))
    exposure_known(wait=True)
    score_unscored()
    if content_check is not None:
        checked(content_check.finish)
    rows = [writer.completed[t.task_id] for t in tasks]
    summary = {**summarize(rows, spec, key, planned, known), **retried}
    timings = {
        "latency_ms_per_task": latencies,
        # the preparation's share included: a corpus arm's mean still counts the questions' embedding
        "mean_latency_ms": (sum(latencies.values()) + prepare_ms) / len(latencies) if latencies else None,
        "prepare_ms": round(prepare_ms, 1),
        "saas": dict(transport_counters()) if transport_counters else {},
        "resumed_tasks": len(tasks) - len(latencies),
        "seconds_per_task": seconds_summary(latencies),  # median, p90 (issue 33): wall time stays in the sidecar
    }
    writer.finish([t.task_id for t in tasks], summary, timings)
    return summary, timings


def summarize(rows: Sequence[Mapping[str, Any]], spec: RunSpec, key: RunKey, planned: Mapping[str, Day],
              exposure: RunExposure | None) -> dict[str, Any]:
    """Counts per verdict, accuracy, stale answers (freshness + mixed vintage), exposure, cost, route mix."""
    counts = Counter(r["verdict"] for r in rows)
    n = len(rows)
    # Routes to data: the hierarchical coordinator's entries read nothing and are not one
    routes = Counter(route for r in rows for route in r["routes"] if route != COORDINATOR)
    by_tier: dict[str, Counter[str]] = {}
    for r in rows:
        by_tier.setdefault(str(r["task_tier"]), Counter())[r["verdict"]] += 1
    return {
        "scenario_key": spec.scenario_key, "experiment_hash": key.experiment_hash, "code_version": key.code_version,
        "identity_version": IDENTITY_VERSION, "experiment": spec.experiment(), "tasks": n,
        "verdicts": {v: counts.get(v, 0) for v in VERDICTS},
        "stale_answers": sum(counts.get(v, 0) for v in STALE_VERDICTS),
        "accuracy": round(counts.get("correct", 0) / n, 4) if n else None,
        "exposure": exposure.exposure if exposure else None,
        "degenerate_exposure": exposure.degenerate_exposure if exposure else None,
        "prediction": round(exposure.prediction, 2) if exposure else None,
        "prediction_interval_90": list(exposure.interval()) if exposure else None,
        "prediction_history_days": exposure.history_days if exposure else None,
        "mean_cost_units": round(statistics.fmean(r["cost_units"] for r in rows), 3) if n else None,
        "route_mix": dict(sorted(routes.items())),
        "planned_vintage": _day_json(planned),
        "verdicts_by_task_tier": {k: dict(v) for k, v in sorted(by_tier.items())},
        **({"llm_usage": token_totals(rows)} if any("usage" in r for r in rows) else {}),
        "efficiency": efficiency_summary(rows),
        "staleness_awareness": staleness_awareness(rows, spec.scenario.t),
        **({"repeat": key.repeat} if key.repeat else {}),
    }


def token_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A model-backed agent's tokens over a run, and its cost (None when any answer's model is unpriced)."""
    usages = [r["usage"] for r in rows if r.get("usage")]
    costs = [u.get("cost_usd") for u in usages]
    return {
        "model_calls": sum(u["calls"] for u in usages), "tool_calls": sum(u.get("tool_calls", 0) for u in usages),
        "input_tokens": sum(u["input_tokens"] for u in usages),
        "output_tokens": sum(u["output_tokens"] for u in usages),
        "cost_usd": round(sum(costs), 6) if costs and all(c is not None for c in costs) else None,
    }
