"""Exposure (the oracle) and its prediction, per task and per run, before any answer.

For a scenario (anchor T, cache build day T') and an arm's planned vintage map:

- **exposure** of a task: its gold at T differs from its gold under the planned vintage (compared with
  the template's answer type) and that served gold is informative (`verdicts.served_gold_is_degenerate`):
  a served gold of "no answer", or the empty value of a window the served data cannot reach, is the same
  value an empty answer gives, so it is counted apart (`degenerate_exposure`), as the verdicts count an
  answer equal to it apart (`unattributed_error`). For the deterministic agent on `grounding` and its off
  ablation, freshness + mixed-vintage errors equal the exposure and unattributed errors the degenerate
  exposure, exactly.
- **prediction** of a task: the probability that its answer moved between the served data and T,
  `1 - prod_c (1 - r_qc) ** a_qc` over the classes c the task reads, where
  * `r_qc` is the measured rate at which class c's changes of one day change *this task's* answer: the share
    of the days start+1 .. T' on which the answer asked that day differs when class c is taken as of the
    day before (every other class as of the day). Measured on the ledger before T' only, per task: it
    counts the changes that move the answer, not every event that could (the old event-count predictor
    overshot 51 of 54 cells: a hire in a cost center rarely moves its spend, an order statistic rarely
    changes its leader, a license that is used stays used);
  * `a_qc` is the number of days after class c's served day on which a missed change moves the answer
    (`Template.change_window`: a count "in the last 7 days" served 29 days old misses 7 days of events).
  Only the days on which a change event of c touches the task's entities (its `depends_on` keys and moving
  kinds) are evaluated; on the others the answer cannot move. A degenerate task predicts 0 (it is not
  exposure). A run's prediction is the sum over its tasks; its 90% interval comes from resampling the
  measured days (`AnswerChangeRates.interval`: tasks share day-level shocks, so the Poisson-binomial interval
  of independent tasks, `poisson_binomial_interval`, is far too narrow). A prediction rests on the days
  measured before T' (`RunExposure.history_days`); with fewer than `MIN_HISTORY_DAYS` it is shown as such (a
  T' one day after the ledger's start measures one day and predicts from it alone).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.change_events import change_events, tag_matches
from churn_assets.evaluation.verdicts import served_gold_is_degenerate
from churn_assets.memo import Memo, memo
from churn_assets.tasks.answers import Value
from churn_assets.tasks.gold import GoldResolver, gold_from_state
from churn_assets.tasks.shared_aggregates import shared_aggregates
from churn_assets.tasks.task_set import Task, task_set_hash
from churn_assets.tasks.templates import ANY, Template
from churn_assets.world.calendar import Day
from churn_assets.world.events import EVENT_KINDS
from churn_assets.world.fold import uniform_vintage, walk_ledger
from churn_assets.world.packed import records_key
from churn_assets.world.state import STATE_CLASSES, WorldState

ONE_DAY = dt.timedelta(days=1)
# Below this many measured days before T' a prediction is reported as resting on too short a history: two
# weeks see every weekday twice, and the calibration (bench/calibrate_predictor.py) starts at 80+ days.
MIN_HISTORY_DAYS = 14


class ExposureError(UserFacingError, ValueError):
    """A scenario whose exposure cannot be computed as asked (no days to measure rates on, ...)."""


@dataclass(frozen=True)
class TaskExposure:
    task_id: str
    template_id: str
    task_tier: int
    gold_at_anchor: Value
    served_gold: Value
    exposed: bool  # gold differs and the served gold is informative
    probability: float  # predicted probability of `exposed`
    degenerate: bool = False  # the served gold carries no information (see the module doc)
    differs: bool = False  # gold at T differs from the served gold (informative or not)

    @property
    def degenerate_exposed(self) -> bool:
        return self.degenerate and self.differs


@dataclass(frozen=True)
class RunExposure:
    anchor: Day
    t_prime: Day
    vintage: dict[str, Day]
    tasks: tuple[TaskExposure, ...]
    # The 90% interval of the predicted count (`AnswerChangeRates.interval`: measured days resampled, which
    # keeps the common shocks tasks share); None: no prediction (nothing served stale).
    interval_90: tuple[int, int] | None = None
    history_days: int | None = None  # days the answer-change rates were measured on; None: no prediction

    @property
    def short_history(self) -> bool:
        """The prediction rests on fewer than `MIN_HISTORY_DAYS` measured days."""
        return self.history_days is not None and self.history_days < MIN_HISTORY_DAYS

    @property
    def exposure(self) -> int:
        return sum(1 for t in self.tasks if t.exposed)

    @property
    def degenerate_exposure(self) -> int:
        """Tasks whose gold differs under the served vintage, but only as an empty or unknown value."""
        return sum(1 for t in self.tasks if t.degenerate_exposed)

    @property
    def prediction(self) -> float:
        return sum(t.probability for t in self.tasks)

    def interval(self) -> tuple[int, int]:
        """The 90% interval of the predicted count of exposed tasks ((0, 0) when nothing is predicted)."""
        return self.interval_90 or (0, 0)

    def independent_interval(self, level: float = 0.9) -> tuple[int, int]:
        """The interval if the tasks were independent (Poisson-binomial): too narrow for this workload (see
        `AnswerChangeRates.interval`); kept to show how much the common shocks widen it."""
        return poisson_binomial_interval([t.probability for t in self.tasks], level)

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


def poisson_binomial_interval(probabilities: Sequence[float], level: float = 0.9) -> tuple[int, int]:
    """The central interval [lo, hi] of the number of successes of independent Bernoulli trials, holding at
    least `level` of the probability ((1 - level) / 2 at most in each tail)."""
    dist = [1.0]
    for p in probabilities:
        p = min(1.0, max(0.0, p))
        nxt = [0.0] * (len(dist) + 1)
        for k, mass in enumerate(dist):
            nxt[k] += mass * (1.0 - p)
            nxt[k + 1] += mass * p
        dist = nxt
    tail = (1.0 - level) / 2.0
    cum, lo = 0.0, 0
    for k, mass in enumerate(dist):
        if cum + mass > tail + 1e-12:
            lo = k
            break
        cum += mass
    cum, hi = 0.0, len(dist) - 1
    for k in range(len(dist) - 1, -1, -1):
        if cum + dist[k] > tail + 1e-12:
            hi = k
            break
        cum += dist[k]
    return lo, hi


# ---------------------------------------------------------------------------------------------------
# measured answer-change rates
# ---------------------------------------------------------------------------------------------------


def asked_on(template: Template, params: Mapping[str, Any], day: Day) -> dict[str, Any]:
    """The task's parameters as the question would be asked on `day`: a change-over-time question measures
    the change of that one day (day1 = the day before, day2 = the day); every other question keeps its
    parameters (a window "in the last N days" ends at the day it is asked)."""
    if template.changes_in == "span":
        return {**params, "day1": (day - ONE_DAY).isoformat(), "day2": day.isoformat()}
    return dict(params)


class AnswerChangeRates:
    """For each (task, class): the days on which class c's changes of that day changed the task's answer
    asked that day (see the module doc), measured over days start+1 .. `until`. The rate for a cell with
    build day T' counts only days up to T' (a day's measurement reads the ledger up to that day only, so one
    measurement to T - 1 serves every T' before T without seeing past any of them)."""

    def __init__(self, start: Day, until: Day, changed: Mapping[tuple[str, str], Sequence[Day]],
                 trailing_days: int | None = None) -> None:
        self.start = start
        self.until = until
        self.changed = {k: tuple(sorted(v)) for k, v in changed.items()}
        self.trailing_days = trailing_days  # None: every day from start+1; else the last N days up to T'

    def rate(self, task_id: str, entity_class: str, t_prime: Day) -> float:
        """Share of the measured days up to T' on which the class's changes moved the task's answer."""
        if t_prime > self.until:
            raise ExposureError(f"rates were measured to {self.until}, not to T'={t_prime}")
        first = self.start
        if self.trailing_days is not None:
            first = max(first, t_prime - dt.timedelta(days=self.trailing_days))
        days = (t_prime - first).days
        if days < 1:
            raise ExposureError("no day to measure change rates on: T' must be after the ledger's first day")
        return sum(1 for d in self.changed.get((task_id, entity_class), ()) if first < d <= t_prime) / days

    def missed_days(self, task: Task, vintage: Mapping[str, Day], anchor: Day) -> dict[str, tuple[int, int]]:
        """Class -> the days a change can be missed, as offsets back from T: (first, last) with 0 = T itself,
        the days after the class's served day inside the question's change window; classes served at T or
        whose missed days cannot move the answer are left out."""
        t = task.template
        after, until = t.change_window(task.params, anchor)
        out: dict[str, tuple[int, int]] = {}
        for c in t.classes:
            served = vintage[c]
            if served >= anchor:
                continue
            first_missed = max(served, after or served) + ONE_DAY
            if first_missed > until:
                continue
            out[c] = ((anchor - until).days, (anchor - first_missed).days)
        return out

    def probability(self, task: Task, vintage: Mapping[str, Day], anchor: Day, t_prime: Day) -> float:
        """The predicted probability that the task's answer moved between its served vintage and T."""
        keep = 1.0
        for c, (first, last) in self.missed_days(task, vintage, anchor).items():
            keep *= (1.0 - self.rate(task.task_id, c, t_prime)) ** (last - first + 1)
        return 1.0 - keep

    def measured_days(self, t_prime: Day) -> list[Day]:
        """The days a rate at T' is measured on (start+1 .. T', or its trailing days)."""
        first = self.start if self.trailing_days is None else max(self.start,
                                                                  t_prime - dt.timedelta(days=self.trailing_days))
        return [first + dt.timedelta(days=i) for i in range(1, (t_prime - first).days + 1)]

    def interval(self, tasks: Sequence[Task], vintage: Mapping[str, Day], anchor: Day, t_prime: Day, *,
                 skip: Collection[str] = (), level: float = 0.9, samples: int = 2000, seed: int = 0
                 ) -> tuple[int, int]:
        """The central `level` interval of the count of exposed tasks, by resampling measured days.

        Tasks are not independent: one offboarding moves a cost center's spend, its active users, the
        offboardings count and the unassigned licenses at once, so the count varies far more than a
        Poisson-binomial of the per-task probabilities. Each sample draws, for each day T, T-1, ... that data
        could have missed, one measured day (start+1 .. T', with replacement) and takes that day's answer
        changes for every task at once; a task counts when a change of a class it reads falls on a day its
        answer cannot afford to miss. The shared draws keep the day-level common shocks. Seeded: the same
        inputs give the same interval. `skip`: task ids not counted (degenerate ones)."""
        import numpy as np

        days = self.measured_days(t_prime)
        if not days:
            return 0, 0
        index = {d: i for i, d in enumerate(days)}
        plans = []
        deepest = 0
        for task in tasks:
            if task.task_id in skip:
                continue
            ranges = []
            for c, (first, last) in self.missed_days(task, vintage, anchor).items():
                hits = np.zeros(len(days), dtype=bool)
                for d in self.changed.get((task.task_id, c), ()):
                    if d in index:
                        hits[index[d]] = True
                if hits.any():
                    ranges.append((hits, first, last))
                    deepest = max(deepest, last + 1)
            if ranges:
                plans.append(ranges)
        if not plans:
            return 0, 0
        rng = np.random.default_rng(seed)
        drawn = rng.integers(0, len(days), size=(samples, deepest))
        counts = np.zeros(samples, dtype=np.int64)
        for ranges in plans:
            exposed = np.zeros(samples, dtype=bool)
            for hits, first, last in ranges:
                exposed |= hits[drawn[:, first:last + 1]].any(axis=1)
            counts += exposed
        tail = (1.0 - level) / 2.0
        lo, hi = np.quantile(counts, [tail, 1.0 - tail], method="inverted_cdf")
        return int(lo), int(hi)

    def window_interval(self, rows: Sequence[tuple[Day, Sequence[Task], Mapping[str, Day], Collection[str]]],
                        t_prime: Day, days: int, *, level: float = 0.9, samples: int = 2000, seed: int = 0,
                        resample_history: bool = False) -> tuple[float, float]:
        """The central `level` interval of the mean count of exposed tasks over a window of `days` days, from
        `rows` (anchor T, the tasks asked on T, the vintage served on T, task ids not counted) of its days after
        T' (a day not given counts 0). As `interval`, by resampling measured days, but one draw per calendar day
        shared by every T of the window: a day's answer changes are missed by every T whose served data predates
        it, as one real day's changes are (the window's days are not independent draws).

        `resample_history`: each sample first resamples the measured history itself (as many days, with
        replacement) and draws the window's days from that, so the interval also carries the uncertainty of the
        rates measured on a finite past (a two-stage bootstrap). Off by default; an experiment of the window
        calibration (`bench/decompose_window_bias.py --resample-history`, docs/tasks.md)."""
        import numpy as np

        measured = self.measured_days(t_prime)
        if not measured or not rows:
            return 0.0, 0.0
        index = {d: i for i, d in enumerate(measured)}
        # Calendar columns counted back from the window's last day (column i = that day - i), as `interval`
        # counts offsets back from T: a window of one day draws exactly what `interval` draws.
        last_day = max(anchor for anchor, *_ in rows)
        depths = [(last_day - anchor).days + far + 1 for anchor, tasks, vintage, _ in rows for task in tasks
                  for c, (_, far) in self.missed_days(task, vintage, anchor).items()
                  if any(d in index for d in self.changed.get((task.task_id, c), ()))]
        if not depths:
            return 0.0, 0.0
        width = max(depths)
        rng = np.random.default_rng(seed)
        drawn = rng.integers(0, len(measured), size=(samples, width))  # column i: the day last_day - i
        if resample_history:  # drawn after, so the default's draws are unchanged
            history = rng.integers(0, len(measured), size=(samples, len(measured)))
            drawn = np.take_along_axis(history, drawn, axis=1)
        cumulative: dict[tuple[str, str], Any] = {}  # (task, class) -> samples x (width + 1) running hit counts

        def hits_before(task_id: str, c: str) -> Any:
            if (task_id, c) not in cumulative:
                hits = np.zeros(len(measured), dtype=np.int32)
                for d in self.changed.get((task_id, c), ()):
                    if d in index:
                        hits[index[d]] = 1
                running = np.zeros((samples, width + 1), dtype=np.int32)
                np.cumsum(hits[drawn], axis=1, out=running[:, 1:])
                cumulative[(task_id, c)] = running
            return cumulative[(task_id, c)]

        total = np.zeros(samples, dtype=np.int64)
        for anchor, tasks, vintage, skip in rows:
            for task in tasks:
                if task.task_id in skip:
                    continue
                exposed = np.zeros(samples, dtype=bool)
                shift = (last_day - anchor).days
                for c, (near, far) in self.missed_days(task, vintage, anchor).items():
                    if not any(d in index for d in self.changed.get((task.task_id, c), ())):
                        continue
                    running = hits_before(task.task_id, c)  # columns near + shift .. far + shift, both included
                    exposed |= (running[:, far + shift + 1] - running[:, near + shift]) > 0
                total += exposed
        means = total / days
        tail = (1.0 - level) / 2.0
        lo_q, hi_q = np.quantile(means, [tail, 1.0 - tail], method="inverted_cdf")
        return float(lo_q), float(hi_q)

    @classmethod
    def measure(cls, records: Sequence[Mapping[str, Any]], tasks: Sequence[Task], *, start: Day, until: Day,
                format_version: int = 2, classes: Collection[str] | None = None) -> AnswerChangeRates:
        """Measure over days start+1 .. `until` (two walks of the ledger in step, a day apart), for the
        entity classes in `classes` only (None: every class; a class served at T never needs a rate)."""
        if until <= start:
            raise ExposureError("no day to measure change rates on: T' must be after the ledger's first day")
        candidates = _candidate_days(records, tasks, start + ONE_DAY, until, format_version, classes)
        by_day: dict[Day, list[tuple[Task, str]]] = defaultdict(list)
        for (task, c), days in candidates.items():
            for d in days:
                by_day[d].append((task, c))
        changed: dict[tuple[str, str], list[Day]] = defaultdict(list)
        ahead = walk_ledger(records, format_version=format_version, end=until)
        behind = walk_ledger(records, format_version=format_version, end=until)
        next(ahead)  # the first day (start): nothing before it to compare with
        for (day, today), (_, yesterday) in zip(ahead, behind, strict=False):
            pending = by_day.get(day)
            if not pending:
                continue
            now: dict[str, Value] = {}
            mixed: dict[str, WorldState] = {}
            # One scope per day: the walkers' sub-states do not change until the next step, and every task of
            # the day shares today's aggregates (and each class's day-older ones).
            with shared_aggregates():
                for task, c in pending:
                    t = task.template
                    params = asked_on(t, task.params, day)
                    if task.task_id not in now:
                        now[task.task_id] = _gold(today, t, params, day, uniform_vintage(day))
                    if c not in mixed:
                        mixed[c] = _mixed(today, yesterday, c, day)
                    before = _gold(mixed[c], t, params, day, {**uniform_vintage(day), c: day - ONE_DAY})
                    if not t.answer.equal(now[task.task_id], before):
                        changed[(task.task_id, c)].append(day)
        return cls(start, until, changed)


def _mixed(today: WorldState, yesterday: WorldState, entity_class: str, day: Day) -> WorldState:
    """Today's state with one class taken as of the day before (the walkers' sub-states, not copies)."""
    subs = {c: getattr(yesterday if c == entity_class else today, c) for c in STATE_CLASSES}
    vintage = {**uniform_vintage(day), entity_class: day - ONE_DAY}
    return WorldState(vintage=vintage, **subs)


def _gold(state: WorldState, template: Template, params: Mapping[str, Any], anchor: Day,
          vintage: Mapping[str, Day]) -> Value:
    state.vintage = dict(vintage)
    return gold_from_state(state, template, params, anchor)


def _candidate_days(records: Sequence[Mapping[str, Any]], tasks: Sequence[Task], first: Day, last: Day,
                    format_version: int, classes: Collection[str] | None) -> dict[tuple[Task, str], set[Day]]:
    """(task, class) -> days with a change event of the class on the task's entities (moving kinds only)."""
    wanted_kinds = {m.split(":", 1)[0] for task in tasks for m in task.template.moving_kinds}
    if classes is not None:
        wanted_kinds = {k for k in wanted_kinds if classes_changed(k) & set(classes)}
    events = change_events(records, first_day=first, last_day=last, kinds=wanted_kinds,
                           format_version=format_version)
    by_tag_key: dict[tuple[str, str], list[Any]] = defaultdict(list)  # (tag, entity key) -> events
    by_tag: dict[str, list[Any]] = defaultdict(list)
    for e in events:
        by_tag[e.tag].append(e)
        for key in e.keys:
            by_tag_key[(e.tag, key)].append(e)
    out: dict[tuple[Task, str], set[Day]] = defaultdict(set)
    for task in tasks:
        t = task.template
        deps = t.depends_on(task.params)
        for tag in by_tag:
            if not tag_matches(tag, t.moving_kinds):
                continue
            touched = classes_changed(tag.split(":", 1)[0]) & set(t.classes)
            if classes is not None:
                touched &= set(classes)
            if not touched:
                continue
            matching = by_tag[tag] if ANY in deps else [e for key in deps for e in by_tag_key.get((tag, key), ())]
            days = {e.day for e in matching}
            for c in touched:
                out[(task, c)] |= days
    return out


RATES: Memo[AnswerChangeRates] = memo("exposure.change_rates", 6)  # a paper's task sets and classes


def change_rates(records: Sequence[Mapping[str, Any]], tasks: Sequence[Task], *, start: Day, anchor: Day,
                 format_version: int = 2, classes: Collection[str] | None = None) -> AnswerChangeRates:
    """The rates of a task set asked at T for `classes` (None: all), measured to T - 1 (serving every T' < T),
    kept per process for the same ledger records and task set, by content (a paper's cells share them)."""
    until = max(start + ONE_DAY, anchor - ONE_DAY)
    # The task set by content, not by ids: every task set numbers its tasks q001, q002, ..., so two task sets of
    # one ledger (another count or seed) share ids and must not share rates.
    key = (records_key(records), format_version, task_set_hash(tasks), start, until,
           None if classes is None else frozenset(classes))
    return RATES.get_or_compute(key, lambda: AnswerChangeRates.measure(
        records, tasks, start=start, until=until, format_version=format_version, classes=classes))


# ---------------------------------------------------------------------------------------------------
# a run's exposure
# ---------------------------------------------------------------------------------------------------


def run_exposure(
    records: Sequence[Mapping[str, Any]],
    tasks: Sequence[Task],
    *,
    anchor: Day,
    t_prime: Day,
    vintage: Mapping[str, Day],
    start: Day | None = None,
    resolver: GoldResolver | None = None,
    rates: AnswerChangeRates | None = None,
    predict: bool = True,
    interval: bool = True,
) -> RunExposure:
    """Exposure and prediction of a task set under a planned vintage map (before any answer). T' <= T is the
    scenario's to guarantee (`freshness.scenario.check_days`). `predict` False: exposure only (no rates
    measured, every probability 0, no interval); `interval` False: no 90% interval of the predicted count (a
    window's days, whose interval is the window's)."""
    first = start or dt.date.fromisoformat(records[0]["at"])
    resolver = resolver or GoldResolver(records)
    served = {c: vintage[c] for c in vintage}
    stale = any(d < anchor for d in served.values())
    if not predict:
        rates = None
    elif rates is None and stale and t_prime > first:
        # Every class, not only the stale ones: a class's rates are measured independently of the others and
        # only stale classes are read (`missed_days`), so the figures are the same, and the measurement, kept
        # per process, serves every cell of this T (the paper's nine cells measured once, not once per vintage).
        rates = change_rates(records, tasks, start=first, anchor=anchor, format_version=resolver.format_version)
    at_anchor = uniform_vintage(anchor)
    out = []
    for task in tasks:
        t = task.template
        g_t = resolver.gold(t, task.params, anchor=anchor, vintage=at_anchor)
        g_s = resolver.gold(t, task.params, anchor=anchor, vintage=served)
        degenerate = served_gold_is_degenerate(t, task.params, anchor, served, g_s)
        differs = not t.answer.equal(g_t, g_s)
        probability = 0.0 if degenerate or rates is None else rates.probability(task, served, anchor, t_prime)
        out.append(TaskExposure(task.task_id, t.template_id, t.task_tier, g_t, g_s, differs and not degenerate,
                                probability, degenerate, differs))
    interval_90 = history = None
    if rates is not None:
        if interval:
            interval_90 = rates.interval(tasks, served, anchor, t_prime,
                                         skip={x.task_id for x in out if x.degenerate})
        history = len(rates.measured_days(t_prime))
    return RunExposure(anchor, t_prime, dict(served), tuple(out), interval_90, history)


