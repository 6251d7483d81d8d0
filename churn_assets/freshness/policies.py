"""Refresh policies on the simulated clock, and their scenario-key ids.

A policy decides, for every cached (non-live) entity class, on which days in (T', T] the class is
refreshed after the cache build on T'. Policies are plain values; `planning.refresh_days` runs them.

- `Tiered(ttl_overrides)`: the registry's TTLs (optionally overridden per class): refresh class C on day
  d when d - last_refresh(C) > TTL(C) (the staleness rule of ARCHITECTURE.md section 10).
- `Off`: nothing is refreshed after T'.
- `RateMatched(changes_per_ttl)`: TTL(C) = floor(changes_per_ttl / lambda_C), lambda_C the class's change
  rate measured on the ledger over [start, T'] only; a class that never changed gets a TTL longer than
  the calendar.
- `Budget(refreshes, allocation)`: a fixed number of refreshes over (T', T], split across classes
  `uniform`ly or `proportional`ly to lambda_C, each class's share spread evenly and ending at T.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal


def _hash6(params: dict[str, object]) -> str:
    blob = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:6]


@dataclass(frozen=True)
class Tiered:
    ttl_overrides: dict[str, int] = field(default_factory=dict)

    @property
    def policy_id(self) -> str:
        if not self.ttl_overrides:
            return "tiered"
        return f"ttl-{_hash6({'ttl_overrides': self.ttl_overrides})}"


@dataclass(frozen=True)
class Off:
    @property
    def policy_id(self) -> str:
        return "off"


@dataclass(frozen=True)
class RateMatched:
    changes_per_ttl: float = 1.0  # expected class changes a cached copy may miss before a refresh

    @property
    def policy_id(self) -> str:
        return f"rate-{_hash6({'changes_per_ttl': self.changes_per_ttl})}"


@dataclass(frozen=True)
class Budget:
    refreshes: int
    allocation: Literal["uniform", "proportional"] = "uniform"

    @property
    def policy_id(self) -> str:
        prefix = "uniform" if self.allocation == "uniform" else "prop"
        return f"{prefix}{self.refreshes}-{_hash6({'refreshes': self.refreshes, 'allocation': self.allocation})}"


Policy = Tiered | Off | RateMatched | Budget


def parse_policy(text: str) -> Policy:
    """`tiered`, `off`, `ttl:prices=3,assignments=0`, `rate` / `rate:2.0`, `uniform:12`, `proportional:12`."""
    from churn_assets.errors import UserFacingError

    name, _, arg = text.partition(":")
    try:
        if name == "tiered" and not arg:
            return Tiered()
        if name == "off" and not arg:
            return Off()
        if name == "ttl" and arg:
            pairs = dict(item.split("=", 1) for item in arg.split(","))
            return Tiered({k.strip(): int(v) for k, v in pairs.items()})
        if name == "rate":
            return RateMatched(float(arg) if arg else 1.0)
        if name in ("uniform", "proportional") and arg:
            return Budget(int(arg), "uniform" if name == "uniform" else "proportional")
    except ValueError:
        pass
    raise UserFacingError(
        f"policy {text!r}: expected tiered, off, ttl:CLASS=DAYS[,..], rate[:CHANGES], uniform:N or proportional:N")
