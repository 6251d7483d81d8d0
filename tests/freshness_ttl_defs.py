"""A code location for `test_production_refresh_days.py`: one wall-clock cache per TTL 0..30, each with the
production adapter's freshness policy and automation condition (what `apply_tiers` gives a tagged asset), the
policy taken from a registry class re-tiered to that TTL."""

from __future__ import annotations

import dataclasses

import dagster as dg

from churn_assets.freshness.adapters import freshness_policy_for, refresh_when_due
from churn_assets.grounding.registry import load_registry

TTLS = tuple(range(31))
_PRICES = load_registry()["prices"]


def asset_name(ttl: int) -> str:
    return f"cache_ttl_{ttl}"


def _cache(ttl: int) -> dg.AssetsDefinition:
    @dg.asset(name=asset_name(ttl), freshness_policy=freshness_policy_for(dataclasses.replace(_PRICES, ttl_days=ttl)),
              automation_condition=refresh_when_due())
    def cache() -> None:
        """A wall-clock cache refreshed by the adapter's automation."""

    return cache


CACHES = [_cache(k) for k in TTLS]
defs = dg.Definitions(assets=CACHES)
