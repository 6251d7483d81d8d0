"""Repeats of one experiment (issue 33, item 3): the same scenario answered K times, and what the K answers say.

    result = evaluate_repeats(arm_for, tasks, resolver, store, spec, repeats=3, deterministic=False, ...)
    result.experiment["pass_hat_k"]["3"], result.experiment["accuracy_interval_90"]

Repeat r is one ordinary run (`runner.evaluate` with `RunSpec.repeated(r)`): its own results folder
(`results.RunKey.folder_name`: repeat 0 is the plain folder, repeat r `...__rep<r>`), checkpoint, lock and catalog
row, reused on its own; asking for K = 5 after K = 3 answers only repeats 3 and 4. `arm_for(r)` makes the arm
of repeat r, a fresh one each time (nothing an arm caches carries over from one repeat to the next), with the
agent of that repeat: a stochastic agent samples with the repeat's own seed (`arms/agents/llm.py`,
`LlmSettings.sampling`), the deterministic agent has none.

The deterministic agent's repeats are a check: it must answer every task the same way in every repeat, so
`evaluate_repeats` refuses (`RepeatMismatch`, naming the tasks) an experiment whose repeats differ, also when
every repeat was reused from earlier runs.

`experiment_summary` (pure) turns the K repeats' rows into the experiment's figures: per repeat its accuracy
and stale answers; the mean accuracy with a 90% bootstrap interval clustered by template; pass^k and pass@k
for k = 1..K (`stats.py`; pass^K: the share of tasks every repeat got right, as tau-bench defines it); answer
stability (the share of tasks whose K answers are the same value); per task its K verdicts and counted figures;
efficiency and staleness awareness over every answer of every repeat. It is computed from the repeats' results
folders whenever it is needed (never stored as a file of its own: the folders are its one source) and recorded
in the catalog (`catalog.RunCatalog.record_experiment`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.awareness import staleness_awareness
from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.efficiency import answer_efficiency, efficiency_summary
from churn_assets.evaluation.exposure import RunExposure
from churn_assets.evaluation.results import REPEAT_SUFFIX, ResultsStore, RunKey, canonical, parse_folder_name
from churn_assets.evaluation.runner import ArmLike, ContentCheck, RunSpec, evaluate
from churn_assets.evaluation.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    INTERVAL_LEVEL,
    cluster_bootstrap_interval,
    pass_at_k,
    pass_hat_k,
    spread,
)
from churn_assets.evaluation.verdicts import CORRECT, STALE_VERDICTS, VERDICTS
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task

MAX_REPEATS = 100
INTERVAL_METHOD = (f"percentile bootstrap of the mean per-task accuracy, templates resampled with replacement "
                   f"({BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED})")


class RepeatMismatch(UserFacingError):
    """The deterministic agent answered a task differently in two repeats of one experiment."""


def check_repeats(repeats: int) -> int:
    """`repeats` as a count of repeats (1..MAX_REPEATS), or a `UserFacingError` saying what is accepted."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise UserFacingError(f"repeats must be a whole number from 1 to {MAX_REPEATS}, got {repeats!r}")
    return repeats


# ---------------------------------------------------------------------------------------------------
# pure: what K repeats say
# ---------------------------------------------------------------------------------------------------


def answer_of(row: Mapping[str, Any]) -> str:
    """A row's answer as compared across repeats: its typed value (canonical JSON; null: no value)."""
    return canonical(row.get("answer"))


def repeat_disagreements(rows_by_repeat: Sequence[Sequence[Mapping[str, Any]]]) -> list[str]:
    """One line per task whose answer (value, or text when no value) differs between repeat 0 and a later
    repeat; rows in task order, the same tasks in every repeat."""
    first = rows_by_repeat[0]
    out = []
    for i, row in enumerate(first):
        seen = {0: (answer_of(row), row.get("answer_text"))}
        for r, rows in enumerate(rows_by_repeat[1:], 1):
            other = rows[i]
            if other.get("task_id") != row.get("task_id"):
                raise ValueError(f"repeat {r} has task {other.get('task_id')} where repeat 0 has {row.get('task_id')}")
            seen[r] = (answer_of(other), other.get("answer_text"))
        if len(set(seen.values())) > 1:
            shown = ", ".join(f"repeat {r}: {v} ({t!r})" for r, (v, t) in seen.items())
            out.append(f"task {row.get('task_id')}: {shown}")
    return out


def experiment_summary(rows_by_repeat: Sequence[Sequence[Mapping[str, Any]]],
                       seconds_by_repeat: Sequence[Mapping[str, float]] | None = None, *,
                       t: str, identity: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The figures of K repeats of one experiment (module doc). `rows_by_repeat[r]`: repeat r's result rows in
    task order (every repeat answers the same tasks); `seconds_by_repeat[r]`: task id -> milliseconds of
    repeat r's answers that have a timing (`timings.json`); `t`: the evaluation day; `identity`: fields put
    first (experiment hash, code version, scenario key, ...)."""
    k = len(rows_by_repeat)
    if k == 0:
        raise ValueError("an experiment summary of no repeats")
    order = [str(r["task_id"]) for r in rows_by_repeat[0]]
    for r, rows in enumerate(rows_by_repeat):
        if [str(x["task_id"]) for x in rows] != order:
            raise ValueError(f"repeat {r} does not answer the tasks of repeat 0 in their order")
    n = len(order)
    templates = {str(row["task_id"]): str(row.get("template")) for row in rows_by_repeat[0]}
    verdicts = {tid: [str(rows[i]["verdict"]) for rows in rows_by_repeat] for i, tid in enumerate(order)}
    correct = {tid: sum(v == CORRECT for v in vs) for tid, vs in verdicts.items()}
    agree = {tid: len({answer_of(rows[i]) for rows in rows_by_repeat}) == 1 for i, tid in enumerate(order)}
    accuracy = [round(sum(row["verdict"] == CORRECT for row in rows) / n, 4) if n else None
                for rows in rows_by_repeat]
    stale = [sum(row["verdict"] in STALE_VERDICTS for row in rows) for rows in rows_by_repeat]
    per_task_mean = {tid: correct[tid] / k for tid in order}
    interval = cluster_bootstrap_interval(per_task_mean, templates) if n else None
    all_rows = [row for rows in rows_by_repeat for row in rows]
    seconds = seconds_by_repeat or [{} for _ in rows_by_repeat]
    per_task: dict[str, dict[str, Any]] = {}
    for i, tid in enumerate(order):
        counted = [answer_efficiency(rows[i]) for rows in rows_by_repeat]
        per_task[tid] = {"template": templates[tid], "verdicts": verdicts[tid], "answers_agree": agree[tid],
                         **{name: [c[name] for c in counted] for name in ("tool_calls", "model_calls",
                                                                         "input_tokens", "output_tokens")},
                         "seconds": [_seconds(s.get(tid)) for s in seconds]}
    timed = [float(ms) / 1000.0 for s in seconds for ms in s.values()]
    totals = Counter(row["verdict"] for row in all_rows)
    return {
        **dict(identity or {}),
        "repeats": k, "tasks": n,
        "accuracy_per_repeat": accuracy,
        "accuracy_mean": round(statistics.fmean(per_task_mean.values()), 4) if n else None,
        "accuracy_interval_90": [round(interval[0], 4), round(interval[1], 4)] if interval else None,
        "interval": {"level": INTERVAL_LEVEL, "method": INTERVAL_METHOD,
                     "templates": len(set(templates.values()))},
        "pass_hat_k": {str(j): _mean_over([pass_hat_k(correct[tid], k, j) for tid in order]) for j in range(1, k + 1)},
        "pass_at_k": {str(j): _mean_over([pass_at_k(correct[tid], k, j) for tid in order]) for j in range(1, k + 1)},
        "stability": round(sum(agree.values()) / n, 4) if n else None,
        "stable_tasks": sum(agree.values()),
        "stale_answers_per_repeat": stale,
        "stale_answers_mean": round(statistics.fmean(stale), 3),
        "verdict_totals": {v: totals.get(v, 0) for v in VERDICTS},
        "efficiency": {**efficiency_summary(all_rows), "seconds": spread(timed)},
        "staleness_awareness": staleness_awareness(all_rows, t),
        "grounding": grounding_summary(all_rows),
        "per_task": per_task,
    }


def grounding_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Over every answer: measure calls, answers judged (`grounded` not null), grounded in what the agent read,
    and copied from the answer format's example (docs/llm.md, "Measures"); rows written before these fields
    count as not judged."""
    return {"measure_calls": sum(int(r.get("measure_calls") or 0) for r in rows),
            "answers_with_a_measure_call": sum(1 for r in rows if r.get("measure_calls")),
            "judged": sum(1 for r in rows if r.get("grounded") is not None),
            "grounded": sum(1 for r in rows if r.get("grounded") is True),
            "copied_example": sum(1 for r in rows if r.get("copied_example") is True)}


def compact(experiment: Mapping[str, Any]) -> dict[str, Any]:
    """An experiment summary without its per-task part (what metadata and sweep records keep; the per-task
    verdicts stay readable from the repeats' folders)."""
    return {k: v for k, v in experiment.items() if k != "per_task"}


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else round(float(ms) / 1000.0, 3)


def _mean_over(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


# ---------------------------------------------------------------------------------------------------
# running them
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepeatsResult:
    summaries: list[dict[str, Any]]  # each repeat's summary.json, repeat 0 first
    keys: list[RunKey]  # each repeat's folder (its newest complete retry)
    experiment: dict[str, Any]  # `experiment_summary` of the K repeats


def finished_repeats(store: ResultsStore, spec: RunSpec, repeats: int, *,
                     code: str | None = None) -> list[RunKey] | None:
    """The folders of the experiment's first `repeats` repeats when every one is complete, else None."""
    keys = [store.latest_complete(spec.repeated(r).key(code)) for r in range(repeats)]
    return None if any(k is None for k in keys) else [k for k in keys if k is not None]


def read_repeats(store: ResultsStore, keys: Sequence[RunKey], t: str,
                 deterministic: bool) -> dict[str, Any]:
    """The experiment summary of complete repeat folders; for the deterministic agent, refused when two repeats
    answered a task differently."""
    rows = [store.read_tasks(k) for k in keys]
    if deterministic and len(rows) > 1:
        differ = repeat_disagreements(rows)
        if differ:
            raise RepeatMismatch(
                f"the deterministic agent answered {len(differ)} task(s) differently in the {len(rows)} repeats of "
                f"experiment {keys[0].experiment_hash} ({keys[0].scenario_key}), which must all be the same: "
                + "; ".join(differ[:5]) + ("; ..." if len(differ) > 5 else ""))
    seconds = [dict(store.read_timings(k).get("latency_ms_per_task") or {}) for k in keys]
    first = keys[0]
    identity = {"experiment_hash": first.experiment_hash, "code_version": first.code_version,
                "scenario_key": first.scenario_key, "folders": [k.folder_name for k in keys]}
    return experiment_summary(rows, seconds, t=t, identity=identity)


def experiment_keys(folder: Path, limit: int | None = None) -> list[RunKey]:
    """The complete repeats of the experiment a results folder belongs to (the folder of any repeat or retry
    of it: `<results root>/<world>/<scenario key>/<hash>__<code>[__rep<r>][__retry<n>]`), repeat 0 first, each
    its newest complete retry, up to the first repeat that is missing or incomplete (at most `limit`)."""
    folder = Path(folder)
    base, _repeat, _retry = parse_folder_name(folder.name)
    experiment_hash, sep, code = base.partition("__")
    if not sep:
        raise UserFacingError(f"{folder} is not a results folder (its name is not <experiment hash>__<code version>)")
    store = ResultsStore(folder.parent.parent.parent)
    first = RunKey(folder.parent.parent.name, folder.parent.name, experiment_hash, code)
    found = {0} | {parse_folder_name(p.name)[1] for p in folder.parent.glob(f"{base}{REPEAT_SUFFIX}*")
                   if parse_folder_name(p.name)[0] == base}
    keys = []
    for r in range(max(found) + 1):
        key = store.latest_complete(first.repeated(r))
        if key is None or (limit is not None and r >= limit):
            break
        keys.append(key)
    if not keys:
        raise UserFacingError(f"{folder}: the experiment's first repeat is not complete")
    return keys


def verdict_matrix(folder: Path, limit: int | None = None) -> tuple[dict[str, list[str]], dict[str, str], int]:
    """(task -> the verdict of each repeat, task -> template, repeats) of the experiment of a results folder."""
    keys = experiment_keys(folder, limit)
    store = ResultsStore(Path(folder).parent.parent.parent)
    rows = [store.read_tasks(k) for k in keys]
    order = [str(r["task_id"]) for r in rows[0]]
    for k, rs in zip(keys, rows, strict=True):
        if [str(r["task_id"]) for r in rs] != order:
            raise UserFacingError(f"{store.run_dir(k)} does not hold the tasks of repeat 0 in their order")
    matrix = {t: [str(rs[i]["verdict"]) for rs in rows] for i, t in enumerate(order)}
    return matrix, {str(r["task_id"]): str(r.get("template")) for r in rows[0]}, len(keys)


def _counted_from_now(counters: Callable[[], Mapping[str, Any]] | None
                      ) -> Callable[[], Mapping[str, Any]] | None:
    """The counters of one repeat: what they counted since now (the repeats share one SaaS client)."""
    if counters is None:
        return None
    before = dict(counters())

    def since() -> dict[str, Any]:
        return {k: round(v - before.get(k, 0), 3) if isinstance(v, int | float) else v for k, v in counters().items()}
    return since


def evaluate_repeats(arm_for: Callable[[int], ArmLike], tasks: Sequence[Task], resolver: GoldResolver,
                     store: ResultsStore, spec: RunSpec, repeats: int, *, deterministic: bool,
                     exposure: RunExposure | Future[RunExposure] | None = None, code: str | None = None,
                     progress: Callable[[int, int, int], None] | None = None,
                     transport_counters: Callable[[], Mapping[str, Any]] | None = None,
                     catalog: RunCatalog | str | None = None, on_wait: Callable[[], None] | None = None,
                     retry_transport: bool = False, dagster_run_id: str | None = None,
                     content_check: ContentCheck | None = None) -> RepeatsResult:
    """Answer (or reuse) repeats 0..K-1 of `spec`'s experiment, each through `runner.evaluate` with the arm
    `arm_for(r)`, then summarize them (module doc). `progress(repeat, done, total)`. The deterministic agent's
    repeats must agree (`RepeatMismatch`). The catalog records each repeat's row as `evaluate` does, and the
    experiment's summary once every repeat is complete."""
    check_repeats(repeats)
    cat = RunCatalog(catalog) if isinstance(catalog, str) else catalog
    summaries = []
    for r in range(repeats):
        rep = (lambda done, total, r=r: progress(r, done, total)) if progress is not None else None
        summaries.append(evaluate(arm_for(r), tasks, resolver, store, spec.repeated(r), exposure=exposure, code=code,
                                  progress=rep, transport_counters=_counted_from_now(transport_counters),
                                  catalog=cat, on_wait=on_wait, retry_transport=retry_transport,
                                  dagster_run_id=dagster_run_id, content_check=content_check))
    keys = [spec.repeated(r).key(s["code_version"]).retried(int(s.get("retry", 0))) for r, s in enumerate(summaries)]
    experiment = read_repeats(store, keys, spec.scenario.t.isoformat(), deterministic)
    if cat is not None:
        cat.record_experiment(spec.scenario, keys[0], experiment)
    return RepeatsResult(summaries, keys, experiment)
