"""Exposure (the oracle) and its analytic prediction, per task and per run, before any answer.

For a scenario (anchor T, cache build day T') and an arm's planned vintage map:

- **exposure** of a task: its gold at T differs from its gold under the planned vintage (compared with
  the template's answer type). A run's exposure is the number of exposed tasks. For the deterministic
  agent on `grounding` and its off ablation, freshness + mixed-vintage errors must equal it exactly.
- **prediction** of a task: 1 - exp(-lambda_q * a_q). With several classes of different ages the product
  is a sum over the change events that move the answer: each event counts the age of the data it would
  have to reach (the oldest of the classes the event changes among those the task reads; an event is
  missed when any of them predates it), so lambda_q * a_q = sum over matching events of age / days
  measured. Matching events are those of the template's `moving_kinds` on the entities of
  `depends_on(params)`, counted on days start+1 .. T' only: the world build on day 0 (the initial
  users, licenses, contracts) is not drift, and nothing after T' may be seen. The age counts only the
  days on which a missed change can move the answer (`Template.change_window`): a count of events "in
  the last 7 days" served 29 days old misses 7 days of events, not 29; a change between day1 and day2
  misses the days after both the served day and day1, up to day2. A run's prediction is the sum over
  its tasks.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.change_events import ChangeEvent, change_events, tag_matches
from churn_assets.tasks.answers import Value
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task
from churn_assets.tasks.templates import ANY, Template
from churn_assets.world.calendar import Day
from churn_assets.world.events import EVENT_KINDS
from churn_assets.world.fold import uniform_vintage


class ExposureError(UserFacingError, ValueError):
    """A scenario whose exposure cannot be computed as asked (T' after T, no days to measure rates on)."""


@dataclass(frozen=True)
class TaskExposure:
    task_id: str
    template_id: str
    task_tier: int
    gold_at_anchor: Value
    served_gold: Value
    exposed: bool
    hazard: float  # lambda_q * a_q

    @property
    def probability(self) -> float:
        return 1.0 - math.exp(-self.hazard)


@dataclass(frozen=True)
class RunExposure:
    anchor: Day
    t_prime: Day
    vintage: dict[str, Day]
    tasks: tuple[TaskExposure, ...]

    @property
    def exposure(self) -> int:
        return sum(1 for t in self.tasks if t.exposed)

    @property
    def prediction(self) -> float:
        return sum(t.probability for t in self.tasks)

    def by_template(self) -> dict[str, tuple[int, float, int]]:
        """Template -> (exposed, predicted, tasks)."""
        out: dict[str, list[float]] = {}
        for t in self.tasks:
            row = out.setdefault(t.template_id, [0, 0.0, 0])
            row[0] += int(t.exposed)
            row[1] += t.probability
            row[2] += 1
        return {k: (int(v[0]), v[1], int(v[2])) for k, v in sorted(out.items())}


def classes_changed(kind: str) -> set[str]:
    """The entity classes an event kind changes, with utilization derived from consumption (as the fold)."""
    classes = set(EVENT_KINDS[kind].classes)
    if kind == "consumption_logged":
        classes.add("utilization")
    return classes


class ChangeRates:
    """Change events of [start+1, T'] indexed by kind: the predictor's measured rates."""

    def __init__(self, events: Sequence[ChangeEvent], days_measured: int) -> None:
        if days_measured < 1:
            raise ExposureError("no day to measure change rates on: T' must be after the ledger's first day")
        self.days_measured = days_measured
        self.by_kind: dict[str, list[ChangeEvent]] = defaultdict(list)
        for e in events:
            self.by_kind[e.kind].append(e)

    @classmethod
    def measure(cls, records: Sequence[Mapping[str, Any]], *, start: Day, t_prime: Day,
                kinds: Collection[str] | None = None) -> ChangeRates:
        """Rates on days start+1 .. T' of every event kind, or of `kinds` only (see `stale_kinds`)."""
        first = start + dt.timedelta(days=1)
        return cls(change_events(records, first_day=first, last_day=t_prime, kinds=kinds), (t_prime - start).days)

    def hazard(self, template: Template, params: Mapping[str, Any], vintage: Mapping[str, Day],
               anchor: Day) -> float:
        """lambda_q * a_q of one task under a vintage map (0 when it reads only fresh data)."""
        after, until = template.change_window(params, anchor)
        deps = template.depends_on(params)
        total = 0.0
        for kind in {m.split(":", 1)[0] for m in template.moving_kinds}:
            touched = classes_changed(kind) & set(template.classes)
            # Missed changes: after the class's served day (and the question's window start), up to `until`.
            age = max((max(0, (until - max(vintage[c], after or vintage[c])).days) for c in touched), default=0)
            if age == 0:
                continue
            n = sum(1 for e in self.by_kind.get(kind, ())
                    if tag_matches(e.tag, template.moving_kinds) and (ANY in deps or e.keys & deps))
            total += n * age
        return total / self.days_measured


def stale_kinds(vintage: Mapping[str, Day], anchor: Day) -> frozenset[str]:
    """Event kinds that change a class served before the anchor: the only ones a prediction can count."""
    stale = {c for c, d in vintage.items() if d < anchor}
    return frozenset(k for k in EVENT_KINDS if stale & classes_changed(k))


def run_exposure(
    records: Sequence[Mapping[str, Any]],
    tasks: Sequence[Task],
    *,
    anchor: Day,
    t_prime: Day,
    vintage: Mapping[str, Day],
    start: Day | None = None,
    resolver: GoldResolver | None = None,
    rates: ChangeRates | None = None,
) -> RunExposure:
    """Exposure and prediction of a task set under a planned vintage map (before any answer). T' <= T is the
    scenario's to guarantee (`freshness.scenario.check_days`)."""
    first = start or dt.date.fromisoformat(records[0]["at"])
    resolver = resolver or GoldResolver(records)
    rates = rates or ChangeRates.measure(records, start=first, t_prime=t_prime,
                                         kinds=stale_kinds(vintage, anchor))
    served = {c: vintage[c] for c in vintage}
    at_anchor = uniform_vintage(anchor)
    out = []
    for task in tasks:
        t = task.template
        g_t = resolver.gold(t, task.params, anchor=anchor, vintage=at_anchor)
        g_s = resolver.gold(t, task.params, anchor=anchor, vintage=served)
        out.append(TaskExposure(task.task_id, t.template_id, t.task_tier, g_t, g_s, not t.answer.equal(g_t, g_s),
                                rates.hazard(t, task.params, served, anchor)))
    return RunExposure(anchor, t_prime, dict(served), tuple(out))
