"""Asset checks. Each calls a verifying function of the core and reports what it found."""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.

import warnings

import dagster as dg

from churn_assets.assets.ledger import ledger
from churn_assets.assets.operational import operational_store_parity
from churn_assets.errors import UserFacingError
from churn_assets.partitions import world_partitions
from churn_assets.resources import StateResource
from churn_assets.world.ledger import LedgerError, load_ledger

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
            loaded = load_ledger(ledger_dir)
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


ALL_CHECKS = [ledger_hash_chain, operational_store_parity]
