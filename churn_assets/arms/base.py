"""The arm interface: an arm declares its planned vintage map, then answers one task at a time.

    arm = make_arm(scenario, sources, served=plan.served_vintage)   # arms/registry.py
    arm.planned_vintage                                   # {class: day}, declared before any answer
    result = arm.answer(task)                             # ArmAnswer: value, text, traces, cost, timings

An `ArmAnswer` carries everything scoring and reports need: the value (None = "unknown") and its text, how
the question was read, every retrieval's trace (route, tables, data time per class, rows, cost units,
latency), the served vintage derived from those traces, total cost units, timings (outside anything hashed),
and a transport failure when a source kept refusing (scored as `transport_failure`, never as wrong).

Arms are plain classes over explicit inputs (a `freshness.scenario.Scenario` and the `Sources` connections):
no Dagster.
"""

from __future__ import annotations

import abc
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from churn_assets.arms.agents.deterministic import DeterministicAgent
from churn_assets.arms.agents.interface import Agent, AgentAnswer, TokenUsage
from churn_assets.errors import UserFacingError
from churn_assets.fabric.saas_client import TransportError
from churn_assets.freshness.scenario import Scenario
from churn_assets.grounding.measures import SemanticModel
from churn_assets.grounding.router import Router
from churn_assets.grounding.rows import Request, Row, StructuredTools
from churn_assets.grounding.traces import TraceEntry, disagreements, served_vintage
from churn_assets.tasks.task_set import Task
from churn_assets.world.calendar import Day


class ArmError(UserFacingError):
    """An arm asked to do what it cannot (a task at another anchor, an unknown arm, missing inputs)."""


@dataclass(frozen=True)
class ArmAnswer:
    task_id: str
    arm: str
    value: Any
    text: str
    template_id: str | None
    traces: tuple[TraceEntry, ...]
    timings_ms: dict[str, float] = field(default_factory=dict)
    parse_error: str | None = None
    transport_error: str | None = None
    usage: TokenUsage | None = None  # a model-backed agent's tokens and cost (None: the deterministic agent)
    budget_error: str | None = None  # the agent asked to read past its budget (scored `budget_exhausted`)
    data_as_of: Day | None = None  # the as-of day of its data, as the agent stated it (None: not stated)
    grounded: bool | None = None  # `AgentAnswer.grounded`
    copied_example: bool | None = None  # `AgentAnswer.copied_example`
    measure_calls: int = 0
    measures_called: tuple[tuple[str, Any], ...] = ()  # `AgentAnswer.measures_called`
    transcript: tuple[Mapping[str, Any], ...] | None = None  # `AgentAnswer.transcript`

    @property
    def served_vintage(self) -> dict[str, Day]:
        """Class -> data time, from the tables the answer actually read."""
        return served_vintage(self.traces)

    @property
    def cost_units(self) -> float:
        return round(sum(t.cost_units for t in self.traces), 3)

    @property
    def routes(self) -> list[str]:
        return [t.route for t in self.traces]

    def to_json(self) -> dict[str, Any]:
        """The answer as plain values, without wall-clock figures (those are in `timings_json`)."""
        return {
            "task_id": self.task_id, "arm": self.arm, "value": self.value, "text": self.text,
            "template_id": self.template_id, "parse_error": self.parse_error,
            "transport_error": self.transport_error, "budget_error": self.budget_error,
            "data_as_of": self.data_as_of.isoformat() if self.data_as_of else None, "cost_units": self.cost_units,
            "served_vintage": {c: d.isoformat() for c, d in sorted(self.served_vintage.items())},
            "traces": [t.to_json(with_latency=False) for t in self.traces],
            **({"usage": self.usage.to_json()} if self.usage is not None else {}),
        }

    def timings_json(self) -> dict[str, Any]:
        """Wall-clock figures for the timings sidecar: totals and each retrieval's latency."""
        return {"task_id": self.task_id, "arm": self.arm, **self.timings_ms,
                "retrievals_ms": [round(t.latency_ms, 1) for t in self.traces]}


class TracedTools(StructuredTools, Protocol):
    """Structured tools that keep a trace of every retrieval (`TracingTools`; the hierarchical coordinator)."""

    traces: list[TraceEntry]


class TracingTools:
    """The agent's structured tools over a router: every call is one traced retrieval. `serves` limits the
    classes an arm may read (None: every class); a request for another class answers None. `semantic_model`: the
    registry's measures, offered to an agent that can call them (arms with a semantic model; None: raw views only).
    A measure reads through these same tools, so its reads are traced and restricted like any other."""

    def __init__(self, router: Router, serves: frozenset[str] | None = None,
                 semantic_model: SemanticModel | None = None) -> None:
        self.router = router
        self.serves = serves
        self.semantic_model = semantic_model
        self.traces: list[TraceEntry] = []

    def retrieve(self, requests: Sequence[Request], note: str = "") -> list[list[Row] | None]:
        allowed = [r for r in requests if self.serves is None or r.entity_class in self.serves]
        got: dict[int, list[Row]] = {}
        if allowed:
            rows, entry = self.router.retrieve(allowed, note)
            self.traces.append(entry)
            got = {id(r): rows[i] for i, r in enumerate(allowed)}
        return [got.get(id(r)) for r in requests]


class Arm(abc.ABC):
    """An architecture answering tasks of one scenario."""

    name: str = ""

    def __init__(self, scenario: Scenario, agent: Agent | None = None) -> None:
        self.scenario = scenario
        self.agent: Agent = agent if agent is not None else DeterministicAgent()

    @property
    @abc.abstractmethod
    def planned_vintage(self) -> dict[str, Day]:
        """Class -> the data day this arm serves, declared before answering (docs/rules.md, "Planned vintage
        per arm")."""

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Work done once for all the questions of a run before the first answer (the corpus arms encode
        every question in one batched call). The runner passes the whole task set, answered or not, so a
        resumed run prepares exactly what a fresh one did. Nothing by default."""
        return None

    @abc.abstractmethod
    def _answer(self, question: str) -> tuple[AgentAnswer, list[TraceEntry]]:
        """The agent's answer to one question and the traces of its retrievals."""

    def answer(self, task: Task) -> ArmAnswer:
        """Answer one task: only its question text reaches the agent; "today" is the scenario's T."""
        if task.anchor != self.scenario.t.isoformat():
            raise ArmError(f"task {task.task_id} is asked at {task.anchor}, this arm evaluates at {self.scenario.t}")
        started = time.perf_counter()
        traces: list[TraceEntry] = []
        transport: str | None = None
        try:
            agent_answer, traces = self._answer(task.question_text)
        except TransportError as e:
            # `usage`: what a model-backed agent spent before the failure
            agent_answer, transport = AgentAnswer(None, "unknown", None, usage=getattr(e, "usage", None)), str(e)
            traces = list(getattr(e, "traces", ()))
        total = (time.perf_counter() - started) * 1000.0
        retrieval = sum(t.latency_ms for t in traces)
        return ArmAnswer(task.task_id, self.name, agent_answer.value, agent_answer.text, agent_answer.template_id,
                         tuple(traces), {"total": round(total, 1), "retrieval": round(retrieval, 1),
                                         "agent": round(total - retrieval, 1)},
                         parse_error=agent_answer.parse_error, transport_error=transport, usage=agent_answer.usage,
                         budget_error=agent_answer.budget_error, data_as_of=agent_answer.data_as_of,
                         grounded=agent_answer.grounded, copied_example=agent_answer.copied_example,
                         measure_calls=agent_answer.measure_calls,
                         measures_called=agent_answer.measures_called, transcript=agent_answer.transcript)

    def check_traces(self, answer: ArmAnswer) -> list[str]:
        """Differences between an answer's traces and this arm's planned vintage (empty: they agree)."""
        return disagreements(answer.traces, self.planned_vintage)


class RouterArm(Arm):
    """An arm whose agent reads structured rows through the router."""

    serves: frozenset[str] | None = None  # classes the arm may read (None: all)
    semantic: bool = False  # whether the arm offers the registry's measures to its agent (the grounding arms)

    def __init__(self, scenario: Scenario, router: Router) -> None:
        super().__init__(scenario)
        self.router = router

    @property
    def planned_vintage(self) -> dict[str, Day]:
        return dict(self.router.served) if self.router.served else {}

    def tools(self, question: str) -> TracedTools:
        return TracingTools(self.router, self.serves, self.semantic_model)

    @functools.cached_property
    def semantic_model(self) -> SemanticModel | None:
        """The router registry's measures, when the arm offers them (built once per arm)."""
        return SemanticModel(self.router.registry) if self.semantic else None

    def _answer(self, question: str) -> tuple[AgentAnswer, list[TraceEntry]]:
        tools = self.tools(question)
        try:
            answer = self.agent.answer(question, self.scenario.t, tools)
        except TransportError as e:
            e.traces = list(tools.traces)  # what was read before the failure
            raise
        return answer, tools.traces

