"""The agent interface: what an arm offers an agent (its tools), what an agent offers an arm, and what an
agent answers. The deterministic agent (`agents/deterministic.py`) and the LLM agent (`agents/llm.py`) both
implement `Agent`; arms depend on this module only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from churn_assets.errors import UserFacingError
from churn_assets.grounding.rows import StructuredTools
from churn_assets.tasks.answers import Value
from churn_assets.world.calendar import Day


class RecordSearch(Protocol):
    """What a record-retrieving arm offers: the `k` records most similar to `query` among `kinds` (None:
    every kind)."""

    def __call__(self, query: str, kinds: Sequence[str] | None, k: int) -> Sequence[Any]: ...


class AgentError(UserFacingError):
    """The agent could not produce an answer for a reason that is not the data (a bug or a missing plan)."""


@dataclass(frozen=True)
class AgentAnswer:
    """What the agent answered: the value (None = "unknown"), its text, and how it read the question."""

    value: Value
    text: str
    template_id: str | None
    params: dict[str, Any] = field(default_factory=dict)
    parse_error: str | None = None  # the question matched no template (or several), or a model's answer text
    usage: TokenUsage | None = None  # what a model-backed agent spent (None: no model, the deterministic agent)
    # The model asked to read past its per-task budget (`max_tool_rounds` / `max_tool_calls`): no answer, the
    # verdict `budget_exhausted`. None: within budget (always, for the deterministic agent).
    budget_error: str | None = None
    # The as-of day of the data the answer used, as the agent stated it (None: not stated; the deterministic
    # agent states none).
    data_as_of: Day | None = None
    # Whether the typed answer equals a value one of its measure calls returned, or the template's measure over the
    # rows the task read (the deterministic agent's always is: its answer is its measure's value). None: not judged
    # (an agent answering from fact records, or a task with no answer).
    grounded: bool | None = None
    # Whether the answer equals the example value of the answer format the model was shown (None: no example was
    # shown, as to the deterministic agent). Verdicts do not use either.
    copied_example: bool | None = None
    measure_calls: int = 0  # measure calls the agent made (each also counts as a read against its budget)
    # The calls that ran, in order: (the call as `name(arg=value, ...)`, the value it returned; None: unknown)
    measures_called: tuple[tuple[str, Any], ...] = ()
    # A model-backed agent's conversation, turn by turn (`agents/llm_transcript.py`): each reply, and each call it
    # made with its arguments and the SHA-256 of the result it was shown. None: no model (the deterministic agent).
    transcript: tuple[Mapping[str, Any], ...] | None = None

    @property
    def parsed(self) -> bool:
        return self.parse_error is None


@dataclass(frozen=True)
class TokenUsage:
    """What a model-backed agent spent on one answer: tokens as the endpoint reported them, their cost from the
    price table (`arms/agents/prices.yaml`; None: the model is not priced there), and wall time (the whole answer,
    reads included, and its model calls alone; outside anything hashed: LLM rows are not reproducible anyway)."""

    model: str
    calls: int  # chat-model calls (each tool round is one)
    input_tokens: int
    output_tokens: int
    tool_calls: int = 0
    cost_usd: float | None = None
    unreported_calls: int = 0  # calls whose response carried no token usage (counted as 0 tokens)
    seconds: float = 0.0  # the answer's wall time, from the question to the answer (reads included)
    model_seconds: float = 0.0  # of which waiting for the model

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "calls": self.calls, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "tool_calls": self.tool_calls, "cost_usd": self.cost_usd,
                "unreported_calls": self.unreported_calls, "seconds": self.seconds,
                "model_seconds": self.model_seconds}


class Agent(Protocol):
    """What an arm needs of an agent (the deterministic agent, `agents.llm.LlmAgent`)."""

    agent_id: str

    def answer(self, question: str, today: Day, tools: StructuredTools) -> AgentAnswer: ...

    def answer_from_records(self, question: str, today: Day, search: RecordSearch, *,
                            by_kind: bool = True) -> AgentAnswer: ...
