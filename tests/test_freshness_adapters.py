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


def test_policies_follow_the_staleness_rule_mapping() -> None:
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


def test_the_example_code_location_loads_with_tiers_and_a_stopped_sensor() -> None:
    import runpy
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    example = root / "examples" / "production_tiers" / "definitions.py"
    workspace = yaml.safe_load((root / "workspace.yaml").read_text())
    files = [e["python_file"] for e in workspace["load_from"] if "python_file" in e]
    assert {"relative_path": "examples/production_tiers/definitions.py", "attribute": "defs",
            "working_directory": ".", "location_name": "production_tiers"} in files
    defs = runpy.run_path(str(example))["defs"]
    dg.Definitions.validate_loadable(defs)
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    hot = specs["seat_assignments"]
    assert hot.freshness_policy.fail_window.to_timedelta() == dt.timedelta(days=2)
    assert hot.tags["churnbench/ttl_days"] == "1" and hot.tags["churnbench/freshness_tier"] == "hot"
    assert specs["ticket_feed"].freshness_policy is None and specs["ticket_feed"].automation_condition is None
    sensor = defs.resolve_sensor_def(AUTOMATION_SENSOR_NAME)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED  # opening the UI launches nothing


def test_the_automation_acts_on_fail_not_on_warn() -> None:
    from churn_assets.freshness.adapters import refresh_when_due

    labels = str(refresh_when_due())
    assert "freshness_failed" in labels and "freshness_warned" not in labels


def test_the_staged_caches_show_their_tier_without_a_wall_clock_policy() -> None:
    from churn_assets.orchestration.definitions import defs

    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    for c in load_registry().staged_classes:
        name = "vector_index" if c.staged_index == "vector_index" else f"staged_{c.name}"
        spec = specs[name]
        assert (spec.tags["churnbench/entity_class"], spec.tags["churnbench/freshness_tier"],
                spec.tags["churnbench/ttl_days"]) == (c.name, c.freshness_tier, str(c.ttl_days)), name
        assert f"TTL {c.ttl_days} day(s)" in (spec.description or "")
        # docs/rules.md, "No wall clock"
        assert spec.freshness_policy is None and spec.automation_condition is None
