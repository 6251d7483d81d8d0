"""Production adapters: the same registry yields Dagster policies and the simulated schedule."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from churn_assets.freshness.adapters import (
    AUTOMATION_SENSOR_NAME,
    ENTITY_CLASS_TAG,
    apply_tiers,
    freshness_policy_for,
)
from churn_assets.freshness.planning import refresh_days
from churn_assets.freshness.policies import Tiered
from churn_assets.grounding.registry import load_registry


@dg.asset(tags={ENTITY_CLASS_TAG: "prices"})
def vendor_price_list() -> None:
    """A data engineer's own wall-clock asset caching list prices."""


@dg.asset(tags={ENTITY_CLASS_TAG: "assignments"})
def seat_assignments() -> None: ...


@dg.asset(tags={ENTITY_CLASS_TAG: "tickets"})
def ticket_feed() -> None: ...


@dg.asset
def untagged() -> None: ...


def _defs() -> dg.Definitions:
    return apply_tiers(dg.Definitions(assets=[vendor_price_list, seat_assignments, ticket_feed, untagged]),
                       load_registry())


def test_policies_follow_section_10_mapping() -> None:
    specs = {s.key.to_user_string(): s for s in _defs().resolve_all_asset_specs()}
    prices = specs["vendor_price_list"].freshness_policy
    assert prices.warn_window.to_timedelta() == dt.timedelta(days=7)
    assert prices.fail_window.to_timedelta() == dt.timedelta(days=8)
    hot = specs["seat_assignments"].freshness_policy
    assert hot.warn_window.to_timedelta() == dt.timedelta(days=1)
    assert hot.fail_window.to_timedelta() == dt.timedelta(days=2)
    assert specs["ticket_feed"].freshness_policy is None  # live: read at the source, never cached
    assert specs["untagged"].freshness_policy is None
    assert specs["vendor_price_list"].automation_condition is not None
    assert specs["untagged"].automation_condition is None
    assert specs["vendor_price_list"].tags["churnbench/freshness_tier"] == "warm"


def test_definitions_load_with_the_sensor() -> None:
    defs = _defs()
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_sensor_def(AUTOMATION_SENSOR_NAME) is not None


def test_same_registry_yields_policy_and_simulated_schedule() -> None:
    reg = load_registry()
    t_prime = dt.date(2024, 3, 1)
    t = t_prime + dt.timedelta(days=60)
    plan = refresh_days(reg, t_prime, t, Tiered())
    for c in reg.staged_classes:
        policy = freshness_policy_for(c)
        assert policy is not None
        period = {(b - a).days for a, b in zip(plan[c.name], plan[c.name][1:], strict=False)}
        # The simulated refresh period (TTL + 1 days) is the production fail window.
        assert period <= {c.ttl_days + 1}
        assert policy.fail_window.to_timedelta() == dt.timedelta(days=c.ttl_days + 1)


def test_automation_requests_missing_then_settles() -> None:
    defs = _defs()
    instance = dg.DagsterInstance.ephemeral()
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    requested = {k.to_user_string() for k in first.get_requested_partitions_by_asset_key() or {}} \
        if hasattr(first, "get_requested_partitions_by_asset_key") else None
    assert first.total_requested == 2  # the two cached classes; the live feed and the untagged asset are not
    if requested is not None:
        assert requested == {"vendor_price_list", "seat_assignments"}
    dg.materialize([vendor_price_list, seat_assignments], instance=instance)
    second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert second.total_requested == 0
