"""The `contract_documents` asset (world-day partitioned) and its parity check.

Thin: `contracts.build.build_day` folds, renders and writes a day; this module finds the world's ledger
and the day's folder (`<state>/worlds/<world>/contracts/<day>/`, docs/rules.md, "Per-world namespaces") and turns
the result into metadata. The check re-reads the documents from disk and compares the facts parsed back
from the Markdown with the fold as of the day (`contracts.parity`). `contract_documents_match_truth` compares
them with the facts computed by SQL over the world's truth schema instead (`evaluation/independent/stores.py`,
no fold; non-blocking, see `truth_parity.py`).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import warnings
from collections.abc import Mapping
from typing import Any

import dagster as dg

from churn_assets.evaluation.independent.stores import document_problems
from churn_assets.memo import Memo, memo
from churn_assets.orchestration.assets.common import problems_description, require_world_day, world_ledger
from churn_assets.orchestration.assets.ledger import ledger
from churn_assets.orchestration.assets.truth_parity import truth_parity
from churn_assets.orchestration.partitions import OF_THE_WORLD, world_day_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.world.packed import records_key
from contracts.build import build_day
from contracts.facts import contract_facts_as_of, document_records
from contracts.parity import check_parity
from contracts.store import DocumentStoreError, day_dir, read_day

MAX_PROBLEMS_SHOWN = 50  # a check on a badly broken day names the first problems, not thousands


# (ledger records, format) -> the records documents read: a backfill's days and their checks filter them once
DOCUMENT_RECORDS: Memo[tuple[Mapping[str, Any], ...]] = memo("assets.document_records", 1)


def ledger_document_records(state: StateResource, world_id: str) -> tuple[int, tuple[Mapping[str, Any], ...]]:
    """(format version, the records documents read) of the world's verified ledger, kept per process (by the
    records' value, `records_key`)."""
    loaded = world_ledger(state, world_id)
    fmt = loaded.format_version
    key = (records_key(loaded.records), fmt)
    return fmt, DOCUMENT_RECORDS.get_or_compute(
        key, lambda: tuple(document_records(loaded.records, format_version=fmt)))


@dg.asset(
    partitions_def=world_day_partitions,
    deps=[dg.AssetDep(ledger, partition_mapping=OF_THE_WORLD)],
    group_name="fabric",
    kinds={"python", "pdf"},
    description="Contract documents as of the day: one Markdown and one PDF per contract (vendor, term, "
                "expiry, annual value, committed seats, renewal terms and history) with a manifest of "
                "content hashes, under <state>/worlds/<world>/contracts/<day>/. The contract system of "
                "record: no other store holds contract terms.",
)
def contract_documents(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    world_id, day, _ = require_world_day(state, context.partition_key)
    fmt, records = ledger_document_records(state, world_id)
    built = build_day(records, world_id, day, state.paths.contracts_root(world_id), format_version=fmt)
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
        world_id, day, _ = require_world_day(state, context.partition_key)
        folder = day_dir(state.paths.contracts_root(world_id), day)
        try:
            stored = read_day(folder)
        except DocumentStoreError as e:
            return dg.AssetCheckResult(passed=False, description=str(e),
                                       metadata={"problems": dg.MetadataValue.json([str(e)])})
        fmt, records = ledger_document_records(state, world_id)
        expected = contract_facts_as_of(records, day, format_version=fmt)
        problems = [str(p) for p in check_parity(stored, expected, day)]
        shown = problems[:MAX_PROBLEMS_SHOWN]
        return dg.AssetCheckResult(
            passed=not problems,
            description=problems_description(problems),
            metadata={
                "documents": len(stored.manifest.documents),
                "problem_count": len(problems),
                "problems": dg.MetadataValue.json(shown),
                "path": dg.MetadataValue.path(str(folder)),
            },
        )

    @dg.asset_check(asset=contract_documents, partitions_def=world_day_partitions, blocking=False)
    def contract_documents_match_truth(context: dg.AssetCheckExecutionContext, state: StateResource
                                       ) -> dg.AssetCheckResult:
        """The facts parsed back from every Markdown document of the day equal the contract facts computed by
        SQL over the world's truth schema (terms, renewals, expiry, vendor name and tier, the vendor's products,
        status on the day), and every file matches its manifest hash."""
        world_id, day, _ = require_world_day(state, context.partition_key)
        folder = day_dir(state.paths.contracts_root(world_id), day)
        try:
            stored = read_day(folder)
        except DocumentStoreError as e:
            return dg.AssetCheckResult(passed=False, description=str(e),
                                       metadata={"problems": dg.MetadataValue.json([str(e)])})
        return truth_parity(state, world_id, day, f"the documents in {folder}",
                            lambda _conn, truth: document_problems(stored, truth),
                            documents=len(stored.manifest.documents), path=dg.MetadataValue.path(str(folder)))
