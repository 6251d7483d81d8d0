"""Freshness tiers on your own assets: an example code location (listed in `workspace.yaml`) to copy.

A data engineer's caches run on the wall clock. Tag each asset with the entity class it caches; `apply_tiers`
gives it the registry's freshness policy for that class's tier (TTL k days: warns after k days, fails after
k + 1) and an automation condition that re-materializes it when the policy fails (or the asset is missing), and
adds the automation sensor that evaluates them. That is the simulated staleness rule on the wall clock: refresh
when the age exceeds the TTL, so the served age is at most k days and a refresh comes every k + 1 days.

The sensor starts STOPPED here, so opening the UI launches nothing: switch `churnbench_tier_refresh_sensor` on
(Automation page) to let it refresh these assets. A live class (`tickets`) gets no policy: it is read at the
source, never cached.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from churn_assets.freshness.adapters import ENTITY_CLASS_TAG, apply_tiers
from churn_assets.grounding.registry import load_registry

GROUP = "production_tiers"


def _fetched() -> dg.MaterializeResult:
    """What a real cache would copy from its source; here only when it was fetched (wall clock)."""
    return dg.MaterializeResult(metadata={"fetched_at": dg.MetadataValue.timestamp(dt.datetime.now(dt.UTC))})


@dg.asset(tags={ENTITY_CLASS_TAG: "assignments"}, group_name=GROUP, kinds={"python"},
          description="License seat assignments copied from the license manager (hot tier).")
def seat_assignments() -> dg.MaterializeResult:
    return _fetched()


@dg.asset(tags={ENTITY_CLASS_TAG: "prices"}, group_name=GROUP, kinds={"python"},
          description="Vendors' list prices copied from the procurement system (warm tier).")
def vendor_price_list() -> dg.MaterializeResult:
    return _fetched()


@dg.asset(tags={ENTITY_CLASS_TAG: "vendor_dims"}, group_name=GROUP, kinds={"python"},
          description="Vendor names and tiers copied from the vendor directory (cold tier).")
def vendor_directory() -> dg.MaterializeResult:
    return _fetched()


@dg.asset(tags={ENTITY_CLASS_TAG: "tickets"}, group_name=GROUP, kinds={"python"},
          description="Support tickets: a live class, read at the source on every question (no policy).")
def ticket_feed() -> dg.MaterializeResult:
    return _fetched()


defs = apply_tiers(dg.Definitions(assets=[seat_assignments, vendor_price_list, vendor_directory, ticket_feed]),
                   load_registry(), default_status=dg.DefaultSensorStatus.STOPPED)
