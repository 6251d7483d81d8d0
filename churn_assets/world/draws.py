"""Seeded random draws built only on `random.Random.random()`.

Python guarantees that `random()` gives the same sequence for the same seed on every version and
platform; its other methods (and NumPy's generators) may change between releases. Building every draw
on `random()` keeps the ledger byte-identical across machines and library upgrades.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from itertools import accumulate
from typing import TypeVar

T = TypeVar("T")


class Draws:
    """A seeded source of the draws the simulator needs."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self.random = self._rng.random

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * self.random()

    def integer(self, low: int, high: int) -> int:
        """Uniform integer in [low, high]."""
        return low + min(int(self.random() * (high - low + 1)), high - low)

    def chance(self, p: float) -> bool:
        return self.random() < p

    def choice(self, items: Sequence[T]) -> T:
        return items[self.integer(0, len(items) - 1)]

    def poisson(self, mean: float) -> int:
        """Knuth's method (exact; the simulator's daily means are small)."""
        if mean <= 0:
            return 0
        if mean > 60:  # normal approximation keeps large means O(1); never used by the defaults
            return max(0, round(mean + math.sqrt(mean) * self.normal()))
        limit = math.exp(-mean)
        k, p = 0, self.random()
        while p > limit:
            k += 1
            p *= self.random()
        return k

    def normal(self) -> float:
        """Box-Muller."""
        u1 = self.random() or 1e-300
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * self.random())

    def exponential(self, mean: float) -> float:
        return -mean * math.log(1.0 - self.random())

    def pareto_weight(self, alpha: float, cap: float) -> float:
        """Heavy-tailed activity weight >= 1 (Pareto with scale 1), capped so no entity dominates."""
        weight: float = (1.0 - self.random()) ** (-1.0 / alpha)  # a positive base: a float, never complex
        return min(cap, weight)


class WeightedPool:
    """Items drawn in proportion to fixed weights, by a bisection of the cumulative weights of the sorted keys.

    The keys stay sorted (the draw must not depend on insertion history, only on the pool's content) and
    add/remove keep them so in place; the cumulative sums are brought up to date lazily, from the first key
    that changed only: the sums before it are the same float additions in the same order, so every draw is the
    one a full re-sort and re-sum would give, without its cost per change (which made a 100x world's ledger
    quadratic: every hire or offboarding followed by a draw re-sorted the whole pool of users).
    """

    def __init__(self) -> None:
        self._items: dict[str, float] = {}
        self._keys: list[str] = []  # sorted
        self._cum: list[float] = []  # _cum[i] = the weights of _keys[:i + 1] summed left to right
        self._stale_from = 0  # _cum[i] is stale for every i >= this

    def add(self, key: str, weight: float) -> None:
        i = bisect.bisect_left(self._keys, key)
        if key not in self._items:
            self._keys.insert(i, key)
            self._cum.insert(i, 0.0)
        self._items[key] = weight
        self._stale_from = min(self._stale_from, i)

    def discard(self, key: str) -> None:
        if self._items.pop(key, None) is not None:
            i = bisect.bisect_left(self._keys, key)
            del self._keys[i]
            del self._cum[i]
            self._stale_from = min(self._stale_from, i)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def members(self) -> list[str]:
        """The keys, sorted (a copy: the pool may change while the caller walks them)."""
        return list(self._keys)

    def _refresh(self) -> None:
        i = self._stale_from
        if i < len(self._keys):
            weights = map(self._items.__getitem__, self._keys[i:])
            self._cum[i:] = accumulate(weights, initial=self._cum[i - 1]) if i else accumulate(weights)
            if i:
                del self._cum[i]  # `initial` comes first: the sum before the first stale key
        self._stale_from = len(self._keys)

    def pick(self, draws: Draws) -> str | None:
        self._refresh()
        if not self._keys:
            return None
        x = draws.random() * self._cum[-1]
        return self._keys[min(bisect.bisect_right(self._cum, x), len(self._keys) - 1)]
