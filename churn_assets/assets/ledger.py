"""The `ledger` asset: one partition per registered world, the world's whole hash-chained timeline.

Thin: the simulator (pure core) writes the ledger; this module finds the stored config, picks the
folder and turns the manifest into materialization metadata.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
from pathlib import Path

import dagster as dg

from churn_assets.errors import UserFacingError
from churn_assets.partitions import world_partitions
from churn_assets.resources import StateResource
from churn_assets.world.config import WorldConfig
from churn_assets.world.ledger import LEDGER_FILE, LedgerManifest
from churn_assets.world.simulator import generate_ledger


@dg.asset(
    partitions_def=world_partitions,
    group_name="world",
    kinds={"python", "json"},
    description="The world's append-only, hash-chained event ledger (JSONL + manifest), simulated from "
                "its stored config. One partition per registered world (`churnbench worlds add`).",
)
def ledger(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    world_id = context.partition_key
    try:
        config = state.world_config(world_id)
    except UserFacingError as e:
        # A partition key without a stored config (e.g. added by hand in the UI): say so, never guess.
        raise dg.Failure(description=str(e), allow_retries=False) from None
    out_dir = state.ledger_dir(world_id)
    manifest = generate_ledger(config, out_dir)
    context.log.info(f"{world_id}: {manifest.count} events {manifest.first_day}..{manifest.last_day}")
    return dg.MaterializeResult(metadata=ledger_metadata(config, manifest, out_dir))


def ledger_metadata(config: WorldConfig, manifest: LedgerManifest, out_dir: Path) -> dict[str, object]:
    return {
        "dagster/row_count": manifest.count,
        "events_per_kind": dg.MetadataValue.json(manifest.counts_per_kind),
        "head_hash": dg.MetadataValue.text(manifest.head_hash or ""),
        "first_day": dg.MetadataValue.text(manifest.first_day or ""),
        "last_day": dg.MetadataValue.text(manifest.last_day or ""),
        "format_version": manifest.format_version,
        "world_id": dg.MetadataValue.text(config.world_id),
        "world_config_hash": dg.MetadataValue.text(config.config_hash),
        "world_config": dg.MetadataValue.json(config.data),
        "path": dg.MetadataValue.path(str(out_dir / LEDGER_FILE)),
    }
