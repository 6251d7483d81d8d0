"""The `naive` arm: every question answered from live sources as of T, never from staging.

Current users and licenses come from the Mongo partition of day T, history (holdings, memberships, prices,
vendors) from the dbt as-of views at T, contracts from the documents of day T, consumption from the
warehouse at T, utilization and tickets from the SaaS API at T (the router's `RoutingMode.LIVE` rules).
Its planned vintage is every class at T, so with the deterministic agent it answers every task equal to
gold at T (docs/rules.md, "Arm correctness"), at the price of a live read per question.
"""

from __future__ import annotations

from churn_assets.arms.base import RouterArm
from churn_assets.fabric.sources import Sources
from churn_assets.freshness.scenario import CONTRACT_DOCUMENTS, OPERATIONAL_STORE, ArmReads, Scenario
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.router import Router
from churn_assets.grounding.routes import RoutingMode
from churn_assets.world.calendar import Day
from churn_assets.world.events import ENTITY_CLASSES


def naive_vintage(t: Day) -> dict[str, Day]:
    """The naive arm's planned vintage: every class at T."""
    return dict.fromkeys(ENTITY_CLASSES, t)


# Live stores at T: Mongo and the documents of T (the as-of views are the world's dbt build).
NAIVE_READS = ArmReads(((OPERATIONAL_STORE, "t"), (CONTRACT_DOCUMENTS, "t")), lambda t_prime, t: naive_vintage(t))


class NaiveArm(RouterArm):
    name = "naive"

    def __init__(self, scenario: Scenario, registry: Registry, sources: Sources) -> None:
        served = naive_vintage(scenario.t)
        super().__init__(scenario, Router(registry, sources, t=scenario.t, served=served, mode=RoutingMode.LIVE))

    @property
    def planned_vintage(self) -> dict[str, Day]:
        return naive_vintage(self.scenario.t)
