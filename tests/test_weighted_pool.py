"""`WeightedPool` keeps its sums up to date from the first changed key: every draw must be the one a full
re-sort and re-sum (the former implementation, kept here as the reference) gives, float for float."""

from __future__ import annotations

import bisect
import random
from itertools import accumulate

from churn_assets.world.draws import Draws, WeightedPool


class ReferencePool:
    def __init__(self) -> None:
        self.items: dict[str, float] = {}

    def pick(self, draws: Draws) -> str | None:
        keys = sorted(self.items)
        if not keys:
            return None
        cum = list(accumulate(self.items[k] for k in keys))
        x = draws.random() * cum[-1]
        return keys[min(bisect.bisect_right(cum, x), len(keys) - 1)]


def test_draws_equal_a_full_resort_after_any_adds_and_removes() -> None:
    rng = random.Random(7)
    pool, reference = WeightedPool(), ReferencePool()
    ours, theirs = Draws(11), Draws(11)
    picks = []
    for step in range(6000):
        op = rng.random()
        key = f"k{rng.randrange(400):04d}"
        if op < 0.45:  # new keys anywhere in the order, and re-weighted existing ones
            weight = rng.paretovariate(1.5)
            pool.add(key, weight)
            reference.items[key] = weight
        elif op < 0.7:
            pool.discard(key)
            reference.items.pop(key, None)
        else:
            picked = pool.pick(ours)
            assert picked == reference.pick(theirs), step
            picks.append(picked)
        assert len(pool) == len(reference.items) and (key in pool) == (key in reference.items)
    assert pool.members() == sorted(reference.items)
    assert len(set(picks)) > 100  # the walk drew across the pool, not one key


def test_members_is_a_copy_and_an_empty_pool_draws_nothing() -> None:
    pool = WeightedPool()
    assert pool.pick(Draws(1)) is None
    pool.add("b", 1.0)
    pool.add("a", 2.0)
    members = pool.members()
    pool.discard("a")
    assert members == ["a", "b"] and pool.members() == ["b"]
    assert pool.pick(Draws(1)) == "b"
