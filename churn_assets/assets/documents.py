"""The `contract_documents` asset (world x day) and its parity check.

Thin: `contracts.build.build_day` folds, renders and writes a day; this module finds the world's ledger
and the day's folder (`<state>/worlds/<world>/contracts/<day>/`, ARCHITECTURE.md section 10) and turns
the result into metadata. The check re-reads the documents from disk and compares the facts parsed back
from the Markdown with the fold as of the day (`contracts.parity`).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import datetime as dt
import warnings
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import dagster as dg

from churn_assets.assets.ledger import ledger
from churn_assets.errors import UserFacingError
from churn_assets.partitions import DAY_DIMENSION, WORLD_DIMENSION, world_day_partitions
from churn_assets.resources import StateResource
from churn_assets.state import StatePaths
from churn_assets.world.ledger import LEDGER_FILE, MANIFEST_FILE, LedgerError, load_ledger
from contracts.build import build_day
from contracts.facts import contract_facts_as_of, document_records
from contracts.parity import check_parity
from contracts.store import CONTRACTS_DIRNAME, DocumentStoreError, day_dir, read_day

MAX_PROBLEMS_SHOWN = 50  # a check on a badly broken day names the first problems, not thousands


def contracts_root(paths: StatePaths, world_id: str) -> Path:
    """`<state>/worlds/<world>/contracts`: one sub-folder per materialized day."""
    return paths.world_dir(world_id) / CONTRACTS_DIRNAME


def _world_and_day(partition_key: str) -> tuple[str, dt.date]:
    key = partition_key if isinstance(partition_key, dg.MultiPartitionKey) \
        else world_day_partitions.get_partition_key_from_str(partition_key)
    dims = key.keys_by_dimension
    return dims[WORLD_DIMENSION], dt.date.fromisoformat(dims[DAY_DIMENSION])


@lru_cache(maxsize=4)
def _cached_document_records(ledger_dir: str, _fingerprint: tuple[int, int, bytes]
                             ) -> tuple[int, tuple[Mapping[str, Any], ...]]:
    loaded = load_ledger(ledger_dir)
    fmt = loaded.format_version
    return fmt, tuple(document_records(loaded.records, format_version=fmt))


def ledger_document_records(paths: StatePaths, world_id: str) -> tuple[int, tuple[Mapping[str, Any], ...]]:
    """(format version, the records documents read) of the world's ledger, verified by the loader.

    Loading and verifying a 180-day ledger takes about 2 s, more than rendering a day, so the result is
    kept per process while the files are unchanged (size, mtime and manifest bytes): a backfill of many
    days, or the check after the asset, reads the ledger once.
    """
    ledger_dir = paths.ledger_dir(world_id)
    try:
        stat = (ledger_dir / LEDGER_FILE).stat()
        fingerprint = (stat.st_mtime_ns, stat.st_size, (ledger_dir / MANIFEST_FILE).read_bytes())
    except FileNotFoundError:
        raise dg.Failure(
            description=f"world {world_id} has no ledger at {ledger_dir}: materialize its `ledger` partition "
                        "first (`churnbench worlds add` registers a world; its ledger is then materialized)",
            allow_retries=False) from None
    try:
        return _cached_document_records(str(ledger_dir), fingerprint)
    except LedgerError as e:
        raise dg.Failure(description=f"world {world_id}: the ledger is invalid: {e}", allow_retries=False) from None


with warnings.catch_warnings():
    # Beta in Dagster 1.13, and exactly the edge wanted: partition (world, day) reads the world's ledger.
    warnings.simplefilter("ignore", dg.BetaWarning)
    _LEDGER_OF_THE_WORLD = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name=WORLD_DIMENSION)


@dg.asset(
    partitions_def=world_day_partitions,
    deps=[dg.AssetDep(ledger, partition_mapping=_LEDGER_OF_THE_WORLD)],
    group_name="fabric",
    kinds={"python", "pdf"},
    description="Contract documents as of the day: one Markdown and one PDF per contract (vendor, term, "
                "expiry, annual value, committed seats, renewal terms and history) with a manifest of "
                "content hashes, under <state>/worlds/<world>/contracts/<day>/. The contract system of "
                "record: no other store holds contract terms.",
)
def contract_documents(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    world_id, day = _world_and_day(context.partition_key)
    paths = state.paths
    try:
        state.world_config(world_id)  # a world key without a stored config fails clearly, as the ledger does
    except UserFacingError as e:
        raise dg.Failure(description=str(e), allow_retries=False) from None
    fmt, records = ledger_document_records(paths, world_id)
    built = build_day(records, world_id, day, contracts_root(paths, world_id), format_version=fmt)
    changes = built.changes
    context.log.info(f"{world_id} {day}: {len(built.facts)} contracts, {len(changes.touched)} changed since "
                     f"the day before, in {sum(built.seconds.values()):.2f} s")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": len(built.facts),
            "documents": len(built.facts),
            "statuses": dg.MetadataValue.json(built.status_counts),
            "changed_vs_previous_day": len(changes.touched),
            "changes": dg.MetadataValue.json({
                "added": list(changes.added), "changed": list(changes.changed),
                "removed": list(changes.removed), "unchanged": changes.unchanged,
            }),
            "manifest_sha256": dg.MetadataValue.text(built.manifest.sha256),
            "path": dg.MetadataValue.path(str(built.path)),
            "seconds": dg.MetadataValue.json({k: round(v, 3) for k, v in built.seconds.items()}),
        },
        # Equal manifests mean byte-identical documents: Dagster can tell an unchanged day by this.
        data_version=dg.DataVersion(built.manifest.sha256),
    )


with warnings.catch_warnings():
    # Partitioned checks are "preview" in Dagster 1.13; they let the check name the world and day it verifies.
    warnings.simplefilter("ignore", dg.PreviewWarning)

    @dg.asset_check(asset=contract_documents, partitions_def=world_day_partitions, blocking=True)
    def contract_documents_parity(context: dg.AssetCheckExecutionContext, state: StateResource
                                  ) -> dg.AssetCheckResult:
        """The facts parsed back from every Markdown document on disk equal the fold as of the day, and
        every file matches its manifest hash. Blocking: nothing downstream reads a wrong document."""
        world_id, day = _world_and_day(context.partition_key)
        paths = state.paths
        folder = day_dir(contracts_root(paths, world_id), day)
        try:
            stored = read_day(folder)
        except DocumentStoreError as e:
            return dg.AssetCheckResult(passed=False, description=str(e),
                                       metadata={"problems": dg.MetadataValue.json([str(e)])})
        fmt, records = ledger_document_records(paths, world_id)
        expected = contract_facts_as_of(records, day, format_version=fmt)
        problems = [str(p) for p in check_parity(stored, expected, day)]
        shown = problems[:MAX_PROBLEMS_SHOWN]
        return dg.AssetCheckResult(
            passed=not problems,
            description="; ".join(shown[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
            if problems else None,
            metadata={
                "documents": len(stored.manifest.documents),
                "problem_count": len(problems),
                "problems": dg.MetadataValue.json(shown),
                "path": dg.MetadataValue.path(str(folder)),
            },
        )
