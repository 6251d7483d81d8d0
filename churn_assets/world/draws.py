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
    """Items drawn in proportion to fixed weights; add/remove is cheap, cumulative sums are lazy."""

    def __init__(self) -> None:
        self._items: dict[str, float] = {}
        self._keys: list[str] = []
        self._cum: list[float] = []
        self._dirty = False

    def add(self, key: str, weight: float) -> None:
        self._items[key] = weight
        self._dirty = True

    def discard(self, key: str) -> None:
        if self._items.pop(key, None) is not None:
            self._dirty = True

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def members(self) -> list[str]:
        self._refresh()
        return self._keys

    def _refresh(self) -> None:
        if self._dirty:
            # Sorted keys: the draw must not depend on insertion history, only on the pool's content.
            self._keys = sorted(self._items)
            self._cum = list(accumulate(self._items[k] for k in self._keys))
            self._dirty = False

    def pick(self, draws: Draws) -> str | None:
        self._refresh()
        if not self._keys:
            return None
        x = draws.random() * self._cum[-1]
        return self._keys[min(bisect.bisect_right(self._cum, x), len(self._keys) - 1)]
