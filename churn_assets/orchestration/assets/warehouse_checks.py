"""Asset checks of the warehouse, one result per world partition. Each calls a verifying function of
`churn_assets/fabric/` and reports what it found; every failure names the entity and the day.

- `warehouse_truth_matches_ledger` (on `warehouse_truth`): every stored event re-hashed and chained.
- `warehouse_raw_expectations` (on `warehouse_raw`): Great Expectations suites on every raw table.
- `<measure>_match_fold` (on the as-of views): the views agree with the fold of the ledger on the first,
  middle and last day of the world (and the paper's days when inside it): active users, assigned
  licenses, open tickets, spend per cost center (plus unallocated spend).

All are blocking: nothing downstream runs on a warehouse that disagrees with its ledger.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import datetime as dt
import warnings
from collections.abc import Sequence

import dagster as dg

from churn_assets.evaluation.paper import PAPER_DAYS  # compared too whenever a world's calendar has them
from churn_assets.fabric.postgres import connection
from churn_assets.fabric.quality import (
    Measures,
    Mismatch,
    compare_measures,
    fold_measures,
    parity_days,
    validate_raw,
    warehouse_measures,
)
from churn_assets.fabric.truth import verify_truth
from churn_assets.memo import Memo, memo
from churn_assets.orchestration.assets.common import require_world, user_errors, world_ledger
from churn_assets.orchestration.assets.warehouse import warehouse_raw, warehouse_truth
from churn_assets.orchestration.dbt_project import analytics_key
from churn_assets.orchestration.partitions import world_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.world.ledger import LoadedLedger
from churn_assets.world.packed import records_key

MAX_REPORTED = 20

# (ledger records, days) -> the fold's measures: the four parity checks of a run share one
FOLD_MEASURES: Memo[dict[dt.date, Measures]] = memo("assets.fold_measures", 1)


def _fold_measures(loaded: LoadedLedger, days: Sequence[dt.date]) -> dict[dt.date, Measures]:
    """The fold's measures, computed once per ledger (by value, `records_key`) and days for the four parity
    checks of a run."""
    key = (records_key(loaded.records), tuple(days))
    return FOLD_MEASURES.get_or_compute(key, lambda: fold_measures(loaded.records, days))


def _parity_result(state: StateResource, world_id: str, measure: str) -> dg.AssetCheckResult:
    config = require_world(state, world_id)
    loaded = world_ledger(state, world_id)
    with user_errors():
        days = parity_days(config.start, config.end, PAPER_DAYS)
        expected = {d: {measure: m[measure]} for d, m in _fold_measures(loaded, days).items()}
        with connection(state.service_urls().warehouse) as conn:
            actual = warehouse_measures(conn, world_id, days, [measure])
    mismatches = compare_measures(expected, actual)
    return _result(mismatches, days, f"{measure.replace('_', ' ')} match the fold")


def _result(mismatches: Sequence[Mismatch], days: Sequence[dt.date], what: str) -> dg.AssetCheckResult:
    shown = [str(m) for m in mismatches[:MAX_REPORTED]]
    description = f"{what} on {', '.join(d.isoformat() for d in days)}" if not mismatches else (
        f"{len(mismatches)} difference(s); first: {shown[0]}")
    return dg.AssetCheckResult(
        passed=not mismatches,
        description=description,
        metadata={
            "days": dg.MetadataValue.json([d.isoformat() for d in days]),
            "mismatch_count": len(mismatches),
            "mismatches": dg.MetadataValue.json(shown),
            "entities": dg.MetadataValue.json(sorted({m.entity for m in mismatches})[:MAX_REPORTED]),
        },
    )


with warnings.catch_warnings():
    # Partitioned checks are "preview" in Dagster 1.13; they are what makes a check per world possible.
    warnings.simplefilter("ignore", dg.PreviewWarning)

    @dg.asset_check(asset=warehouse_truth, partitions_def=world_partitions, blocking=True)
    def warehouse_truth_matches_ledger(context: dg.AssetCheckExecutionContext,
                                       state: StateResource) -> dg.AssetCheckResult:
        """Every event of `<world>_truth` re-hashed from its columns and chained, against the ledger file."""
        world_id = context.partition_key
        loaded = world_ledger(state, world_id)
        with user_errors(), connection(state.service_urls().warehouse) as conn:
            problems = verify_truth(conn, world_id, loaded, limit=MAX_REPORTED)
        shown = [str(p) for p in problems]
        return dg.AssetCheckResult(
            passed=not problems,
            description=f"{loaded.count} events match the ledger" if not problems else
            f"{len(problems)} problem(s); first: {shown[0]}",
            metadata={"events": loaded.count, "problems": dg.MetadataValue.json(shown),
                      "entities": dg.MetadataValue.json([p.entity_id for p in problems if p.entity_id]),
                      "days": dg.MetadataValue.json(sorted({p.day for p in problems if p.day}))},
        )

    @dg.asset_check(asset=warehouse_raw, partitions_def=world_partitions, blocking=True)
    def warehouse_raw_expectations(context: dg.AssetCheckExecutionContext,
                                   state: StateResource) -> dg.AssetCheckResult:
        """Great Expectations on every raw table: columns and types, non-null ids, non-negative money and
        counts, valid_from set and valid_to never before it."""
        world_id = context.partition_key
        with user_errors(), connection(state.service_urls().warehouse) as conn:
            validation = validate_raw(conn, world_id)
        shown = [str(p) for p in validation.problems[:MAX_REPORTED]]
        return dg.AssetCheckResult(
            passed=validation.passed,
            description=f"{validation.evaluated} expectations passed on {len(validation.rows)} tables"
            if validation.passed else f"{len(validation.problems)} failed; first: {shown[0]}",
            metadata={"evaluated": validation.evaluated, "failures": dg.MetadataValue.json(shown),
                      "rows": dg.MetadataValue.json(validation.rows)},
        )

    @dg.asset_check(asset=analytics_key("active_users_as_of"), partitions_def=world_partitions, blocking=True)
    def active_users_match_fold(context: dg.AssetCheckExecutionContext, state: StateResource) -> dg.AssetCheckResult:
        """`active_users_as_of` equals the fold's active users on each compared day."""
        return _parity_result(state, context.partition_key, "active_users")

    @dg.asset_check(asset=analytics_key("assignments_as_of"), partitions_def=world_partitions, blocking=True)
    def assigned_licenses_match_fold(context: dg.AssetCheckExecutionContext,
                                     state: StateResource) -> dg.AssetCheckResult:
        """`assignments_as_of` (held by active users) equals the fold's assigned licenses and holders."""
        return _parity_result(state, context.partition_key, "assigned_licenses")

    @dg.asset_check(asset=analytics_key("tickets_as_of"), partitions_def=world_partitions, blocking=True)
    def open_tickets_match_fold(context: dg.AssetCheckExecutionContext, state: StateResource) -> dg.AssetCheckResult:
        """`tickets_as_of` (not resolved) equals the fold's open tickets on each compared day."""
        return _parity_result(state, context.partition_key, "open_tickets")

    @dg.asset_check(asset=analytics_key("spend_by_cost_center_as_of"), partitions_def=world_partitions,
                    blocking=True)
    def spend_matches_fold(context: dg.AssetCheckExecutionContext, state: StateResource) -> dg.AssetCheckResult:
        """Spend per cost center (and unallocated spend) equals the fold's, to the cent, on each day."""
        return _parity_result(state, context.partition_key, "spend_by_cost_center")


# The four checks of the as-of views against the fold (run together by `churnbench project` and the tests).
PARITY_CHECKS = (active_users_match_fold, assigned_licenses_match_fold, open_tickets_match_fold, spend_matches_fold)
