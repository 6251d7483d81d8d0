"""The `ledger` asset (one partition per registered world, the world's whole hash-chained timeline) and its
blocking check `ledger_hash_chain`. Every event is checked for meaning as it is written (`world/meaning.py`: the
fold's invariants, references across entities); the manifest, and the materialization's metadata, record the
passed check.

Thin: the simulator (pure core) writes the ledger; this module finds the stored config, picks the
folder and turns the manifest into materialization metadata.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import warnings
from pathlib import Path
from typing import Any

import dagster as dg

from churn_assets.errors import UserFacingError
from churn_assets.orchestration.assets.common import require_world
from churn_assets.orchestration.partitions import world_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.seal_key import seal_key
from churn_assets.world.config import WorldConfig
from churn_assets.world.ledger import LEDGER_FILE, LedgerError, LedgerManifest, load_ledger
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
    config = require_world(state, world_id)
    out_dir = state.ledger_dir(world_id)
    manifest = generate_ledger(config, out_dir, key=seal_key(state.paths.root))
    context.log.info(f"{world_id}: {manifest.count} events {manifest.first_day}..{manifest.last_day}")
    # Its head hash is its content (the hash chain): a regeneration that wrote the same events is the same data.
    return dg.MaterializeResult(metadata=ledger_metadata(config, manifest, out_dir),
                                data_version=dg.DataVersion(manifest.head_hash or ""))


def ledger_metadata(config: WorldConfig, manifest: LedgerManifest, out_dir: Path) -> dict[str, Any]:
    return {
        "dagster/row_count": manifest.count,
        "events_per_kind": dg.MetadataValue.json(manifest.counts_per_kind),
        "head_hash": dg.MetadataValue.text(manifest.head_hash or ""),
        "first_day": dg.MetadataValue.text(manifest.first_day or ""),
        "last_day": dg.MetadataValue.text(manifest.last_day or ""),
        "format_version": manifest.format_version,
        # the events' meaning was checked as they were written (`world/meaning.py`); loaders require it
        "meaning_check": dg.MetadataValue.json(manifest.meaning_check or {}),
        "world_id": dg.MetadataValue.text(config.world_id),
        "world_config_hash": dg.MetadataValue.text(config.config_hash),
        "world_config": dg.MetadataValue.json(config.data),
        "path": dg.MetadataValue.path(str(out_dir / LEDGER_FILE)),
    }


with warnings.catch_warnings():
    # Partitioned checks are "preview" in Dagster 1.13; they are what makes a check per world possible
    # (an unpartitioned check on a partitioned asset cannot tell which world it verifies).
    warnings.simplefilter("ignore", dg.PreviewWarning)

    @dg.asset_check(asset=ledger, partitions_def=world_partitions, blocking=True)
    def ledger_hash_chain(context: dg.AssetCheckExecutionContext, state: StateResource) -> dg.AssetCheckResult:
        """Re-reads the world's ledger from disk: schema, ordering, the hash chain, and the manifest's
        count, head hash, world id and config hash. Blocking: nothing downstream runs on a bad ledger."""
        world_id = context.partition_key
        ledger_dir = state.ledger_dir(world_id)
        try:
            loaded = load_ledger(ledger_dir, key=seal_key(state.paths.root))
        except LedgerError as e:
            return dg.AssetCheckResult(passed=False, metadata={"error": str(e), "line": e.line or 0})
        problems = []
        if not loaded.verified:
            problems.append(f"format {loaded.format_version} ledger has no hash chain")
        manifest = loaded.manifest
        if manifest is not None and manifest.world_id != world_id:
            problems.append(f"manifest names world {manifest.world_id}, not {world_id}")
        try:
            expected_hash = state.world_config(world_id).config_hash
        except UserFacingError as e:
            problems.append(str(e))
        else:
            if manifest is not None and manifest.world_config_hash != expected_hash:
                problems.append("manifest's world config hash differs from the stored config's")
        return dg.AssetCheckResult(
            passed=not problems,
            metadata={
                "events": loaded.count,
                "head_hash": dg.MetadataValue.text(loaded.head_hash or ""),
                "problems": dg.MetadataValue.json(problems),
            },
        )
