"""The deterministic agent: reads the question text, calls its template's measure through the arm's tools, and
formats the value. No model, no gold, no fold.

It parses the question with `tasks.parser` (question text -> template and parameters) and calls the registry
measure the template names (`Template.measure`) with the parameters as arguments: a perfect chooser of the
semantic model's calls. The measures (`grounding/measures/`) are a second, independent implementation of each
template's semantics, written over served rows rather than over a folded state (docs/measures.md).

Arms whose tools cannot serve a class (the `grounding_no_semantic_model` ablation maps question keywords
to classes and serves only those) return None for that request; the measure then applies the documented
fallback (docs/arms.md, "The deterministic agent": e.g. without `prices` a license is priced at its purchase
price), so the answer differs exactly where a measure's definition needs a class the question's words do not name.

Arms that only retrieve fact records (`grounding_no_source_routing`, the classic-RAG arms) get their
answer from `arms.extraction` instead: the fixed extraction rule over the records retrieved.
"""

from __future__ import annotations

from churn_assets.arms.agents.interface import AgentAnswer, AgentError, RecordSearch
from churn_assets.arms.extraction import K, extract, search_kinds
from churn_assets.grounding.measures import MeasureArgumentError, SemanticModel
from churn_assets.grounding.rows import StructuredTools
from churn_assets.tasks.parser import QuestionParseError, parse_question
from churn_assets.world.calendar import Day

AGENT_ID = "det"


class DeterministicAgent:
    """Parses the question, calls its template's measure against the arm's tools, formats the answer."""

    agent_id = AGENT_ID

    def __init__(self, semantic_model: SemanticModel | None = None) -> None:
        self._semantic_model = semantic_model

    @property
    def semantic_model(self) -> SemanticModel:
        # Built on first use: the registry file (CHURNBENCH_REGISTRY) is read where the agent answers.
        if self._semantic_model is None:
            self._semantic_model = SemanticModel()
        return self._semantic_model

    def answer(self, question: str, today: Day, tools: StructuredTools) -> AgentAnswer:
        try:
            parsed = parse_question(question)
        except QuestionParseError as e:
            return AgentAnswer(None, "unknown", None, parse_error=str(e))
        tmpl = parsed.template
        try:
            # The arm's semantic model when it offers one (its router's registry), else the same measures run here
            # over whatever the tools serve (an arm without one, e.g. the keyword ablation, with its fallbacks).
            model = getattr(tools, "semantic_model", None) or self.semantic_model
            result = model.call(tmpl.measure, parsed.params, today, tools)
        except MeasureArgumentError as e:
            raise AgentError(f"template {tmpl.template_id}: {e}") from None
        value = tmpl.answer.normalize(result.value)
        return AgentAnswer(value, tmpl.answer.format(value), tmpl.template_id, dict(parsed.params), grounded=True,
                           measure_calls=1, measures_called=((result.call.describe(), result.value),))

    def answer_from_records(self, question: str, today: Day, search: RecordSearch, *,
                            by_kind: bool = True) -> AgentAnswer:
        """Answer from retrieved fact records only, by the fixed rule of `arms.extraction`. `by_kind`: search
        only the record kinds that state the template's facts (`grounding_no_source_routing`); False: one
        search over every kind (`classic_rag`, one store of everything)."""
        try:
            parsed = parse_question(question)
        except QuestionParseError as e:
            return AgentAnswer(None, "unknown", None, parse_error=str(e))
        tmpl = parsed.template
        kinds = search_kinds(tmpl.template_id)
        records = (search(question, kinds, K) if by_kind else search(question, None, K)) if kinds else []
        value = tmpl.answer.normalize(extract(tmpl.template_id, tmpl.answer.kind, parsed.params, today, records))
        return AgentAnswer(value, tmpl.answer.format(value), tmpl.template_id, dict(parsed.params))
