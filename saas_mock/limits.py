"""Per-key rate limiting: a token bucket per API key.

The bucket holds up to `burst` tokens and refills at `rate_per_minute / 60` tokens a second; a request
takes one token or is refused with the seconds until one is there (sent as `Retry-After`, rounded up to a
whole second as HTTP requires, never 0). The server runs one event loop, so the buckets need no lock; a
lock is still taken because tests call them from threads.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from saas_mock.config import Plan


@dataclass
class Decision:
    allowed: bool
    remaining: int
    retry_after_s: float = 0.0

    @property
    def retry_after_header(self) -> str:
        return str(max(1, math.ceil(self.retry_after_s)))


class TokenBucket:
    def __init__(self, plan: Plan, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate_per_s = plan.rate_per_minute / 60.0
        self.capacity = float(plan.burst)
        self.tokens = self.capacity
        self.clock = clock
        self.updated = clock()

    def take(self) -> Decision:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate_per_s)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return Decision(True, int(self.tokens))
        return Decision(False, 0, (1.0 - self.tokens) / self.rate_per_s)


class RateLimiter:
    """One bucket per key id; keys on an unlimited plan are never refused."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self.refused = 0

    def check(self, key_id: str, plan: Plan) -> Decision:
        if not plan.limited:
            return Decision(True, -1)
        with self._lock:
            bucket = self._buckets.get(key_id)
            if bucket is None:
                bucket = self._buckets[key_id] = TokenBucket(plan, self._clock)
            decision = bucket.take()
            if not decision.allowed:
                self.refused += 1
            return decision
