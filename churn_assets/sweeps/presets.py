"""The sweep presets: named, documented configs of the one sweep job (`churnbench sweep --preset NAME`, or the
`sweep` job's Launchpad). Each builds a `SweepSpec` from a few arguments (seeds, world ids, a world config and
overrides); everything else is the preset's. One table, `PRESETS`; the CLI's choices, the Launchpad's field
documentation (docs/sweeps.md) reads it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from churn_assets.evaluation.paper import WINDOW_DAYS, WINDOWS, T
from churn_assets.sweeps.spec import SweepError, SweepSpec, WorldRecipe, WorldRef
from churn_assets.world.config import load_config

DEFAULT_SEED = 42
TTL_GRID = (0, 1, 2, 4, 7, 14, 30)
RATE_MULTIPLIERS = (0.5, 1.0, 2.0, 4.0)
TTL_GRID_GAPS = (28, 29)
TTL_GRID_SEEDS = (42, 7, 11)
BUDGETS = (4, 8, 16, 32)
BUDGET_GAP = 29  # T' = T - 29, the paper's binding D+28 window
BUDGET_ALLOCATIONS = ("uniform", "proportional", "rate-matched", "tier-shaped")
# The windows of arrival days (issue 34): the D+28 window (T' = T - 29, the 28 days ending at T), exposure-only;
# the budget sweep also evaluates every 7th of its days (T, T - 7, T - 14, T - 21) on the unlimited SaaS plan.
WINDOW_GAP = BUDGET_GAP
BUDGET_WINDOW_EVALUATE_EVERY = 7
SEEDS_DEFAULT = (42, 43, 44, 45, 46)
CACHE_AGE_GAPS = tuple(range(1, 36))
PARITY_GAPS = tuple(range(26, 32))  # the 2x2 around D+28 that docs/sweeps.md quotes beside the single figure
SMOKE_T = dt.date(2024, 1, 30)
SMOKE_DAYS = 30
REGRESSION_SEEDS = (42, 7)
# T' = 2024-01-02, the smoke preset's early T' (its inputs are shared), and T one day before the smoke T: a gap of
# 27 days, where a hot class's TTL 1 serves data 1 day old and TTL 3 serves it 3 days old. At gap 28 (and 29)
# TTL 1 and TTL 3 happen to serve the same day (28 is a multiple of both periods, 2 and 4), so the gate could
# not see the acceptance's degraded registry there.
REGRESSION_T = dt.date(2024, 1, 29)
REGRESSION_GAPS = (27,)


@dataclass(frozen=True)
class PresetArgs:
    """What a user may change in a preset: seeds (world recipes), world ids (instead of recipes), and the world
    config and overrides the recipes start from."""

    seeds: tuple[int, ...] = ()
    worlds: tuple[str, ...] = ()
    config_path: str | None = None
    overrides: tuple[str, ...] = ()

    def world_refs(self, default_seeds: Sequence[int], *, days: int | None = None) -> tuple[WorldRef, ...]:
        if self.worlds:
            return tuple(self.worlds)
        return tuple(WorldRecipe(s, self.config_path, self.overrides, days=days) for s in (self.seeds or default_seeds))


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str  # one line: what it measures
    build: Callable[[PresetArgs], SweepSpec]


def _arms() -> tuple[str, str]:
    from churn_assets.arms.registry import TIERED_ARM, UNTIERED_ARM

    return TIERED_ARM, UNTIERED_ARM


def cache_age(args: PresetArgs) -> SweepSpec:
    return SweepSpec("cache-age", args.world_refs([DEFAULT_SEED]), _arms(), ("tiered",), T, gaps=CACHE_AGE_GAPS,
                     description="grounding tiered and off at T = 2024-04-27, every gap T - T' from 1 to 35 days: "
                                 "stale answers, exposure and prediction against the gap, the served age of each "
                                 "class (the reference's Figure 2 sawtooth), and the 2x2 for gaps 26-31",
                     options={"parity_gaps": list(PARITY_GAPS)})


def uniform_ttl(days: int) -> str:
    """The policy giving every cached class one TTL."""
    from churn_assets.grounding.registry import load_registry

    return "ttl:" + ",".join(f"{c.name}={days}" for c in load_registry().staged_classes)


def _rate_recipe(seed: int, multiplier: float, args: PresetArgs) -> WorldRecipe:
    """The world config's daily rates (`rates_per_day`) times `multiplier`; day-0 sizes unchanged. x1 is the
    config itself (the same world other sweeps build)."""
    if multiplier == 1.0:
        return WorldRecipe(seed, args.config_path, args.overrides, label=f"seed {seed}, rates x1")
    base = load_config(args.config_path, seed=seed, overrides=list(args.overrides))
    rates = base.data["rates_per_day"]
    scaled = tuple(f"rates_per_day.{k}={round(float(v) * multiplier, 6)}" for k, v in sorted(rates.items()))
    name = f"{base.name}_x{str(multiplier).replace('.', '_').removesuffix('_0')}"[:31]
    return WorldRecipe(seed, args.config_path, (*args.overrides, *scaled), name=name,
                       label=f"seed {seed}, rates x{multiplier:g}")


def ttl_grid(args: PresetArgs) -> SweepSpec:
    if args.worlds:
        raise SweepError("ttl-grid makes its worlds from seeds and rate multipliers: give --seeds, not world ids")
    seeds = args.seeds or TTL_GRID_SEEDS
    worlds = tuple(_rate_recipe(s, m, args) for s in seeds for m in RATE_MULTIPLIERS)
    first_seed = tuple(range(len(RATE_MULTIPLIERS)))  # the worlds of the first seed are evaluated in full
    tiered, _ = _arms()
    return SweepSpec("ttl-grid", worlds, (tiered,), tuple(uniform_ttl(d) for d in TTL_GRID), T, gaps=TTL_GRID_GAPS,
                     exposure_only=True, evaluate_worlds=first_seed,
                     description="one TTL for every cached class (0-30 days) x the world's daily rates x0.5-x4 x "
                                 f"{len(seeds)} seeds at gaps 28 and 29, exposure and prediction from the ledger; the "
                                 "first seed's cells evaluated in full (stale answers must equal exposure); and "
                                 f"their means over the {WINDOW_DAYS} arrival days ending at T with T' = T - "
                                 f"{WINDOW_GAP} (exposure-only)",
                     options={"ttls": list(TTL_GRID), "multipliers": list(RATE_MULTIPLIERS)},
                     window_days=WINDOW_DAYS, window_gaps=(WINDOW_GAP,))


def budget(args: PresetArgs) -> SweepSpec:
    tiered, untiered = _arms()
    policies = (*tuple(f"{a}:{b}" for b in BUDGETS for a in BUDGET_ALLOCATIONS), "tiered")
    return SweepSpec("budget", args.world_refs([DEFAULT_SEED]), (tiered, untiered), policies, T,
                     gaps=(BUDGET_GAP,), saas_profile="unlimited",
                     description="T' = T - 29; budgets of 4, 8, 16 and 32 refreshes per 30 days from T' spent "
                                 "uniformly, proportionally to measured change rate, rate-matched and shaped like the "
                                 "hand-set tiers, beside the tiers themselves and no refresh: exposure over the "
                                 f"{WINDOW_DAYS} arrival days ending at T (= stale answers of the deterministic "
                                 "agent; every 7th day evaluated in full, on the unlimited SaaS plan) against refresh "
                                 "cost (refreshes, and rows copied by the refreshes planned to T)",
                     options={"budgets": list(BUDGETS), "allocations": list(BUDGET_ALLOCATIONS)},
                     window_days=WINDOW_DAYS, window_gaps=(WINDOW_GAP,),
                     window_evaluate_every=BUDGET_WINDOW_EVALUATE_EVERY)


def seeds(args: PresetArgs) -> SweepSpec:
    gaps = tuple(sorted((T - d).days for d in WINDOWS.values()))
    return SweepSpec("seeds", args.world_refs(SEEDS_DEFAULT), _arms(), ("tiered",), T, gaps=gaps,
                     description="the paper's 2x2 (D+1 and D+28, tiered and off) over seeds, with a bootstrap 90% "
                                 "interval over seeds of the off-minus-on difference (paired by seed)",
                     options={"windows": {k: (T - d).days for k, d in WINDOWS.items()}})


def smoke(args: PresetArgs) -> SweepSpec:
    """A small sweep on a 30-day world (the test budget): two arms, two T'."""
    tiered, _ = _arms()
    return SweepSpec("smoke", args.world_refs([DEFAULT_SEED], days=SMOKE_DAYS), (tiered, "naive"), ("tiered",),
                     SMOKE_T, gaps=(1, 28),
                     description="a 30-day world, grounding (tiered) and naive at T' = T - 1 and T - 28: a quick "
                                 "check that the sweep machinery works")


def regression(args: PresetArgs) -> SweepSpec:
    """The nightly regression (`churnbench regression`, the `regression` job): a fixed small grid whose figures a
    committed baseline pins. Its worlds are the smoke preset's 30-day worlds, so a state folder that ran the
    smoke sweep reuses their inputs."""
    from churn_assets.arms.registry import TIERED_ARM, UNTIERED_ARM

    return SweepSpec("regression", args.world_refs(REGRESSION_SEEDS, days=SMOKE_DAYS),
                     (TIERED_ARM, UNTIERED_ARM, "naive"), ("tiered",), REGRESSION_T, gaps=REGRESSION_GAPS,
                     description="the nightly regression: two 30-day worlds (seeds 42 and 7), grounding tiered and "
                                 "off and naive at T = 2024-01-29, T' = T - 27, deterministic agent; the regression "
                                 "gate compares its verdict counts, exposure and accuracy with "
                                 "baselines/regression.json")


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("cache-age", "stale answers, exposure and prediction against cache age (gaps 1-35), on and off",
           cache_age),
    Preset("ttl-grid", "exposure against one TTL for every class x change-rate multipliers x seeds", ttl_grid),
    Preset("budget", "stale answers over 28 arrival days against refresh cost for four ways of spending a refresh "
           "budget", budget),
    Preset("seeds", "the paper's 2x2 over seeds with a bootstrap interval of on versus off", seeds),
    Preset("smoke", "a 30-day world, two arms, two T' (about 2 minutes cold, seconds when reused)", smoke),
    Preset("regression", "the nightly regression: two 30-day worlds, grounding on and off and naive at T - 27, "
           "gated against baselines/regression.json", regression),
)}


def preset_spec(name: str, args: PresetArgs | None = None) -> SweepSpec:
    if name not in PRESETS:
        raise SweepError(f"unknown sweep preset {name!r} (presets: {', '.join(PRESETS)})")
    return PRESETS[name].build(args or PresetArgs())


def customize(spec: SweepSpec, *, arms: Sequence[str] = (), policies: Sequence[str] = (), t: dt.date | None = None,
              t_primes: Sequence[dt.date] = (), gaps: Sequence[int] = (), agent: str | None = None,
              saas_profile: str | None = None, repeats: int | None = None) -> SweepSpec:
    """A preset with some of its fields replaced (empty / None: the preset's own). Giving T' values or gaps
    replaces both of the preset's. A grid that differs from the preset's (arms, policies, T, T', agent) is a
    custom sweep: its id is `custom-<hash>` and its description says what its grid is, since the preset's text
    would describe cells that did not run. The SaaS profile alone keeps the preset's name: it is the plan the
    cells call the API on, not a cell of the grid (decision 189: the deterministic agent's figures are the
    same on every plan)."""
    changes: dict[str, Any] = {}  # field name -> value, checked by the dataclass on replace
    if arms:
        changes["arms"] = tuple(arms)
    if policies:
        changes["policies"] = tuple(policies)
    if t is not None:
        changes["t"] = t
    if t_primes or gaps:
        changes["t_primes"], changes["gaps"] = tuple(t_primes), tuple(gaps)
        changes["evaluate_gaps"] = ()
    if agent:
        changes["agent"] = agent
    if saas_profile:
        changes["saas_profile"] = saas_profile
    if repeats is not None and repeats != spec.repeats:
        changes["repeats"] = repeats
    if not changes:
        return spec
    changed = dataclasses.replace(spec, **changes)
    grid = ("arms", "policies", "t", "t_primes", "gaps", "evaluate_gaps", "agent")
    if any(getattr(changed, name) != getattr(spec, name) for name in grid):
        changed = dataclasses.replace(changed, custom=True)
        changed = dataclasses.replace(changed, description=changed.grid_sentence())
    return changed


def exposure_only_spec(spec: SweepSpec) -> SweepSpec:
    """The spec with its exposure-only cells only (no world evaluated in full): `churnbench sweep
    --exposure-only`. Refused for a preset without exposure-only cells (their stale answers need answers)."""
    if not spec.exposure_only:
        raise SweepError(f"sweep {spec.preset}: --exposure-only needs a preset with exposure-only cells "
                         "(ttl-grid); this one evaluates every cell")
    return dataclasses.replace(spec, evaluate_worlds=(), evaluate_gaps=())
