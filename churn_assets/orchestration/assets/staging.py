"""Staged caches as Dagster assets: `staged_<class>` per staged class, one partition per (world, day).

A materialized partition `staged_prices[(world, 2024-04-22)]` *is* a refresh of the prices cache on that
day (docs/rules.md, "Partitions"): it copies the class's source mart as it looked on the day into
`<world>_staging.<table>` tagged with `refresh_day` (the SQL and the reader contract are in
`grounding/staging.py`). Which partitions a scenario serves is decided by its refresh policy
(`freshness/`), never here.

Lineage: `ledger -> warehouse_raw -> analytics/<mart> -> staged_<class>`; each partition (world, d) depends
on the world's dbt build. Each asset has a blocking check that the partition equals its source as of d
and holds no date later than d. `contract_terms` is cached by `vector_index` (assets/index.py).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import datetime as dt
import warnings

import dagster as dg

from churn_assets.fabric.postgres import connection
from churn_assets.grounding.registry import EntityClass, load_registry
from churn_assets.grounding.staging import StagedSpec, staged_specs, verify_partition, write_partition
from churn_assets.orchestration.assets.common import require_world_day, user_errors
from churn_assets.orchestration.dbt_project import analytics_key
from churn_assets.orchestration.partitions import OF_THE_WORLD, world_day_partitions
from churn_assets.orchestration.resources import StateResource

GROUP = "grounding"
CHECK_NAME = "equals_source_as_of_day"
MAX_SHOWN = 20


def _partition(state: StateResource, partition_key: str) -> tuple[str, dt.date]:
    """(world, day) of a partition, refusing a malformed key, a world without a stored config or a day outside
    its calendar (the marts hold nothing after the world's last day: a "refresh" there would be a silent copy)."""
    world_id, day, _ = require_world_day(state, partition_key)
    return world_id, day


def _staged_asset(spec: StagedSpec, entity_class: EntityClass) -> dg.AssetsDefinition:
    # The tier is shown as tags and in the description; no wall-clock freshness policy or automation is attached
    # (docs/rules.md, "No wall clock"): these partitions are refreshes on the simulated calendar, planned
    # by `freshness/`.
    @dg.asset(
        name=spec.asset_name,
        tags=entity_class.tier_tags,
        partitions_def=world_day_partitions,
        deps=[dg.AssetDep(analytics_key(spec.source_relation), partition_mapping=OF_THE_WORLD)],
        group_name=GROUP,
        kinds={"postgres", "sql"},
        description=f"{entity_class.tier_sentence} "
                    f"Staged cache of entity class {spec.class_name}: partition (world, d) is the refresh on d, "
                    f"a copy of <world>_analytics.{spec.source_relation} as it looked on d (rows with "
                    f"valid_from <= d; later ends and dates stored as NULL) in <world>_staging.{spec.table} "
                    "with refresh_day = d.",
    )
    def staged(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
        world_id, day = _partition(state, context.partition_key)
        with user_errors(), connection(state.service_urls().warehouse, autocommit=True) as conn:
            written = write_partition(conn, world_id, spec, day)
        context.log.info(f"{written.location} [{day}]: {written.rows} rows from {written.source} "
                         f"in {written.seconds:.2f} s")
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": written.rows,
                "rows": written.rows,
                "source": dg.MetadataValue.text(written.source),
                "table": dg.MetadataValue.text(written.location),
                "refresh_day": dg.MetadataValue.text(day.isoformat()),
                "entity_class": dg.MetadataValue.text(spec.class_name),
                "content_hash": dg.MetadataValue.text(written.content_hash),
                "seconds": round(written.seconds, 3),
            },
            # Same rows, same version: a refresh that changed nothing does not look like new data downstream.
            data_version=dg.DataVersion(written.content_hash),
        )

    return staged


def _staged_check(spec: StagedSpec, asset: dg.AssetsDefinition) -> dg.AssetChecksDefinition:
    with warnings.catch_warnings():
        # Partitioned checks are "preview" in Dagster 1.13; they let the check name the world and day it verifies.
        warnings.simplefilter("ignore", dg.PreviewWarning)

        @dg.asset_check(asset=asset, name=CHECK_NAME, partitions_def=world_day_partitions, blocking=True,
                        description=f"The partition equals <world>_analytics.{spec.source_relation} as it looked "
                                    "on the refresh day, row for row, and holds no date later than that day.")
        def check(context: dg.AssetCheckExecutionContext, state: StateResource) -> dg.AssetCheckResult:
            world_id, day = _partition(state, context.partition_key)
            with connection(state.service_urls().warehouse, autocommit=True) as conn:
                found = verify_partition(conn, world_id, spec, day)
            return dg.AssetCheckResult(
                passed=found.passed,
                description="; ".join(found.problems) if found.problems else
                f"{found.rows} rows equal the source as of {day}; no date after {day}",
                metadata={
                    "rows": found.rows,
                    "expected_rows": found.expected_rows,
                    "content_hash": dg.MetadataValue.text(found.content_hash),
                    "expected_hash": dg.MetadataValue.text(found.expected_hash),
                    "late_dates": dg.MetadataValue.json(found.late_dates),
                    "only_staged": dg.MetadataValue.json(found.only_staged[:MAX_SHOWN]),
                    "only_source": dg.MetadataValue.json(found.only_source[:MAX_SHOWN]),
                    "problems": dg.MetadataValue.json(found.problems),
                },
            )

    return check


# One asset (and its check) per staged class of the registry: the registry is the list.
REGISTRY = load_registry()
STAGED_SPECS = staged_specs(REGISTRY)
STAGED_ASSETS = [_staged_asset(spec, REGISTRY[spec.class_name]) for spec in STAGED_SPECS]
STAGED_CHECKS = [_staged_check(spec, asset) for spec, asset in zip(STAGED_SPECS, STAGED_ASSETS, strict=True)]
