"""The `naive` arm: every question answered from live sources as of T, never from staging.

Current users and licenses come from the Mongo partition of day T, history (holdings, memberships, prices,
vendors) from the dbt as-of views at T, contracts from the documents of day T, consumption from the
warehouse at T, utilization and tickets from the SaaS API at T (the router's `RoutingMode.LIVE` rules).
Its planned vintage is every class at T, so with the deterministic agent it answers every task equal to
gold at T (section 10, "Arm correctness"), at the price of a live read per question.
"""

from __future__ import annotations

import datetime as dt

from churn_assets.arms.base import RouterArm, Scenario
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.router import Router, RoutingMode, Sources
from churn_assets.world.events import ENTITY_CLASSES

Day = dt.date


def naive_vintage(t: Day) -> dict[str, Day]:
    """The naive arm's planned vintage: every class at T."""
    return dict.fromkeys(ENTITY_CLASSES, t)


class NaiveArm(RouterArm):
    name = "naive"

    def __init__(self, scenario: Scenario, registry: Registry, sources: Sources) -> None:
        served = naive_vintage(scenario.t)
        super().__init__(scenario, Router(registry, sources, t=scenario.t, served=served, mode=RoutingMode.LIVE))

    @property
    def planned_vintage(self) -> dict[str, Day]:
        return naive_vintage(self.scenario.t)
