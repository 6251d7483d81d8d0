"""The `operational_store` asset (world-day partitioned), its parity check against the fold, and two checks
against the truth schema by another path.

Thin: the fold (`world/fold.py`) gives the state as of the day, `fabric/operational.py` turns it into
documents, `fabric/mongo.py` writes them into the day's database `<world>_<yyyymmdd>` (idempotently: a
database whose `_meta` names the same ledger head and document schema is left as it is), under the state
folder's lock of that day (`<world>/operational_store/<day>`, a Postgres advisory lock: `state_locks.py`).
The check reads every document back and compares it with a fresh projection of the fold, plus a few counts asked of the
server itself (active users, licenses of active users, open tickets) against the fold's query helpers.

`operational_store_matches_truth` compares every document with the same documents computed by SQL over
`<world>_truth` (`evaluation/independent/stores.py`, no fold). `saas_api_matches_truth` asks the SaaS API for
the same day (price list, every ticket, every product's utilization, a sample of users' entitlements, and a
user hired later, who must be unknown) and compares its answers with that SQL too. The SaaS API has no asset
(it serves from its own projection of the truth schema); its check lives here because an operational_store
partition is exactly a (world, day) whose live sources the benchmark reads: every scenario builds the one of
its T, so the API is checked on the days arms call it. Both are non-blocking (see `truth_parity.py`).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import datetime as dt
import warnings
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import dagster as dg

from churn_assets.evaluation.independent.stores import operational_problems, saas_problems
from churn_assets.fabric.mongo import (
    OperationalStoreError,
    read_collections,
    read_meta,
    require_complete,
    write_partition,
)
from churn_assets.fabric.operational import (
    COLLECTIONS,
    DEFAULT_WINDOW_DAYS,
    INDEXES,
    OPERATIONAL_SCHEMA_VERSION,
    diff_collections,
    document_counts,
    project_operational,
)
from churn_assets.fabric.saas_client import SaasClient
from churn_assets.fabric.saas_profiles import CHECK_PROFILE
from churn_assets.orchestration.assets.common import (
    problems_description,
    require_world_day,
    step_failure,
    user_errors,
    world_as_of,
    world_ledger,
)
from churn_assets.orchestration.assets.ledger import ledger
from churn_assets.orchestration.assets.truth_parity import not_checked, truth_parity
from churn_assets.orchestration.partitions import OF_THE_WORLD, world_day_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.services import ServiceError, mongo_client, saas_api_key
from churn_assets.state_locks import state_locks
from churn_assets.world.fold import active_users, assigned_licenses, open_tickets

MAX_PROBLEMS_SHOWN = 50


@lru_cache(maxsize=4)
def _client(url: str) -> Any:
    # One pymongo client per server per process: clients pool connections and start monitor threads, so
    # a client per partition would pay that for every day of a backfill.
    return mongo_client(url)


def content_key(head_hash: str, window_days: int) -> dict[str, Any]:
    """What identifies a partition's content: a stored `_meta` with the same key is not rewritten."""
    return {"schema_version": OPERATIONAL_SCHEMA_VERSION, "ledger_head_hash": head_hash, "window_days": window_days}


# ---------------------------------------------------------------------------------------------------
# Asset
# ---------------------------------------------------------------------------------------------------

@dg.asset(
    partitions_def=world_day_partitions,
    deps=[dg.AssetDep(ledger, partition_mapping=OF_THE_WORLD)],
    group_name="fabric",
    kinds={"mongodb", "python"},
    description="The operational store as of the day: MongoDB database <world>_<yyyymmdd> with collections "
                f"{', '.join(COLLECTIONS)} (utilization over the trailing {DEFAULT_WINDOW_DAYS} days) and "
                "their indexes; `_meta` is written last and marks the database complete.",
)
def operational_store(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    world_id, day, _ = require_world_day(state, context.partition_key)
    with user_errors():
        urls = state.service_urls()
    loaded = world_ledger(state, world_id)
    head_hash = loaded.head_hash or ""
    folded = world_as_of(loaded, day)
    collections = project_operational(folded, day, window_days=DEFAULT_WINDOW_DAYS)
    # One writer per day database: `write_partition` drops and rewrites a database whose `_meta` does not match,
    # and there is no rename to swap one in, so two processes building the same day would drop each other's
    # half-written collections. Under the lock the second finds the first's `_meta` and skips.
    lock = state.paths.lock_name(world_id, "operational_store", day.isoformat())
    try:
        with state_locks(state.paths).hold(lock, what=f"the operational store of {world_id} as of {day}",
                       on_wait=lambda: context.log.info(f"{world_id} {day}: another process is writing this "
                                                        "database; waiting for it")):
            written = write_partition(_client(urls.mongodb), world_id, day, collections, indexes=INDEXES,
                                      content_key=content_key(head_hash, DEFAULT_WINDOW_DAYS))
    except OperationalStoreError as e:
        raise step_failure(e) from None
    action = "unchanged (already complete)" if written.skipped else (
        "rewritten (a previous write was incomplete)" if written.rewrote_incomplete else "written")
    context.log.info(f"{written.database}: {action}, {sum(written.counts.values())} documents "
                     f"in {written.seconds:.2f} s")
    counts = document_counts(collections)
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(counts.values()),
            "documents_per_collection": dg.MetadataValue.json(counts),
            "database": dg.MetadataValue.text(written.database),
            "action": dg.MetadataValue.text(action),
            "window_days": DEFAULT_WINDOW_DAYS,
            "ledger_head_hash": dg.MetadataValue.text(head_hash),
            "write_seconds": round(written.seconds, 3),
        },
        # Same ledger head and document schema: byte-for-byte the same documents.
        data_version=dg.DataVersion(f"{OPERATIONAL_SCHEMA_VERSION}:{head_hash}:{day}"),
    )


# ---------------------------------------------------------------------------------------------------
# Check
# ---------------------------------------------------------------------------------------------------


def parity_problems(db: Any, expected: Mapping[str, list[dict[str, Any]]], folded: Any, day: dt.date,
                    head_hash: str) -> list[str]:
    """Everything in the stored database that differs from the fold as of `day` (empty: parity)."""
    problems: list[str] = []
    meta = read_meta(db) or {}
    if meta.get("ledger_head_hash") != head_hash:
        problems.append(f"_meta: ledger head {meta.get('ledger_head_hash')!r} is not the ledger's {head_hash!r}")
    stored = read_collections(db, COLLECTIONS)
    problems += diff_collections(expected, stored, limit=MAX_PROBLEMS_SHOWN)
    # Counts asked of the server itself (its filters, not ours), against the fold's own query helpers.
    server_counts = {
        "active users": (db.users.count_documents({"status": "active"}), len(active_users(folded, day))),
        "licenses of active users": (db.assignments.count_documents({"holder_active": True}),
                                     len(assigned_licenses(folded, day))),
        "open tickets": (db.tickets.count_documents({"status": {"$in": ["open", "in_progress"]}}),
                         len(open_tickets(folded, day))),
    }
    for what, (got, want) in server_counts.items():
        if got != want:
            problems.append(f"{what}: the store counts {got}, the fold {want}")
    return problems


with warnings.catch_warnings():
    # Partitioned checks are "preview" in Dagster 1.13; they let the check name the world and day it verifies.
    warnings.simplefilter("ignore", dg.PreviewWarning)

    @dg.asset_check(asset=operational_store, partitions_def=world_day_partitions, blocking=True)
    def operational_store_parity(context: dg.AssetCheckExecutionContext, state: StateResource
                                 ) -> dg.AssetCheckResult:
        """Every document of the day's database equals the projection of the fold as of the day, and the
        server's own counts (active users, licenses of active users, open tickets) equal the fold's."""
        world_id, day, _ = require_world_day(state, context.partition_key)
        urls = state.service_urls()
        client = _client(urls.mongodb)
        try:
            db = require_complete(client, world_id, day)
        except OperationalStoreError as e:
            return dg.AssetCheckResult(passed=False, description=str(e),
                                       metadata={"problems": dg.MetadataValue.json([str(e)])})
        loaded = world_ledger(state, world_id)
        folded = world_as_of(loaded, day)
        meta = read_meta(db)
        assert meta is not None  # require_complete read it
        expected = project_operational(folded, day, window_days=int(meta.get("window_days") or DEFAULT_WINDOW_DAYS))
        problems = parity_problems(db, expected, folded, day, loaded.head_hash or "")
        shown = problems[:MAX_PROBLEMS_SHOWN]
        return dg.AssetCheckResult(
            passed=not problems,
            description=problems_description(problems),
            metadata={
                "database": dg.MetadataValue.text(db.name),
                "documents_per_collection": dg.MetadataValue.json(document_counts(expected)),
                "problem_count": len(problems),
                "problems": dg.MetadataValue.json(shown),
            },
        )

    @dg.asset_check(asset=operational_store, partitions_def=world_day_partitions, blocking=False)
    def operational_store_matches_truth(context: dg.AssetCheckExecutionContext, state: StateResource
                                        ) -> dg.AssetCheckResult:
        """Every document of the day's database equals the documents computed by SQL over the world's truth
        schema (not through the fold), and `_meta` names the ledger head the truth schema holds."""
        world_id, day, _ = require_world_day(state, context.partition_key)
        try:
            db = require_complete(_client(state.service_urls().mongodb), world_id, day)
        except OperationalStoreError as e:
            return dg.AssetCheckResult(passed=False, description=str(e),
                                       metadata={"problems": dg.MetadataValue.json([str(e)])})
        window = int((read_meta(db) or {}).get("window_days") or DEFAULT_WINDOW_DAYS)
        return truth_parity(state, world_id, day, f"database {db.name}",
                            lambda _conn, truth: operational_problems(db, truth, window_days=window,
                                                                      limit=MAX_PROBLEMS_SHOWN),
                            database=dg.MetadataValue.text(db.name))

    @dg.asset_check(asset=operational_store, partitions_def=world_day_partitions, blocking=False)
    def saas_api_matches_truth(context: dg.AssetCheckExecutionContext, state: StateResource
                               ) -> dg.AssetCheckResult:
        """The SaaS API's answers as of the partition's day (price list, tickets, every product's utilization,
        a sample of users' entitlements, a 404 for a user hired later) equal SQL over the truth schema."""
        world_id, day, _ = require_world_day(state, context.partition_key)
        try:
            urls = state.service_urls()
            if urls.saas is None:
                return not_checked("no SaaS API is configured or running")
            client = SaasClient(urls.saas, saas_api_key(state.paths, CHECK_PROFILE, world_id=world_id))
        except ServiceError as e:
            return not_checked(str(e))
        with client:
            # An API that refuses or does not answer (`SaasError`, retries exhausted) is "not checked", as a
            # transport failure is never a wrong answer in the benchmark; a 404 for what the truth knows is a
            # difference (`saas_problems` names it).
            return truth_parity(state, world_id, day, f"the SaaS API at {urls.saas}",
                                lambda _conn, truth: saas_problems(client, truth),
                                after=lambda: {"saas_calls": client.stats.calls},
                                saas_url=dg.MetadataValue.text(urls.saas))
