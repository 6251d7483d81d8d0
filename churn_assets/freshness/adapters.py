"""Production adapters: the registry's tiers as Dagster freshness policies and automation.

This is the only core module that imports dagster (tests/test_layering.py allows exactly this). It
serves a data engineer's own *wall-clock* assets: tag an asset with the entity class it caches,

    @dg.asset(tags={ENTITY_CLASS_TAG: "prices"})
    def my_price_cache(): ...

    defs = apply_tiers(dg.Definitions(assets=[my_price_cache]), load_registry())

and it gets the class's TTL as a `FreshnessPolicy` plus an automation condition that re-materializes
it when the policy fails or it is missing, evaluated by one automation sensor.

The mapping (docs/rules.md, "Staleness rule"): TTL k days -> `time_window(warn_window=k days, fail_window=k days + 1
day)`, and the trigger is the *fail* state. Dagster's evaluator compares the age with `>=`: the policy warns once the
age reaches k days (the TTL is used up: the simulated rule still serves it, age <= k) and fails once it reaches
k + 1 days (the simulated rule calls it stale, age > k, and refreshes). Refreshing on fail therefore refreshes
every k + 1 days, on the simulated planner's days (`freshness/schedule.py`); refreshing on warn would refresh
every k days. `tests/test_production_refresh_days.py` proves it with Dagster's own freshness daemon for TTL
0..30 over 90 days.

Never attach these to churnbench's own simulated-calendar assets: their "age" is measured in simulated
days by `freshness.planning`, not in wall-clock time.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from churn_assets.grounding.registry import ENTITY_CLASS_TAG, EntityClass, Registry

__all__ = [
    "AUTOMATION_SENSOR_NAME",
    "ENTITY_CLASS_TAG",
    "apply_tiers",
    "freshness_policy_for",
    "refresh_when_due",
    "tier_spec",
]
AUTOMATION_SENSOR_NAME = "churnbench_tier_refresh_sensor"


def freshness_policy_for(entity_class: EntityClass) -> dg.FreshnessPolicy | None:
    """TTL k days -> warn after k days, fail after k + 1 days; live classes are never cached (None)."""
    if entity_class.ttl_days is None:
        return None
    k = entity_class.ttl_days
    return dg.FreshnessPolicy.time_window(
        warn_window=dt.timedelta(days=k) if k > 0 else None,
        fail_window=dt.timedelta(days=k + 1),
    )


def refresh_when_due() -> dg.AutomationCondition[dg.AssetKey | dg.AssetCheckKey]:
    """Re-materialize once each time the freshness policy fails (age >= TTL + 1 days: stale under the staleness
    rule), or when the asset is missing. A warning (age >= TTL days) is shown, not acted on."""
    failed = dg.AutomationCondition.freshness_failed()
    # dagster 1.13 annotates `since_last_handled` for conditions on assets *or* checks only, and the freshness
    # conditions are on assets only: this documented composition cannot be typed as dagster writes it.
    due = failed.since_last_handled()  # type: ignore[misc]
    return (due | dg.AutomationCondition.missing().newly_true()) & ~dg.AutomationCondition.in_progress()


def tier_spec(spec: dg.AssetSpec, registry: Registry) -> dg.AssetSpec:
    """Attach the tier of the spec's tagged entity class (specs without the tag pass unchanged)."""
    class_name = spec.tags.get(ENTITY_CLASS_TAG)
    if class_name is None:
        return spec
    entity_class = registry[class_name]
    policy = freshness_policy_for(entity_class)
    if policy is None:
        return spec
    spec = dg.apply_freshness_policy(spec, policy, overwrite_existing=False)
    if spec.automation_condition is None:
        spec = spec.replace_attributes(automation_condition=refresh_when_due())
    return spec.merge_attributes(tags=entity_class.tier_tags)


def apply_tiers(defs: dg.Definitions, registry: Registry, *,
                default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING) -> dg.Definitions:
    """`defs` with tiered freshness policies and automation on every asset tagged with an entity class,
    plus the automation sensor that evaluates them (the daemon runs it; `dagster dev` includes one).
    `default_status`: STOPPED for a code location that must launch nothing until a user switches it on."""
    tiered = defs.map_asset_specs(func=lambda spec: tier_spec(spec, registry))
    tagged = [s.key for s in tiered.resolve_all_asset_specs() if ENTITY_CLASS_TAG in s.tags]
    if not tagged:
        return tiered
    sensor = dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR_NAME,
        target=dg.AssetSelection.assets(*tagged),
        default_status=default_status,
        description="Refreshes the assets tagged with a cached entity class when their tier's freshness policy "
                    "fails (or they are missing).",
    )
    return dg.Definitions.merge(tiered, dg.Definitions(sensors=[sensor]))
