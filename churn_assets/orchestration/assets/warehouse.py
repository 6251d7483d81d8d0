"""Assets `warehouse_truth` and `warehouse_raw`: a world's ledger in Postgres, one partition per world.

Thin: the ledger is read through the verifying loader, the pure projections in `churn_assets/fabric/`
build the rows, and `fabric/postgres.py` loads them in one transaction per schema (a failed load leaves
the previous content). Both loads are idempotent: a schema that already holds this ledger head (and, for
raw, this projection version and calendar) is left as it is and the materialization says `skipped`.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
from typing import Any

import dagster as dg

from churn_assets.deployment import deployment
from churn_assets.fabric.postgres import LoadResult, connection, replace_tables, schema_name
from churn_assets.fabric.truth import load_truth
from churn_assets.fabric.warehouse_raw import META_TABLE, WorldInfo, project_raw
from churn_assets.orchestration.assets.common import require_world, user_errors, world_ledger
from churn_assets.orchestration.assets.ledger import ledger
from churn_assets.orchestration.partitions import world_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.world.config import WorldConfig
from churn_assets.world.ledger import LoadedLedger

WAREHOUSE_GROUP = "warehouse"


def world_info(config: WorldConfig, loaded: LoadedLedger) -> WorldInfo:
    """The raw layer's `world` row: the world's calendar; dim_date runs to the deployment calendar's end."""
    calendar_end = deployment().calendar.end
    return WorldInfo(world_id=config.world_id, calendar_start=config.start, calendar_end=config.end,
                     dates_through=max(config.end, calendar_end), head_hash=loaded.head_hash,
                     format_version=loaded.format_version)


def load_metadata(result: LoadResult, loaded: LoadedLedger) -> dict[str, Any]:
    return {
        "dagster/row_count": result.total_rows,
        "row_counts": dg.MetadataValue.json(result.row_counts),
        "schema": dg.MetadataValue.text(result.schema),
        "skipped": dg.MetadataValue.bool(result.skipped),
        "load_key": dg.MetadataValue.text(result.load_key),
        "head_hash": dg.MetadataValue.text(loaded.head_hash or ""),
        "seconds": dg.MetadataValue.float(round(result.seconds, 3)),
    }


@dg.asset(
    partitions_def=world_partitions,
    deps=[ledger],
    group_name=WAREHOUSE_GROUP,
    kinds={"python", "postgres"},
    description="The world's ledger in Postgres schema `<world>_truth` (table `events`, one row per event, "
                "and `ledger`, the manifest). Read by gold, checks and the SaaS mock; never by arms.",
)
def warehouse_truth(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    world_id = context.partition_key
    require_world(state, world_id)
    loaded = world_ledger(state, world_id)
    with user_errors(), connection(state.service_urls().warehouse, autocommit=True) as conn:
        result = load_truth(conn, world_id, loaded)
    context.log.info(f"{result.schema}: {'unchanged' if result.skipped else 'loaded'} "
                     f"{result.row_counts.get('events', 0)} events in {result.seconds:.1f}s")
    return dg.MaterializeResult(metadata=load_metadata(result, loaded), data_version=dg.DataVersion(result.load_key))


@dg.asset(
    partitions_def=world_partitions,
    deps=[ledger],
    group_name=WAREHOUSE_GROUP,
    kinds={"python", "postgres"},
    description="The raw projection of the world's ledger in schema `<world>_raw`: vendors, products, cost "
                "centers, users, memberships, licenses, assignments, prices, tickets, consumption and contract "
                "ids, each row with valid_from / valid_to. No contract terms (they live in the documents).",
)
def warehouse_raw(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    world_id = context.partition_key
    config = require_world(state, world_id)
    loaded = world_ledger(state, world_id)
    with user_errors():
        info = world_info(config, loaded)
        projection = project_raw(loaded.records, info)
        with connection(state.service_urls().warehouse, autocommit=True) as conn:
            result = replace_tables(conn, world_id=world_id, schema=schema_name(world_id, "raw"),
                                    tables=projection.table_data(), meta_table=META_TABLE,
                                    load_key=info.load_key())
    context.log.info(f"{result.schema}: {'unchanged' if result.skipped else 'loaded'} "
                     f"{result.total_rows} rows in {result.seconds:.1f}s")
    metadata = load_metadata(result, loaded)
    metadata["calendar"] = dg.MetadataValue.text(f"{info.calendar_start}..{info.calendar_end}")
    metadata["dates_through"] = dg.MetadataValue.text((info.dates_through or info.calendar_end).isoformat())
    # The load key names what the tables were made from (the ledger's head, the projection's format): its content.
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(result.load_key))
