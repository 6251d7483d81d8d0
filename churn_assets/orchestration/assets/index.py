"""The `vector_index` and `rag_index` assets (world-day partitioned): contract chunks and the RAG corpus in pgvector.

Thin: `grounding/vector_index.py` and `grounding/rag_corpus.py` chunk, serialise, embed what is new and
store; this module finds the day's documents (`contract_documents` partition) and the world's ledger,
opens the warehouse, and turns the build into metadata. Both share the process's one embedding model
(`grounding.embeddings.default_encoder`, loaded on first use).

- `vector_index[world, day]` is the cached copy of `contract_terms` (docs/rules.md, "Served
  vintage"): its refresh days are the days it was built. It re-embeds only chunks whose text is new.
- `rag_index[world, day]` is the classic-RAG arms' corpus built on that day, outside the registry: every
  record in it has data time = the day. Its check `rag_index_matches_truth` compares the records with SQL over
  the world's truth schema (`evaluation/independent/stores.py`, no fold; non-blocking, see `truth_parity.py`):
  one record per entity the truth knows on the day, and the facts each states.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import datetime as dt
import warnings
from typing import Any

import dagster as dg

from churn_assets.evaluation.independent.stores import rag_problems
from churn_assets.fabric.postgres import connection
from churn_assets.grounding.embeddings import default_encoder, model_load_seconds
from churn_assets.grounding.rag_corpus import CorpusBuild, build_rag_corpus
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.vector_index import CHUNKS_TABLE, IndexBuild, build_vector_index, staging_schema
from churn_assets.orchestration.assets.common import (
    require_world_day,
    step_failure,
    step_progress,
    user_errors,
    world_as_of,
    world_ledger,
)
from churn_assets.orchestration.assets.documents import contract_documents
from churn_assets.orchestration.assets.ledger import ledger
from churn_assets.orchestration.assets.truth_parity import truth_parity
from churn_assets.orchestration.partitions import OF_THE_WORLD, world_day_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.state import StatePaths
from contracts.store import DocumentStoreError, StoredDay, day_dir, read_day

GROUP = "grounding"
# The class this index caches (the registry says which: `staged: {index: vector_index}`), for its tier tags.
_CONTRACT_TERMS = next(c for c in load_registry().staged_classes if c.staged_index == "vector_index")


def day_documents(paths: StatePaths, world_id: str, day: dt.date) -> tuple[StoredDay, dict[str, str]]:
    """The stored documents of (world, day) as {contract id: Markdown}; a clear failure when missing."""
    try:
        stored = read_day(day_dir(paths.contracts_root(world_id), day))
        return stored, {cid: stored.markdown(cid) for cid in stored.contract_ids}
    except DocumentStoreError as e:
        raise step_failure(f"{e}: materialize contract_documents for world {world_id} and day "
                           f"{day.isoformat()} first") from None


def _seconds(seconds: dict[str, float]) -> dg.MetadataValue:
    return dg.MetadataValue.json({k: round(v, 3) for k, v in seconds.items()})


def index_metadata(build: IndexBuild) -> dict[str, Any]:
    schema = staging_schema(build.world_id)
    return {
        "dagster/row_count": build.chunks,
        "chunks_total": build.chunks,
        "unique_chunks": build.unique_chunks,
        "re_embedded": build.embedded,
        "reused": build.reused,
        "encoder_calls": build.encoder_calls,
        "documents": build.documents,
        "model": dg.MetadataValue.text(build.model),
        "content_version": dg.MetadataValue.text(build.content_version),
        "documents_manifest_sha256": dg.MetadataValue.text(build.source_version or ""),
        "table": dg.MetadataValue.text(f"{schema}.{CHUNKS_TABLE}"),
        "seconds": _seconds(build.seconds),
    }


@dg.asset(
    partitions_def=world_day_partitions,
    deps=[contract_documents],
    group_name=GROUP,
    kinds={"python", "postgres"},
    tags=_CONTRACT_TERMS.tier_tags,
    description=f"{_CONTRACT_TERMS.tier_sentence} Contract chunks as of the day, embedded with all-MiniLM-L6-v2 "
                "(offline) in pgvector "
                "(<world>_staging.vector_index_chunks + embeddings). Chunks carry a content hash, the "
                "contract id and the as-of day; a day re-embeds only chunks whose hash is new. The cached "
                "copy of contract_terms: a partition is a refresh on that day.",
)
def vector_index(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    world_id, day, _ = require_world_day(state, context.partition_key)
    stored, documents = day_documents(state.paths, world_id, day)
    encoder = default_encoder()
    with user_errors(), connection(state.service_urls().warehouse, autocommit=True) as conn:
        build = build_vector_index(conn, world_id, day, documents, encoder, source_version=stored.manifest.sha256,
                                   progress=lambda n: step_progress(context, "vector_index", world_id, day, n,
                                                                    "new chunks embedded"))
    context.log.info(f"{world_id} {day}: {build.chunks} chunks of {build.documents} documents, "
                     f"{build.embedded} embedded now ({build.encoder_calls} encoder calls), {build.reused} reused")
    metadata = index_metadata(build)
    if model_load_seconds() is not None:
        metadata["model_load_seconds"] = round(model_load_seconds() or 0.0, 2)
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(build.content_version))


def corpus_metadata(build: CorpusBuild) -> dict[str, Any]:
    return {
        "dagster/row_count": build.records,
        "records": build.records,
        "records_per_kind": dg.MetadataValue.json(build.kinds),
        "unique_texts": build.unique_texts,
        "re_embedded": build.embedded,
        "reused": build.reused,
        "encoder_calls": build.encoder_calls,
        "model": dg.MetadataValue.text(build.model),
        "data_time": dg.MetadataValue.text(build.day.isoformat()),
        "content_version": dg.MetadataValue.text(build.content_version),
        "source_version": dg.MetadataValue.text(build.source_version or ""),
        "table": dg.MetadataValue.text(f"{staging_schema(build.world_id)}.rag_corpus_records"),
        "seconds": _seconds(build.seconds),
    }


@dg.asset(
    partitions_def=world_day_partitions,
    # The index of the same day first: the corpus's contract-chunk records are the index's chunks, whose
    # embeddings (content-addressed, one table per world) the corpus then reuses instead of embedding them.
    deps=[contract_documents, vector_index, dg.AssetDep(ledger, partition_mapping=OF_THE_WORLD)],
    group_name=GROUP,
    kinds={"python", "postgres"},
    description="The classic-RAG corpus built on the day: one short fact record per user, license, product, "
                "vendor, cost center, ticket and contract chunk (the day's vector_index chunks), and usage per "
                "user x product over the last "
                "7/30/90 days, embedded in pgvector (<world>_staging.rag_corpus_records + embeddings). Outside "
                "the registry; data time = the day. Records whose text did not change reuse their embedding.",
)
def rag_index(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    world_id, day, _ = require_world_day(state, context.partition_key)
    paths = state.paths
    stored, documents = day_documents(paths, world_id, day)
    loaded = world_ledger(state, world_id)
    world = world_as_of(loaded, day)
    encoder = default_encoder()
    source_version = f"ledger:{loaded.head_hash or ''} documents:{stored.manifest.sha256}"
    with user_errors(), connection(state.service_urls().warehouse, autocommit=True) as conn:
        build = build_rag_corpus(conn, world_id, day, world, documents, encoder, source_version=source_version,
                                 progress=lambda n: step_progress(context, "rag_index", world_id, day, n,
                                                                  "new records embedded"))
    context.log.info(f"{world_id} {day}: {build.records} records, {build.embedded} embedded now "
                     f"({build.encoder_calls} encoder calls), {build.reused} reused")
    return dg.MaterializeResult(metadata=corpus_metadata(build), data_version=dg.DataVersion(build.content_version))


with warnings.catch_warnings():
    # Partitioned checks are "preview" in Dagster 1.13; they let the check name the world and day it verifies.
    warnings.simplefilter("ignore", dg.PreviewWarning)

    @dg.asset_check(asset=rag_index, partitions_def=world_day_partitions, blocking=False)
    def rag_index_matches_truth(context: dg.AssetCheckExecutionContext, state: StateResource) -> dg.AssetCheckResult:
        """The corpus built on the day holds one record per user, license, product, vendor, cost center, ticket,
        contract and used (user, product) pair the truth schema knows on that day, and each record states the
        truth's facts (status and dates, cost center, holder, prices, names and tiers, ticket status, usage per
        window), by SQL over the truth schema."""
        world_id, day, _ = require_world_day(state, context.partition_key)
        return truth_parity(state, world_id, day, "the RAG corpus", lambda conn, truth: rag_problems(conn, truth))
