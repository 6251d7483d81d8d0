"""Verdicts: one per answered task, telling a stale answer apart from a wrong one.

In order of precedence:

- `transport_failure`: no answer came back (a source kept refusing: retries exhausted, 429s, timeouts).
  Never scored as a wrong answer.
- `budget_exhausted`: no answer came back because the agent asked to read past its per-task budget (a model
  agent's `max_tool_calls` reads or `max_tool_rounds` reading turns, whichever came first; the deterministic
  agent has no budget). After a transport failure (a source that failed is not the agent's doing) and before a
  parse failure (there is no answer text to parse).
- `parse_failure`: the agent could not parse the question, or its answer text is not a value of the
  template's answer type.
- `correct`: equal to gold at T (under the answer type's stated rounding).
- `freshness_error`: wrong at T, right against the served vintage, and every class the answer read was
  served as of one single day.
- `mixed_vintage_error`: wrong at T, right against the served vintage, whose classes were served as of
  several days (e.g. assignments as of T-1 joined with prices as of T-5, or a staged table with a live
  read at T).
- `unattributed_error`: wrong at T, and equal to a served gold that carries no information (`None`: the
  served data does not know the entity or has no answer; or the empty value of a window the served data
  cannot reach: a count "in the last 7 days" served from data 29 days old is 0 by construction). Stale data
  and an empty answer give the same value there, so it is not counted as stale (nor as a reasoning error);
  exposure counts such tasks apart in the same way (`evaluation/exposure.py`).
- `reasoning_error`: anything else wrong.

The served vintage is the data time of the tables the answer actually read, per entity class (from its
trace), not the class a question was mapped to: that was the reference's mistake.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from churn_assets.tasks.answers import AnswerParseError, AnswerType, Value
from churn_assets.tasks.gold import GoldResolver, complete_vintage
from churn_assets.tasks.task_set import Task
from churn_assets.tasks.templates import Template
from churn_assets.world.calendar import Day
from churn_assets.world.fold import uniform_vintage

CORRECT = "correct"
FRESHNESS_ERROR = "freshness_error"
MIXED_VINTAGE_ERROR = "mixed_vintage_error"
REASONING_ERROR = "reasoning_error"
UNATTRIBUTED_ERROR = "unattributed_error"
PARSE_FAILURE = "parse_failure"
BUDGET_EXHAUSTED = "budget_exhausted"
TRANSPORT_FAILURE = "transport_failure"
# (the order of reports' columns, not the precedence: `budget_exhausted` came last)
VERDICTS = (CORRECT, FRESHNESS_ERROR, MIXED_VINTAGE_ERROR, UNATTRIBUTED_ERROR, REASONING_ERROR, PARSE_FAILURE,
            TRANSPORT_FAILURE, BUDGET_EXHAUSTED)
STALE_VERDICTS = (FRESHNESS_ERROR, MIXED_VINTAGE_ERROR)  # "stale answers" in every comparison


def verdict(
    answer_type: AnswerType,
    answer: Value,
    gold_at_anchor: Value,
    served_gold: Value,
    served_days: Collection[Day],
    *,
    transport_failed: bool = False,
    budget_exhausted: bool = False,
    parse_failed: bool = False,
    served_degenerate: bool = False,
) -> str:
    """The verdict of one answer; `served_days` are the data times of the classes it read, `served_degenerate`
    whether the served gold carries no information (`served_gold_is_degenerate`)."""
    if transport_failed:
        return TRANSPORT_FAILURE
    if budget_exhausted:
        return BUDGET_EXHAUSTED
    if parse_failed:
        return PARSE_FAILURE
    if answer_type.equal(answer, gold_at_anchor):
        return CORRECT
    if answer_type.equal(answer, served_gold) and not answer_type.equal(served_gold, gold_at_anchor):
        if served_degenerate:
            return UNATTRIBUTED_ERROR
        return FRESHNESS_ERROR if len(set(served_days)) == 1 else MIXED_VINTAGE_ERROR
    return REASONING_ERROR


def served_gold_is_degenerate(template: Template, params: Mapping[str, Any], anchor: Day,
                              vintage: Mapping[str, Day], served_gold: Value) -> bool:
    """Whether a served gold carries no information: `None` (the served data does not know the entity or has
    no answer), or a question counting the events of a window ("in the last N days") whose counted class was
    served as of a day before the window began (its served answer is the empty value by construction). The
    counted class of a window question is its first class (`tasks/templates.py`)."""
    if served_gold is None:
        return True
    if template.changes_in == "window":
        window_start = anchor - dt.timedelta(days=int(params["days"]) - 1)
        return vintage.get(template.classes[0], anchor) < window_start
    return False


@dataclass(frozen=True)
class Outcome:
    """What an arm returned for one task.

    `answer_text` is the agent's answer as written (parsed with the template's answer type) unless
    `answer` holds a typed value already; `read_days` maps each entity class the answer read to the data
    time it was served (T for a live read), from the answer's trace.
    """

    answer_text: str | None = None
    answer: Value = None
    has_value: bool = False  # True when `answer` is set (a typed answer may legitimately be None)
    read_days: Mapping[str, Day] = field(default_factory=dict)
    transport_failed: bool = False
    budget_exhausted: bool = False
    question_parsed: bool = True


@dataclass(frozen=True)
class Scored:
    task_id: str
    verdict: str
    answer: Value
    gold_at_anchor: Value
    served_gold: Value
    served_vintage: dict[str, Day]  # the classes the answer read -> their data time
    served_degenerate: bool = False  # the served gold carries no information (`served_gold_is_degenerate`)

    @property
    def stale(self) -> bool:
        return self.verdict in STALE_VERDICTS


def score(resolver: GoldResolver, task: Task, outcome: Outcome) -> Scored:
    """Score one task's outcome against gold at T and gold under the vintage the answer read."""
    t = task.template
    anchor = dt.date.fromisoformat(task.anchor)
    read = dict(outcome.read_days)
    gold_t = resolver.gold(t, task.params, anchor=anchor, vintage=uniform_vintage(anchor))
    vintage = complete_vintage(read, anchor)
    served = resolver.gold(t, task.params, anchor=anchor, vintage=vintage) if read else gold_t
    degenerate = served_gold_is_degenerate(t, task.params, anchor, vintage, served)
    answer: Value = None
    parse_failed = not outcome.question_parsed
    if outcome.has_value:
        answer = t.answer.normalize(outcome.answer)
    elif not outcome.transport_failed and not outcome.budget_exhausted and not parse_failed:
        try:
            answer = t.answer.parse(outcome.answer_text or "")
        except AnswerParseError:
            parse_failed = True
    v = verdict(t.answer, answer, gold_t, served, read.values(), transport_failed=outcome.transport_failed,
                budget_exhausted=outcome.budget_exhausted, parse_failed=parse_failed, served_degenerate=degenerate)
    return Scored(task.task_id, v, answer, gold_t, served, read, degenerate)
