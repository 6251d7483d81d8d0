"""`verify-results`: recompute gold from the ledger for every task of a run and confirm every verdict.

For each stored row (correct ones too) it recomputes, from the ledger only:

- gold at T (every class at T) and gold under the vintage the answer read (its served vintage, from its
  trace), and gold under the run's planned vintage;
- the verdict, from the stored answer (or the stored answer text, when the arm gave no typed value), the
  stored transport failure, exhausted budget and parse failure and the recomputed gold, with the rule of
  `evaluation.verdicts`;
- whether the task was exposed (gold at T differs from gold under the planned vintage);

and compares each with what the row stores. The rows must be exactly the run's task set (same ids, order,
questions), and the summary's counts must be the counts of the rows. Gold is compared as stored JSON
(exactly: a tampered gold value is a disagreement even when it would round to the same answer).

`verify_rows` is the pure check; `load_run` reads a results folder. `arm_rule_disagreements` checks, with the
deterministic agent, each row against its arm's rule of docs/rules.md "Arm correctness" (`ARM_RULES`: the answer
equals the row's gold at T or at its planned vintage), which every mode of `verify-results` runs.

The independent check (`verify_rows_independent`, `churnbench verify-results --independent`) sets a second
gold against the first: the SQL gold of `evaluation/independent/` over the world's truth schema, which shares
no code with the fold or `tasks/gold.py`. For every row it compares, under the template's answer type, the
stored gold and the Python gold with the SQL gold at T, at the row's served vintage and at its planned vintage;
it derives the vintage an answer read from what its traces *observed* (each read's `observed_day`, which must
agree with its retrieval's `data_times` and with the stored `served_vintage`), and re-derives the verdict and
the exposure from the SQL golds. The plain check proves the results files were not edited (gold recomputed by
the same code); the independent one that the gold itself, the verdicts and the exposure hold under a second
implementation that reads the ledger by another path.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.evaluation.awareness import staleness_awareness
from churn_assets.evaluation.efficiency import efficiency_summary
from churn_assets.evaluation.independent import SqlGoldError
from churn_assets.evaluation.results import SUMMARY_FILE, TASKS_FILE, ResultsError, canonical
from churn_assets.evaluation.verdicts import STALE_VERDICTS, VERDICTS, served_gold_is_degenerate, verdict
from churn_assets.tasks.answers import AnswerParseError, Value
from churn_assets.tasks.gold import GoldError, GoldResolver, complete_vintage
from churn_assets.tasks.task_set import Task
from churn_assets.tasks.templates import Template
from churn_assets.unique_keys import load_json
from churn_assets.world.calendar import Day
from churn_assets.world.fold import uniform_vintage

if TYPE_CHECKING:
    from churn_assets.evaluation.independent import SqlGold


@dataclass(frozen=True)
class Disagreement:
    """One stored figure that is not confirmed; `task_id` None for something of the run as a whole, which `where`
    names (the summary, a results file, the catalog row); `message`, when set, is the whole sentence."""

    task_id: str | None
    field: str
    stored: Any
    recomputed: Any
    where: str = "summary"
    message: str | None = None

    def __str__(self) -> str:
        where = f"task {self.task_id}" if self.task_id is not None else self.where
        if self.message is not None:
            return f"{where}: {self.message}"
        return f"{where}: {self.field} stored {_show(self.stored)}, recomputed {_show(self.recomputed)}"


@dataclass(frozen=True)
class VerifyReport:
    rows: int
    disagreements: tuple[Disagreement, ...]

    @property
    def ok(self) -> bool:
        return not self.disagreements

    @property
    def tasks_disagreeing(self) -> list[str]:
        return sorted({d.task_id for d in self.disagreements if d.task_id is not None})


def _show(value: Any) -> str:
    text = canonical(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _as_stored(value: Any) -> Any:
    """A value as it reads back from the results files (canonical JSON)."""
    return json.loads(canonical(value))


def _vintage(raw: Any, task_id: str, what: str, out: list[Disagreement]) -> dict[str, Day] | None:
    try:
        return {str(c): dt.date.fromisoformat(str(d)) for c, d in dict(raw or {}).items()}
    except (TypeError, ValueError) as e:
        out.append(Disagreement(task_id, what, raw, f"not a map of class -> ISO day ({e})"))
        return None


def _stored_answer(task: Task, row: Mapping[str, Any]) -> tuple[Value, bool]:
    """(answer, parse failed) as the scorer derived them from the arm's outcome."""
    t = task.template
    if row.get("transport_error") is not None or row.get("budget_error") is not None:
        return None, False  # no answer (the verdict says why); checked before parse_error, as `verdict` ranks them
    if row.get("parse_error") is not None:
        return None, True
    if row.get("answer") is not None:
        return t.answer.normalize(row["answer"]), False
    try:  # the arm gave no typed value: its text was parsed
        return t.answer.parse(row.get("answer_text") or ""), False
    except AnswerParseError:
        return None, True


def _traced_vintage(traces: Any) -> dict[str, dt.date] | None:
    """Class -> data time over a row's stored traces, by the rule of `grounding.traces.served_vintage` (one
    data time per class); None when they are missing, malformed or read a class at two data times."""
    if not isinstance(traces, list):
        return None
    out: dict[str, dt.date] = {}
    try:
        for entry in traces:
            for cls, day in (entry.get("data_times") or {}).items():
                if out.setdefault(cls, dt.date.fromisoformat(day)) != dt.date.fromisoformat(day):
                    return None
    except (AttributeError, TypeError, ValueError):
        return None
    return out


def verify_row(resolver: GoldResolver, task: Task, row: Mapping[str, Any]) -> list[Disagreement]:
    """Every disagreement between one stored row and the ledger (empty when the row is confirmed)."""
    out: list[Disagreement] = []
    tid = task.task_id
    t = task.template
    anchor = dt.date.fromisoformat(task.anchor)
    for field, expected in (("template", t.template_id), ("question_text", task.question_text)):
        if row.get(field) != expected:
            out.append(Disagreement(tid, field, row.get(field), expected))
    served = _vintage(row.get("served_vintage"), tid, "served_vintage", out)
    planned = _vintage(row.get("planned_vintage"), tid, "planned_vintage", out)
    if served is None or planned is None:
        return out
    late = {c: d.isoformat() for c, d in served.items() if d > anchor}
    if late:
        out.append(Disagreement(tid, "served_vintage", late, f"no class served after T={anchor}"))
    traced = _traced_vintage(row.get("traces"))
    if traced is None or traced != served:  # the verdict rests on this map: it must be what the reads show
        shown = None if traced is None else {c: d.isoformat() for c, d in sorted(traced.items())}
        out.append(Disagreement(tid, "served_vintage", row.get("served_vintage"),
                                shown or "traces whose data times are readable and agree per class"))

    try:
        gold_t = resolver.gold(t, task.params, anchor=anchor, vintage=uniform_vintage(anchor))
        gold_served = (resolver.gold(t, task.params, anchor=anchor, vintage=complete_vintage(served, anchor))
                       if served else gold_t)
        gold_planned = resolver.gold(t, task.params, anchor=anchor, vintage=planned)  # a whole map, as planned
    except GoldError as e:
        out.append(Disagreement(tid, "served_vintage/planned_vintage", {"served": row.get("served_vintage"),
                                "planned": row.get("planned_vintage")}, f"no gold under it ({e})"))
        return out
    for field, recomputed in (("gold_at_t", gold_t), ("gold_served", gold_served), ("gold_planned", gold_planned)):
        if row.get(field) != _as_stored(recomputed):
            out.append(Disagreement(tid, field, row.get(field), _as_stored(recomputed)))

    try:
        answer, parse_failed = _stored_answer(task, row)
    except (AnswerParseError, TypeError, ValueError) as e:
        out.append(Disagreement(tid, "answer", row.get("answer"), f"not a {t.answer.kind} ({e})"))
        return out
    if not parse_failed and row.get("answer") != _as_stored(answer):
        out.append(Disagreement(tid, "answer", row.get("answer"), _as_stored(answer)))
    degenerate = served_gold_is_degenerate(t, task.params, anchor, complete_vintage(served, anchor), gold_served)
    expected = verdict(t.answer, answer, gold_t, gold_served, served.values(),
                       transport_failed=row.get("transport_error") is not None,
                       budget_exhausted=row.get("budget_error") is not None, parse_failed=parse_failed,
                       served_degenerate=degenerate)
    if row.get("verdict") != expected:
        out.append(Disagreement(tid, "verdict", row.get("verdict"), expected))
    if row.get("exposed") is not None:
        exposed = not t.answer.equal(gold_t, gold_planned) and not served_gold_is_degenerate(
            t, task.params, anchor, planned, gold_planned)
        if row["exposed"] != exposed:
            out.append(Disagreement(tid, "exposed", row["exposed"], exposed))
    return out


def verify_rows(resolver: GoldResolver, tasks: Sequence[Task], rows: Sequence[Mapping[str, Any]],
                summary: Mapping[str, Any] | None = None) -> VerifyReport:
    """Check every row of a run against the ledger (through `resolver`) and its task set, and the summary's
    counts against the rows."""
    out: list[Disagreement] = []
    by_id = {t.task_id: t for t in tasks}
    ids = [str(r.get("task_id")) for r in rows]
    for tid in ids:
        if tid not in by_id:
            out.append(Disagreement(tid, "task_id", tid, "not in the run's task set"))
    for tid in [t.task_id for t in tasks if t.task_id not in set(ids)]:
        out.append(Disagreement(tid, "task_id", None, "a task of the task set with no row"))
    for tid, n in Counter(ids).items():
        if n > 1:
            out.append(Disagreement(tid, "task_id", f"{n} rows", "one row"))
    for row in rows:
        task = by_id.get(str(row.get("task_id")))
        if task is not None:
            out.extend(verify_row(resolver, task, row))
    if summary is not None:
        out.extend(_verify_summary(summary, rows))
    return VerifyReport(len(rows), tuple(out))


def _verify_summary(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[Disagreement]:
    out = []
    counts = Counter(r.get("verdict") for r in rows)
    n = len(rows)
    expected: dict[str, Any] = {
        "tasks": n,
        **{f"verdicts.{v}": counts.get(v, 0) for v in VERDICTS},
        "stale_answers": sum(counts.get(v, 0) for v in STALE_VERDICTS),
        "accuracy": round(counts.get("correct", 0) / n, 4) if n else None,
    }
    if summary.get("exposure") is not None and all(r.get("exposed") is not None for r in rows):
        expected["exposure"] = sum(1 for r in rows if r.get("exposed"))
    verdicts = summary.get("verdicts") or {}
    for field, value in expected.items():
        # A verdict a run's code did not have yet (`unattributed_error`) reads as none of it.
        stored = verdicts.get(field.split(".", 1)[1], 0) if field.startswith("verdicts.") else summary.get(field)
        if stored != value:
            out.append(Disagreement(None, field, stored, value))
    # The figures of issue 33, recomputed from the rows when the summary has them (older summaries do not).
    if "efficiency" in summary:
        expected_efficiency = json.loads(canonical(efficiency_summary(rows)))
        if summary["efficiency"] != expected_efficiency:
            out.append(Disagreement(None, "efficiency", summary["efficiency"], expected_efficiency))
    t = (summary.get("experiment") or {}).get("t")
    if "staleness_awareness" in summary and t:
        expected_awareness = staleness_awareness(rows, str(t))
        if summary["staleness_awareness"] != expected_awareness:
            out.append(Disagreement(None, "staleness_awareness", summary["staleness_awareness"], expected_awareness))
    planned = summary.get("planned_vintage")
    for r in rows:
        if planned is not None and r.get("planned_vintage") != planned:
            out.append(Disagreement(str(r.get("task_id")), "planned_vintage", r.get("planned_vintage"), planned))
    return out


# ---------------------------------------------------------------------------------------------------
# the arms' per-row rules with the deterministic agent (docs/rules.md, "Arm correctness")
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArmRule:
    """What every judged answer of an arm equals with the deterministic agent: a stored gold of its row."""

    arm: str
    gold_field: str  # "gold_at_t" or "gold_planned" (the gold under the vintage the arm was planned to serve)
    text: str  # the rule as docs/rules.md states it, named when a row breaks it
    tiers: frozenset[int] | None = None  # only tasks of these tiers are judged (None: every task)


# Arm names and the agent id as literals: importing `arms.registry` (or `freshness.scenario`) here would add 0.3-0.5 s
# to every verification (tests/test_verify_arm_rules.py checks them against the registry and the scenario).
DETERMINISTIC_AGENT = "det"
# The other arms have no per-row rule: retrieval arms legitimately miss aggregates over more records than they
# retrieve, `grounding_no_semantic_model` legitimately differs on computed measures.
ARM_RULES = {rule.arm: rule for rule in (
    ArmRule("naive", "gold_at_t", "naive answers every task equal to gold at T"),
    ArmRule("grounding", "gold_planned", "grounding answers every task equal to gold at its planned vintage"),
    ArmRule("grounding_no_freshness_tiers", "gold_planned",
            "grounding_no_freshness_tiers answers every task equal to gold at its planned vintage"),
    ArmRule("hierarchical", "gold_planned",
            "hierarchical answers every single-source (tier 1) task equal to gold at its planned vintage",
            tiers=frozenset({1})),
)}


def arm_rule(experiment: Mapping[str, Any]) -> ArmRule | None:
    """The per-row rule a run's arm and agent must keep (None: no such rule, e.g. a model agent's answers)."""
    if experiment.get("agent_id") != DETERMINISTIC_AGENT:
        return None
    return ARM_RULES.get(str(experiment.get("arm")))


def arm_rule_disagreements(rule: ArmRule, tasks: Sequence[Task], rows: Sequence[Mapping[str, Any]]
                           ) -> list[Disagreement]:
    """Every row that breaks the arm's rule, named with its template, the rule and both values.

    The answer is compared with the row's stored gold under the template's answer type (`_same`); the plain check
    recomputes that gold from the ledger, so together they compare the answer with the ledger. Not judged: rows of
    a task outside the task set (reported by the plain check) and rows whose store call failed (`transport_error`:
    the answer is none of the arm's). A budget or parse failure is judged: the deterministic agent has no read
    budget and parses every generated question, so either is a breach (or a forged row)."""
    by_id = {t.task_id: t for t in tasks}
    out = []
    for row in rows:
        task = by_id.get(str(row.get("task_id")))
        if task is None or row.get("transport_error") is not None:
            continue
        if rule.tiers is not None and task.template.task_tier not in rule.tiers:
            continue
        broken = _breaks(rule, task, row)
        if broken is not None:
            out.append(Disagreement(task.task_id, "answer", row.get("answer"), row.get(rule.gold_field),
                                    message=broken))
    return out


def _breaks(rule: ArmRule, task: Task, row: Mapping[str, Any]) -> str | None:
    """Why one row breaks the rule (None: it keeps it)."""
    gold = row.get(rule.gold_field)
    shown = _unequal_answer(task, row, gold)
    if shown is None:
        return None
    return (f"template {task.template.template_id}: breaks docs/rules.md \"Arm correctness\" ({rule.text}): "
            f"answer {shown}, {rule.gold_field} {_show(gold)}")


def _unequal_answer(task: Task, row: Mapping[str, Any], gold: Any) -> str | None:
    """None when the row's answer, as the scorer read it, equals `gold`; otherwise the answer as a message shows it."""
    if row.get("budget_error") is not None:
        return "none (budget exhausted)"
    try:
        answer, parse_failed = _stored_answer(task, row)
    except (AnswerParseError, TypeError, ValueError):  # not of the template's type (the plain check names it too)
        return f"{_show(row.get('answer'))} (not a {task.template.answer.kind})"
    if parse_failed:
        return "none (parse failure)"
    return None if _same(task.template, answer, gold) else _show(answer)


# ---------------------------------------------------------------------------------------------------
# the independent check: SQL gold over the truth schema, verdicts from the observed data times
# ---------------------------------------------------------------------------------------------------


def observed_vintage(traces: Any) -> tuple[dict[str, dt.date], list[str]]:
    """Class -> the data time the row's reads observed, and what contradicts it (empty when nothing does).

    Each read names its entity class and the day found in the data it read (`observed_day`); a retrieval's
    `data_times` must be exactly its reads' days per class, and a class must be observed at one day over the
    whole answer. A retrieval without reads (the coordinator's, or a trace written before reads were recorded)
    contributes its `data_times`."""
    if not isinstance(traces, list):
        return {}, [f"traces are not a list ({type(traces).__name__})"]
    out: dict[str, dt.date] = {}
    problems: list[str] = []
    for n, entry in enumerate(traces):
        try:
            stated = {str(c): dt.date.fromisoformat(d) for c, d in (entry.get("data_times") or {}).items()}
            reads = entry.get("reads") or []
            seen: dict[str, dt.date] = {}
            for read in reads:
                cls = read.get("entity_class")
                if cls is None:
                    continue  # a store outside the registry (no class, no data time)
                day = dt.date.fromisoformat(read["observed_day"])
                if seen.setdefault(cls, day) != day:
                    problems.append(f"retrieval {n} observed {cls} at {seen[cls]} and {day}")
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            problems.append(f"retrieval {n} is not readable ({e.__class__.__name__}: {e})")
            continue
        if reads and seen != stated:
            problems.append(f"retrieval {n} states data times {_days(stated)}, its reads observed {_days(seen)}")
        for cls, day in (seen if reads else stated).items():
            if out.setdefault(cls, day) != day:
                problems.append(f"{cls} observed at {out[cls]} and at {day}")
    return out, problems


def _days(vintage: Mapping[str, dt.date]) -> dict[str, str]:
    return {c: d.isoformat() for c, d in sorted(vintage.items())}


def _same(t: Template, a: Any, b: Any) -> bool:
    """Equal under the template's answer type; a stored value that is not of the type is not equal."""
    try:
        return t.answer.equal(a, b)
    except (AnswerParseError, TypeError, ValueError):
        return False


def _gold_pair(python: GoldResolver, sql: SqlGold, t: Template, task: Task, anchor: dt.date,
               vintage: Mapping[str, dt.date]) -> tuple[Value, Value]:
    return (python.gold(t, task.params, anchor=anchor, vintage=complete_vintage(vintage, anchor)),
            sql.gold(t, task.params, anchor=anchor, vintage=vintage))


def verify_row_independent(python: GoldResolver, sql: SqlGold, task: Task, row: Mapping[str, Any]
                           ) -> list[Disagreement]:
    """Every disagreement between one row, the Python gold and the SQL gold (compared by answer type)."""
    out: list[Disagreement] = []
    tid, t = task.task_id, task.template
    anchor = dt.date.fromisoformat(task.anchor)
    observed, problems = observed_vintage(row.get("traces"))
    out += [Disagreement(tid, "traces", None, p) for p in problems]
    served = _vintage(row.get("served_vintage"), tid, "served_vintage", out)
    planned = _vintage(row.get("planned_vintage"), tid, "planned_vintage", out)
    if served is None or planned is None:
        return out
    if observed != served:
        out.append(Disagreement(tid, "served_vintage (observed in the traces)", row.get("served_vintage"),
                                _days(observed)))
    try:
        golds = {
            "gold_at_t": _gold_pair(python, sql, t, task, anchor, {}),
            "gold_served": _gold_pair(python, sql, t, task, anchor, served),
            "gold_planned": _gold_pair(python, sql, t, task, anchor, planned),
        }
        sql_observed = sql.gold(t, task.params, anchor=anchor, vintage=observed)
    except (GoldError, SqlGoldError) as e:
        out.append(Disagreement(tid, "served_vintage/planned_vintage", {"served": row.get("served_vintage"),
                                "planned": row.get("planned_vintage")}, f"no gold under it ({e})"))
        return out
    for field, (py, sq) in golds.items():
        if not _same(t, row.get(field), sq):
            out.append(Disagreement(tid, f"{field} (stored vs sql gold)", row.get(field), _as_stored(sq)))
        if not t.answer.equal(py, sq):
            out.append(Disagreement(tid, f"{field} (python gold vs sql gold)", _as_stored(py), _as_stored(sq)))
    try:
        answer, parse_failed = _stored_answer(task, row)
    except (AnswerParseError, TypeError, ValueError) as e:
        out.append(Disagreement(tid, "answer", row.get("answer"), f"not a {t.answer.kind} ({e})"))
        return out
    sql_t = golds["gold_at_t"][1]
    observed_degenerate = served_gold_is_degenerate(t, task.params, anchor, complete_vintage(observed, anchor),
                                                    sql_observed)
    expected = verdict(t.answer, answer, sql_t, sql_observed, observed.values(),
                       transport_failed=row.get("transport_error") is not None,
                       budget_exhausted=row.get("budget_error") is not None, parse_failed=parse_failed,
                       served_degenerate=observed_degenerate)
    if row.get("verdict") != expected:
        out.append(Disagreement(tid, "verdict (from the observed data times and the sql golds)", row.get("verdict"),
                                expected))
    if row.get("exposed") is not None:
        sql_planned = golds["gold_planned"][1]
        exposed = not t.answer.equal(sql_t, sql_planned) and not served_gold_is_degenerate(
            t, task.params, anchor, planned, sql_planned)
        if row["exposed"] != exposed:
            out.append(Disagreement(tid, "exposed (sql golds)", row["exposed"], exposed))
    return out


def verify_rows_independent(python: GoldResolver, sql: SqlGold, tasks: Sequence[Task],
                            rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any] | None = None
                            ) -> VerifyReport:
    """The plain check of every row (`verify_rows`) and, for every row of a task of the set, the independent
    one (`verify_row_independent`)."""
    plain = verify_rows(python, tasks, rows, summary)
    by_id = {t.task_id: t for t in tasks}
    out = list(plain.disagreements)
    for row in rows:
        task = by_id.get(str(row.get("task_id")))
        if task is not None:
            out.extend(verify_row_independent(python, sql, task, row))
    return VerifyReport(len(rows), tuple(out))


@dataclass(frozen=True)
class StoredRun:
    run_dir: Path
    summary: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def experiment(self) -> dict[str, Any]:
        return dict(self.summary.get("experiment") or {})


def load_run(run_dir: Path) -> StoredRun:
    """The summary and per-task rows of a completed results folder."""
    run_dir = Path(run_dir)
    summary_file, tasks_file = run_dir / SUMMARY_FILE, run_dir / TASKS_FILE
    if not summary_file.exists() or not tasks_file.exists():
        raise ResultsError(f"{run_dir} is not a completed results folder (no {SUMMARY_FILE} or {TASKS_FILE})")
    rows = []
    for n, line in enumerate(tasks_file.read_text(encoding="utf-8").splitlines(), 1):
        if not line:
            continue
        try:
            rows.append(load_json(line, f"{tasks_file}, line {n}"))
        except json.JSONDecodeError as e:
            raise ResultsError(f"{tasks_file}, line {n}: not JSON ({e.msg})") from None
    return StoredRun(run_dir, load_json(summary_file.read_text(encoding="utf-8"), str(summary_file)), rows)
