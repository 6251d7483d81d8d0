"""Refresh policies on the simulated clock, and their scenario-key ids.

A policy decides, for every cached (non-live) entity class, on which days in (T', T] the class is
refreshed after the cache build on T'. Policies are plain values; each knows its own refresh days
(`refresh_days`), the TTL each class runs under (`effective_ttls`) and whether it needs change rates
measured on the ledger (`needs_rates`). `planning.refresh_days` runs them.

- `Tiered(ttl_overrides)`: the registry's TTLs (optionally overridden per class): refresh class C on day
  d when d - last_refresh(C) > TTL(C) (docs/rules.md, "Staleness rule").
- `Off`: nothing is refreshed after T'.
- `RateMatched(changes_per_ttl)`: TTL(C) = floor(changes_per_ttl / lambda_C), lambda_C the class's change
  rate measured on the ledger over [start, T'] only; a class that never changed gets a TTL longer than
  the calendar.
- `Budget(refreshes, allocation)`: a budget of refreshes per `BUDGET_PERIOD_DAYS` (30) days, split across
  classes `uniform`ly or `proportional`ly to lambda_C (Cho and Garcia-Molina's two allocations of a refresh
  budget); a class's share n_C (a real number) refreshes it every 30 / n_C days from T'.
- `BudgetedTtl(refreshes, shape)`: the same budget spent through integer TTLs under the staleness rule, shaped
  `rate`-matched or like the hand-set `tiers`, scaled so that the refreshes of the first 30 days after T' fit it.

Every policy's refresh days are a function of T', the registry, the world's calendar and, for rate-based
policies, rates measured on [start, T'] only: never of T, which only cuts the schedule off (a real schedule is
fixed when the cache is built and cannot know when a question will be asked; docs/decisions.md 206). With k
cached classes, `uniform:N` is one period of 30k/N days for every class (the `ttl:` policy giving every class
TTL 30k/N - 1 when that is a whole number), `proportional:N` a period proportional to 1 / lambda_C with the
budget spent exactly, `rate-matched:N` the `rate` policy's whole-day TTLs scaled to fit the budget, and
`tier-shaped:N` the hand-set tiers scaled.

Adding a policy: a class here with `policy_id`, `needs_rates` and `refresh_days` (which must not look at T
beyond cutting the schedule off: tests/test_refresh_planning.py checks every spelling), and its spelling in
`parse_policy` (docs/architecture.md, "How to add ...": a refresh policy).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.errors import UserFacingError
from churn_assets.freshness.schedule import periodic, ttl_schedule
from churn_assets.world.calendar import Day

if TYPE_CHECKING:
    from churn_assets.grounding.registry import Registry

Rates = Mapping[str, float]
# A budget policy's N is N refreshes per this many days from T' (the `budget` sweep's horizon: its T' is T - 29).
BUDGET_PERIOD_DAYS = 30


class PlanningError(UserFacingError, ValueError):
    """A scenario that cannot be planned (a rate-based policy without rates, an unknown class, ...)."""


def _hash6(params: dict[str, object]) -> str:
    return sha256_hex(canonical_json(params))[:6]


class Policy(abc.ABC):
    """A refresh policy: its id (in scenario keys) and, for a registry, the refresh days of each cached class."""

    @property
    def needs_rates(self) -> bool:
        """Whether its refresh days need change rates measured on the ledger over [start, T']."""
        return False

    @property
    @abc.abstractmethod
    def policy_id(self) -> str:
        """The id in scenario keys: a readable name, plus a short hash of the parameters when it has any."""

    @abc.abstractmethod
    def refresh_days(self, registry: Registry, t_prime: Day, t: Day, rates: Rates | None,
                     calendar_days: int) -> dict[str, list[Day]]:
        """For every cached class: the days its cache is built or refreshed, T' first, all within [T', T]."""

    def effective_ttls(self, registry: Registry, rates: Rates | None, calendar_days: int) -> dict[str, int | None]:
        """The TTL each cached class runs under (None: the policy is not TTL-driven)."""
        return {c.name: None for c in registry.staged_classes}

    def periods(self, registry: Registry, rates: Rates | None, calendar_days: int) -> dict[str, float | None]:
        """The refresh period of each cached class in days (None: never refreshed after T'); a TTL k refreshes
        every k + 1 days. The analytic anchor's I (docs/sweeps.md)."""
        return {c: None if k is None else float(k + 1)
                for c, k in self.effective_ttls(registry, rates, calendar_days).items()}

    def _require_rates(self, rates: Rates | None, what: str) -> Rates:
        if rates is None:
            raise PlanningError(f"policy {self.policy_id}: {what} measured change rates")
        return rates


class _TtlPolicy(Policy):
    """A policy that gives each class a TTL and refreshes it whenever it is stale under that TTL."""

    def refresh_days(self, registry: Registry, t_prime: Day, t: Day, rates: Rates | None,
                     calendar_days: int) -> dict[str, list[Day]]:
        ttls = self.effective_ttls(registry, rates, calendar_days)
        return {name: [t_prime, *ttl_schedule(t_prime, t, ttl)] for name, ttl in ttls.items() if ttl is not None}

    @abc.abstractmethod
    def effective_ttls(self, registry: Registry, rates: Rates | None, calendar_days: int) -> dict[str, int | None]:
        ...


@dataclass(frozen=True)
class Tiered(_TtlPolicy):
    ttl_overrides: dict[str, int] = field(default_factory=dict)

    @property
    def policy_id(self) -> str:
        if not self.ttl_overrides:
            return "tiered"
        return f"ttl-{_hash6({'ttl_overrides': self.ttl_overrides})}"

    @property
    def text(self) -> str:
        """The policy as `--policy` takes it (`ttl:prices=3`), where the id is a hash."""
        if not self.ttl_overrides:
            return "tiered"
        return "ttl:" + ",".join(f"{k}={v}" for k, v in sorted(self.ttl_overrides.items()))

    def effective_ttls(self, registry: Registry, rates: Rates | None, calendar_days: int) -> dict[str, int | None]:
        cached = [c.name for c in registry.staged_classes]
        unknown = sorted(set(self.ttl_overrides) - set(cached))
        if unknown:
            raise PlanningError(unknown_classes_message(self.text, unknown, cached))
        out: dict[str, int | None] = {}
        for c in registry.staged_classes:
            ttl = self.ttl_overrides.get(c.name, c.ttl_days)
            if ttl is None or ttl < 0:
                raise PlanningError(f"policy {self.policy_id}: TTL of {c.name} must be >= 0")
            out[c.name] = ttl
        return out


@dataclass(frozen=True)
class Off(Policy):
    @property
    def policy_id(self) -> str:
        return "off"

    def refresh_days(self, registry: Registry, t_prime: Day, t: Day, rates: Rates | None,
                     calendar_days: int) -> dict[str, list[Day]]:
        return {c.name: [t_prime] for c in registry.staged_classes}


@dataclass(frozen=True)
class RateMatched(_TtlPolicy):
    changes_per_ttl: float = 1.0  # expected class changes a cached copy may miss before a refresh

    @property
    def needs_rates(self) -> bool:
        return True

    @property
    def policy_id(self) -> str:
        return f"rate-{_hash6({'changes_per_ttl': self.changes_per_ttl})}"

    def effective_ttls(self, registry: Registry, rates: Rates | None, calendar_days: int) -> dict[str, int | None]:
        measured = self._require_rates(rates, "rate-matched TTLs need")
        out: dict[str, int | None] = {}
        for c in registry.staged_classes:
            lam = measured.get(c.name, 0.0)
            # A class that never changed: a TTL longer than the calendar (never refreshed).
            out[c.name] = calendar_days + 1 if lam <= 0 else max(0, math.floor(self.changes_per_ttl / lam))
        return out


@dataclass(frozen=True)
class Budget(Policy):
    """N refreshes per `BUDGET_PERIOD_DAYS` days, split across the cached classes: `uniform` (N / k each) or
    `proportional` to lambda_C; class C is refreshed every BUDGET_PERIOD_DAYS / n_C days from T' (never when
    n_C is 0). Not TTL-driven: the periods are real numbers, so the plan records no TTLs."""

    refreshes: int
    allocation: Literal["uniform", "proportional"] = "uniform"

    @property
    def needs_rates(self) -> bool:
        return self.allocation == "proportional"

    @property
    def policy_id(self) -> str:
        prefix = "uniform" if self.allocation == "uniform" else "prop"
        return f"{prefix}{self.refreshes}-{_hash6({'refreshes': self.refreshes, 'allocation': self.allocation})}"

    def refresh_days(self, registry: Registry, t_prime: Day, t: Day, rates: Rates | None,
                     calendar_days: int) -> dict[str, list[Day]]:
        periods = self.periods(registry, rates, calendar_days)
        return {c.name: [t_prime, *periodic(t_prime, t, periods[c.name])] for c in registry.staged_classes}

    def periods(self, registry: Registry, rates: Rates | None, calendar_days: int = 0) -> dict[str, float | None]:
        """Each cached class's refresh period in days (None: its share is 0, it is never refreshed)."""
        return {n: BUDGET_PERIOD_DAYS / share if share > 0 else None
                for n, share in self.shares(registry, rates).items()}

    def shares(self, registry: Registry, rates: Rates | None) -> dict[str, float]:
        """Refreshes per `BUDGET_PERIOD_DAYS` days of each class (real numbers adding up to the budget)."""
        names = [c.name for c in registry.staged_classes]
        if self.refreshes < 0:
            raise PlanningError(f"policy {self.policy_id}: the budget must be >= 0")
        if self.allocation == "uniform":
            weights = {n: 1.0 for n in names}
        else:
            measured = self._require_rates(rates, "proportional allocation needs")
            weights = {n: max(0.0, measured.get(n, 0.0)) for n in names}
        total = sum(weights.values())
        if total <= 0:
            return {n: 0.0 for n in names}
        return {n: self.refreshes * w / total for n, w in weights.items()}


@dataclass(frozen=True)
class BudgetedTtl(Policy):
    """A budget of refreshes per `BUDGET_PERIOD_DAYS` days spent through TTLs of a fixed shape (the `budget`
    sweep): the staleness rule decides the days, and the TTLs are the smallest scale of the shape whose
    refreshes over (T', T' + 30] fit the budget, so the schedule is fixed at T'. Shapes: `rate` (TTL =
    floor(scale / lambda_C), rate-matched) and `tiers` (the registry's refresh periods scaled: TTL =
    round((ttl_C + 1) * scale) - 1). Fixed at T', the scaled TTLs are the plan's effective TTLs."""

    refreshes: int
    shape: Literal["rate", "tiers"] = "tiers"

    @property
    def needs_rates(self) -> bool:
        return self.shape == "rate"

    @property
    def policy_id(self) -> str:
        prefix = "ratebudget" if self.shape == "rate" else "tierbudget"
        return f"{prefix}{self.refreshes}-{_hash6({'refreshes': self.refreshes, 'shape': self.shape})}"

    def ttls(self, registry: Registry, rates: Rates | None, calendar_days: int, scale: float) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in registry.staged_classes:
            if self.shape == "rate":
                lam = self._require_rates(rates, "rate-matched budgets need").get(c.name, 0.0)
                out[c.name] = calendar_days + 1 if lam <= 0 else max(0, math.floor(scale / lam))
            else:
                out[c.name] = max(0, round(((c.ttl_days or 0) + 1) * scale) - 1)
        return out

    def scaled_ttls(self, registry: Registry, rates: Rates | None, calendar_days: int) -> dict[str, int]:
        """The TTLs of the smallest scale whose refreshes over (T', T' + `BUDGET_PERIOD_DAYS`] fit the budget
        (the count depends only on the TTLs, not on T')."""
        if self.refreshes < 0:
            raise PlanningError(f"policy {self.policy_id}: the budget must be >= 0")

        def count(scale: float) -> int:  # a TTL k refreshes every k + 1 days (`ttl_schedule`)
            return sum(BUDGET_PERIOD_DAYS // (k + 1) for k in self.ttls(registry, rates, calendar_days, scale).values())

        # Refreshes fall as the scale grows (longer TTLs); bisect for the smallest scale within the budget.
        lo, hi = 0.0, 1.0
        while count(hi) > self.refreshes:
            lo, hi = hi, hi * 2
            if hi > 1e9:
                break
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if count(mid) <= self.refreshes else (mid, hi)
        return self.ttls(registry, rates, calendar_days, hi)

    def refresh_days(self, registry: Registry, t_prime: Day, t: Day, rates: Rates | None,
                     calendar_days: int) -> dict[str, list[Day]]:
        return {n: [t_prime, *ttl_schedule(t_prime, t, k)]
                for n, k in self.scaled_ttls(registry, rates, calendar_days).items()}

    def effective_ttls(self, registry: Registry, rates: Rates | None, calendar_days: int) -> dict[str, int | None]:
        return dict(self.scaled_ttls(registry, rates, calendar_days))


POLICY_SYNTAX = ("tiered, off, ttl:CLASS=DAYS[,..], rate[:CHANGES], uniform:N, proportional:N, rate-matched:N or "
                 "tier-shaped:N")


def unknown_classes_message(policy_text: str, unknown: list[str], cached: list[str]) -> str:
    return (f"policy {policy_text}: no cached class named {', '.join(unknown)} (the classes a TTL can be set for: "
            f"{', '.join(cached)})")


def check_policy_classes(policy: Policy, registry: Registry) -> None:
    """Refuse TTL overrides of classes the registry does not cache, naming the valid ones (before anything is
    registered or planned: `run`, `exposure` and sweeps call it where they parse `--policy`)."""
    if isinstance(policy, Tiered):
        cached = [c.name for c in registry.staged_classes]
        unknown = sorted(set(policy.ttl_overrides) - set(cached))
        if unknown:
            raise PlanningError(unknown_classes_message(policy.text, unknown, cached))


def check_policy_parameters(policy: Policy, text: str) -> None:
    """Refuse parameters outside their range before anything is registered (planning refuses them too, but only
    once a scenario is stored): a negative TTL or budget, a change count that is not a positive number."""
    problem = None
    if isinstance(policy, Tiered) and any(ttl < 0 for ttl in policy.ttl_overrides.values()):
        problem = "a TTL must be a whole number of days >= 0"
    elif isinstance(policy, Budget | BudgetedTtl) and policy.refreshes < 0:
        problem = "the budget N must be a whole number >= 0"
    elif isinstance(policy, RateMatched) and not (math.isfinite(policy.changes_per_ttl)
                                                  and policy.changes_per_ttl > 0):
        problem = "CHANGES must be a number > 0"
    if problem is not None:
        raise PlanningError(f"policy {text}: {problem} ({POLICY_SYNTAX})")


def parse_policy(text: str) -> Policy:
    """`tiered`, `off`, `ttl:prices=3,assignments=0`, `rate` / `rate:2.0`, `uniform:12`, `proportional:12`,
    `rate-matched:12`, `tier-shaped:12`."""
    name, _, arg = text.partition(":")
    try:
        if name == "tiered" and not arg:
            return Tiered()
        if name == "off" and not arg:
            return Off()
        if name == "ttl" and arg:
            ttls: dict[str, int] = {}
            for item in arg.split(","):
                cls, value = (part.strip() for part in item.split("=", 1))
                if cls in ttls:
                    raise UserFacingError(f"policy {text!r}: class {cls} is given twice ({ttls[cls]} and {value}); "
                                          "the second would silently win")
                ttls[cls] = int(value)
            return Tiered(ttls)
        if name == "rate":
            return RateMatched(float(arg) if arg else 1.0)
        if name in ("uniform", "proportional") and arg:
            return Budget(int(arg), "uniform" if name == "uniform" else "proportional")
        if name in ("rate-matched", "tier-shaped") and arg:
            return BudgetedTtl(int(arg), "rate" if name == "rate-matched" else "tiers")
    except ValueError:
        pass
    raise UserFacingError(f"policy {text!r}: expected {POLICY_SYNTAX}")
