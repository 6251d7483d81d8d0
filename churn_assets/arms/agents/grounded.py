"""Whether a model's answer is grounded in what it read (`AgentAnswer.grounded`), and whether it copied the answer
format's example (`copied_example`). Neither changes a verdict: they tell a wrong answer that came from the data
apart from one that did not (an ungrounded answer of a model that read nothing useful, or copied "12").

Grounded: the typed answer equals (by the answer type's own equality, never by substring) a value one of the task's
measure calls returned, or the template's measure computed over the rows the task's reads showed the model
(`ShownRows`: each view's rows as shown, at most the per-call limit; a view it never read is "not served", so the
measure applies its documented fallback or answers unknown). An "unknown" answer is grounded only by the
template's own measure (`grounded`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from functools import cache
from typing import Any

from churn_assets.grounding.measures import MeasureArgumentError, MeasureResult, SemanticModel
from churn_assets.grounding.rows import Request, Row
from churn_assets.tasks.answers import AnswerParseError, AnswerType, Value
from churn_assets.tasks.parser import QuestionParseError, parse_question


class ShownRows:
    """Structured tools that serve only what a task's reads showed the model: per view and window (`window_days`,
    `first`, `last`: usage over 30 days is not usage over 7), the rows shown, in the order shown, without repeats,
    merged over the reads' other filters; None for a view and window it never read."""

    def __init__(self, shown: Sequence[tuple[Request, Sequence[Row] | None]]) -> None:
        self.by_read: dict[tuple[Any, ...], list[Row]] = {}
        self.classes: set[str] = set()  # the classes of the reads that were served
        for request, rows in shown:
            if rows is None:
                continue
            self.classes.add(request.entity_class)
            kept = self.by_read.setdefault(self._key(request), [])
            kept.extend(r for r in rows if r not in kept)

    @staticmethod
    def _key(request: Request) -> tuple[Any, ...]:
        return request.view, request.window_days, request.first, request.last

    def retrieve(self, requests: Sequence[Request], note: str = "") -> list[list[Row] | None]:
        return [self.by_read.get(self._key(r)) for r in requests]


@cache
def _registry_model() -> SemanticModel:
    """The semantic model of the registry file, built once per process (arms without one judge with it)."""
    return SemanticModel()


def grounded(value: Value, answer_type: AnswerType, question: str, today: dt.date, results: Sequence[MeasureResult],
             shown: Sequence[tuple[Request, Sequence[Row] | None]], model: SemanticModel | None) -> bool:
    """Whether `value` (the typed answer; None: "unknown") equals a measure result or the template's measure over
    the rows shown (see the module doc). "unknown" is grounded only by the template's own measure: a call of it
    that answered unknown, or the rows shown when they cover every class it reads (an unrelated measure, or a
    read that missed a class, knowing nothing proves nothing)."""
    try:
        parsed = parse_question(question)
    except QuestionParseError:
        parsed = None
    own = parsed.template.measure if parsed is not None else None
    candidates: list[tuple[Any, bool]] = [(r.value, r.call.name == own) for r in results]  # (value, may be unknown)
    if shown and parsed is not None:
        semantic = model or _registry_model()
        rows = ShownRows(shown)
        try:
            over_rows = semantic.call(parsed.template.measure, parsed.params, today, rows)
        except MeasureArgumentError:  # parameters its measure cannot take: the rows give no candidate
            over_rows = None
        if over_rows is not None:
            covered = set(semantic.declaration(parsed.template.measure).reads) <= rows.classes
            candidates.append((over_rows.value, covered))
    for candidate, may_be_unknown in candidates:
        try:
            typed = answer_type.normalize(candidate)
        except (TypeError, ValueError):  # a measure of another answer type (a list for a number): not this answer
            continue
        if typed is None:
            if value is None and may_be_unknown:
                return True
        elif value is not None and answer_type.equal(value, typed):
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
