"""Task-set generation: parameters sampled from the world at T, quotas per task_tier and template.

Deterministic: the seed derives from the world id, T and the deployment's task seed, and all randomness
comes from `random.Random.random()` (whose sequence Python guarantees across versions). Rules:

- task_tiers split like the reference (81/63/36 of 180; other sizes proportionally), each tier's tasks
  split across its templates by their weights (largest remainder);
- no two tasks share a question text;
- a task whose gold at T is undefined (e.g. a fraction of zero seats, a tied "top" question) is skipped;
- degenerate answers (zero, empty list) are capped at a quarter of a template's tasks;
- a template that runs out of candidates leaves its share to the other templates of its tier.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from churn_assets.tasks.answers import Value
from churn_assets.tasks.gold import GoldResolver, gold_from_state
from churn_assets.tasks.task_set import Task, TaskSetError
from churn_assets.tasks.templates import (
    DEFAULT_TIER_SPLIT,
    TEMPLATES,
    DaySpan,
    Domain,
    OneOf,
    Pick,
    SpendThreshold,
    Template,
)
from churn_assets.world.calendar import Day
from churn_assets.world.fold import monthly_spend_by_cost_center, uniform_vintage
from churn_assets.world.state import WorldState

DEGENERATE_SHARE = 0.25


def derive_seed(world_id: str, anchor: Day | str, task_seed: int = 0) -> int:
    """The task set's seed: a function of the world, T and the deployment's task seed only."""
    text = f"{world_id}|{anchor if isinstance(anchor, str) else anchor.isoformat()}|{task_seed}"
    return int(hashlib.sha256(text.encode()).hexdigest()[:16], 16)


def largest_remainder(total: int, weights: Sequence[int]) -> list[int]:
    """Split `total` in proportion to `weights`; leftover units go to the largest remainders (then order)."""
    s = sum(weights)
    raw = [total * w / s for w in weights]
    out = [int(r) for r in raw]
    order = sorted(range(len(weights)), key=lambda i: (-(raw[i] - out[i]), i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def tier_quotas(n: int) -> dict[int, int]:
    tiers = sorted(DEFAULT_TIER_SPLIT)
    return dict(zip(tiers, largest_remainder(n, [DEFAULT_TIER_SPLIT[t] for t in tiers]), strict=True))


def _shuffled(items: list[Any], rng: random.Random) -> list[Any]:
    """Fisher-Yates on `rng.random()` only (portable across Python versions, unlike `rng.shuffle`)."""
    out = list(items)
    for i in range(len(out) - 1, 0, -1):
        j = int(rng.random() * (i + 1))
        out[i], out[j] = out[j], out[i]
    return out


# ---------------------------------------------------------------------------------------------------
# the world at T, as the samplers see it
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorldPools:
    """Entity pools and figures of the world at T that parameters are drawn from."""

    start: Day  # the ledger's first day: no day parameter lies before it
    anchor: Day
    pools: dict[str, list[str]]
    cost_center_spend: dict[str, float]  # every cost center, 0.0 when it has no spend


def world_pools(state: WorldState, anchor: Day, start: Day) -> WorldPools:
    prices, centers = state.prices.products, state.cost_center_membership.cost_centers
    contracts = state.contract_terms.contracts
    spend = monthly_spend_by_cost_center(state, anchor).by_cost_center
    pools = {
        "cost_centers": sorted(cc for cc, c in centers.items() if c.created_on <= anchor),
        "products": sorted(p for p, prod in prices.items() if prod.listed_on <= anchor),
        "api_products": sorted(p for p, prod in prices.items() if prod.listed_on <= anchor and prod.api_access),
        "contracts": sorted(c for c, con in contracts.items() if con.terms[0].recorded_on <= anchor),
        "vendors": sorted(state.vendor_dims.vendors),
        "business_units": sorted({c.business_unit for c in centers.values() if c.business_unit}),
    }
    return WorldPools(start, anchor, pools, {cc: spend.get(cc, 0.0) for cc in pools["cost_centers"]})


def _domain_values(domain: Domain, world: WorldPools) -> list[dict[str, Any]]:
    if isinstance(domain, Pick):
        return [{domain.param: v} for v in world.pools[domain.pool]]
    if isinstance(domain, OneOf):
        return [{domain.param: v} for v in domain.values]
    if isinstance(domain, DaySpan):
        out = []
        for span, offset in itertools.product(domain.spans, domain.end_offsets):
            day2 = world.anchor - dt.timedelta(days=offset)
            day1 = day2 - dt.timedelta(days=span)
            if day1 >= world.start:
                out.append({"day1": day1.isoformat(), "day2": day2.isoformat()})
        return out
    if isinstance(domain, SpendThreshold):
        spends = set(world.cost_center_spend.values())
        if not spends:
            return []
        lo, hi = min(spends), max(spends)
        first = int(lo // domain.step + 1) * domain.step
        return [{domain.param: x} for x in range(first, int(hi) + 1, domain.step) if lo < x < hi and x not in spends]
    raise TypeError(f"unknown sampling domain {domain!r}")


def candidates(t: Template, world: WorldPools) -> list[dict[str, Any]]:
    """Every parameter combination of a template in the world at T (before shuffling)."""
    combos: list[dict[str, Any]] = [{}]
    for domain in t.sampling:
        combos = [{**c, **v} for c in combos for v in _domain_values(domain, world)]
    return combos


# ---------------------------------------------------------------------------------------------------
# generation
# ---------------------------------------------------------------------------------------------------


@dataclass
class _TemplateDraw:
    """One template's shuffled candidates and what has been accepted from them."""

    template: Template
    pending: Iterator[dict[str, Any]]
    accepted: list[tuple[dict[str, Any], Value]]  # candidate parameters, gold at T
    degenerate: int = 0


@dataclass(frozen=True)
class GeneratedTaskSet:
    tasks: list[Task]
    seed: int
    degenerate: int  # tasks whose gold at T is zero or empty
    gold_at_anchor: dict[str, Any]  # task id -> gold at T (for reports and tests; never written with tasks)


def generate_task_set(
    records: Sequence[Mapping[str, Any]],
    *,
    world_id: str,
    anchor: Day | str,
    n: int = 180,
    task_seed: int = 0,
    templates: Sequence[Template] = TEMPLATES,
    format_version: int = 2,
    resolver: GoldResolver | None = None,
    per_template: int | None = None,
) -> GeneratedTaskSet:
    """The task set of a world at T (`anchor`); parameters come from the world as of T. Pass the
    `resolver` that will grade the set to fold the world at T once for both. `per_template` k: exactly k tasks
    of every template (`n` is then ignored; a template the world cannot ask k distinct times is an error),
    instead of `n` tasks by tier quota and template weight."""
    a = anchor if isinstance(anchor, dt.date) else dt.date.fromisoformat(anchor)
    if not records:
        raise TaskSetError("the ledger is empty: no world to ask about")
    start = dt.date.fromisoformat(records[0]["at"])
    if a < start:
        raise TaskSetError(f"T={a} is before the world's first day {start}")
    if n < 1:
        raise TaskSetError("a task set needs at least one task")
    resolver = resolver or GoldResolver(records, format_version=format_version)
    state = resolver.state(uniform_vintage(a), a)
    world = world_pools(state, a, start)
    seed = derive_seed(world_id, a, task_seed)
    rng = random.Random(seed)
    seen: set[str] = set()
    tasks: list[Task] = []
    golds: dict[str, Any] = {}
    degenerate = 0
    if per_template is not None and per_template < 1:
        raise TaskSetError("per_template must be at least 1")
    tiers = sorted({t.task_tier for t in templates})
    quota_of_tier = (tier_quotas(n) if per_template is None else
                     {tier: per_template * sum(t.task_tier == tier for t in templates) for tier in tiers})
    for tier, tier_n in quota_of_tier.items():
        in_tier = [t for t in templates if t.task_tier == tier]
        if not in_tier:
            raise TaskSetError(f"no template of task_tier {tier}")
        draws = [_TemplateDraw(t, iter(_shuffled(candidates(t, world), rng)), []) for t in in_tier]
        quotas = (largest_remainder(tier_n, [t.weight for t in in_tier]) if per_template is None
                  else [per_template] * len(in_tier))
        short: dict[str, int] = {}
        for draw, quota in zip(draws, quotas, strict=True):
            while len(draw.accepted) < quota and _draw_one(draw, state, a, seen, quota):
                pass
            if len(draw.accepted) < quota:
                if per_template is not None:  # no other template may stand in: each counts once per k
                    raise TaskSetError(f"world {world_id} at {a}: template {draw.template.template_id} can be "
                                       f"asked {len(draw.accepted)} distinct time(s), {per_template} requested "
                                       "(tasks.per_template)")
                short[draw.template.intent] = short.get(draw.template.intent, 0) + quota - len(draw.accepted)
        # A template that ran short hands its share to the tier's templates of the same intent first (the
        # intent mix stays close to the reference's), then to any template of the tier.
        for intent, missing in short.items():
            _fill(draws, _of_intent(intent), missing, state, a, seen)
        missing = tier_n - sum(len(d.accepted) for d in draws)
        if _fill(draws, lambda d: True, missing, state, a, seen) < missing:
            got = sum(len(d.accepted) for d in draws)
            raise TaskSetError(f"world {world_id} at {a}: only {got} distinct task_tier {tier} tasks can be "
                               f"asked, {tier_n} requested")
        for draw in draws:
            degenerate += draw.degenerate
            for params, value in draw.accepted:
                task_id = f"q{len(tasks) + 1:03d}"
                tasks.append(Task(task_id, world_id, a.isoformat(), draw.template.template_id, params,
                                  draw.template.render(params)))
                golds[task_id] = value
    return GeneratedTaskSet(tasks, seed, degenerate, golds)


def _of_intent(intent: str) -> Callable[[_TemplateDraw], bool]:
    return lambda d: d.template.intent == intent


def _fill(draws: Sequence[_TemplateDraw], eligible: Callable[[_TemplateDraw], bool], missing: int,
          state: WorldState, anchor: Day, seen: set[str]) -> int:
    """Draw up to `missing` more tasks from the eligible templates in turn; returns how many were drawn."""
    drawn = 0
    active = [d for d in draws if eligible(d)]
    while drawn < missing and active:
        still = []
        for draw in active:
            if drawn < missing and _draw_one(draw, state, anchor, seen, len(draw.accepted) + 1):
                drawn += 1
                still.append(draw)
        active = still
    return drawn


def _draw_one(draw: _TemplateDraw, state: WorldState, anchor: Day, seen: set[str], target: int) -> bool:
    """Accept the next acceptable candidate of a template; False when it has none left."""
    t = draw.template
    for params in draw.pending:
        text = t.render(params)
        if text in seen:
            continue
        value = gold_from_state(state, t, params, anchor)
        if value is None:
            continue
        if t.answer.is_degenerate(value):
            if (draw.degenerate + 1) > target * DEGENERATE_SHARE:
                continue
            draw.degenerate += 1
        seen.add(text)
        draw.accepted.append((params, value))
        return True
    return False
