"""Whether a model's answer is grounded in what it read (`AgentAnswer.grounded`), and whether it copied the answer
format's example (`copied_example`). Neither changes a verdict: they tell a wrong answer that came from the data
apart from one that did not (an ungrounded answer of a model that read nothing useful, or copied "12").

Grounded: the typed answer equals (by the answer type's own equality, never by substring) a value one of the task's
measure calls returned, or the template's measure computed over the rows the task's reads showed the model
(`ShownRows`: each view's rows as shown, at most the per-call limit; a view it never read is "not served", so the
measure applies its documented fallback or answers unknown).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from churn_assets.grounding.measures import MeasureArgumentError, MeasureResult, SemanticModel
from churn_assets.grounding.rows import Request, Row
from churn_assets.tasks.answers import AnswerParseError, AnswerType, Value
from churn_assets.tasks.parser import QuestionParseError, parse_question


class ShownRows:
    """Structured tools that serve only what a task's reads showed the model: per view, the rows shown (in the
    order shown, without repeats); None for a view it never read."""

    def __init__(self, shown: Sequence[tuple[Request, Sequence[Row] | None]]) -> None:
        self.by_view: dict[str, list[Row]] = {}
        for request, rows in shown:
            if rows is None:
                continue
            kept = self.by_view.setdefault(request.view, [])
            kept.extend(r for r in rows if r not in kept)

    def retrieve(self, requests: Sequence[Request], note: str = "") -> list[list[Row] | None]:
        return [self.by_view.get(r.view) for r in requests]


def grounded(value: Value, answer_type: AnswerType, question: str, today: dt.date, results: Sequence[MeasureResult],
             shown: Sequence[tuple[Request, Sequence[Row] | None]], model: SemanticModel | None) -> bool:
    """Whether `value` (the typed answer; None: "unknown") equals a measure result or the template's measure over
    the rows shown (see the module doc)."""
    candidates: list[Any] = [r.value for r in results]
    if shown:
        try:
            parsed = parse_question(question)
            semantic = model or SemanticModel()
            candidates.append(semantic.call(parsed.template.measure, parsed.params, today, ShownRows(shown)).value)
        except (QuestionParseError, MeasureArgumentError):
            pass
    for candidate in candidates:
        try:
            typed = answer_type.normalize(candidate)
        except (TypeError, ValueError):  # a measure of another answer type (a list for a number): not this answer
            continue
        if (typed is None and value is None) or (typed is not None and value is not None
                                                  and answer_type.equal(value, typed)):
            return True
    return False


def copied_example(value: Value, answer_type: AnswerType, example: str | None) -> bool | None:
    """Whether `value` equals the format's example (None: the format showed no example)."""
    if example is None:
        return None
    try:
        return value is not None and answer_type.equal(value, answer_type.parse(example))
    except AnswerParseError:
        return False
