"""What refreshes cost: the rows each planned refresh copies, counted on the sources the copies are made from.

A staged partition of class C on day d copies the rows of C's warehouse mart with `valid_from <= d` (`staging.
as_of_select`), so a refresh's cost is that count, taken by SQL on the mart (a scenario builds only the partitions
it serves, so the intermediate refreshes of a plan are counted, not read back; where a partition was built its
recorded `row_count` equals the count, which `tests/integration/test_sweep.py` checks). `contract_terms` is cached
as the vector index of the day's contract documents: its cost is the documents re-indexed (the day's manifest).
The cost of a plan over (T', T] sums its refresh days after T' (the build on T' is every policy's, so it is left
out): what the `budget` sweep puts against staleness.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from churn_assets.fabric.postgres import ident, schema_name
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.staging import SOURCE_LAYER, VALID_FROM
from contracts.store import DocumentStoreError, day_dir, read_day

CONTRACT_DOCUMENTS_UNIT = "documents"


def refresh_rows(conn: psycopg.Connection[Any], world_id: str, refresh_days: Mapping[str, Sequence[dt.date]],
                 t_prime: dt.date, contracts_root: Path) -> dict[str, int | None]:
    """Class -> rows (documents for an index-cached class) its refreshes after T' copy; None when a source
    needed for the count is missing (a documents day not materialized)."""
    registry = load_registry()
    out: dict[str, int | None] = {}
    for name, days in refresh_days.items():
        later = sorted(d for d in days if d > t_prime)
        entity = registry.classes[name]
        if not later:
            out[name] = 0
        elif entity.staged_table is not None:
            mart = ident(schema_name(world_id, SOURCE_LAYER), entity.source.relation)
            query = sql.SQL("SELECT count(*) FROM unnest(%s::date[]) AS d(day) JOIN {} AS m ON m.{} <= d.day").format(
                mart, ident(VALID_FROM))
            row = conn.execute(query, (later,)).fetchone()
            out[name] = int(row[0]) if row is not None else 0
        else:
            try:
                out[name] = sum(len(read_day(day_dir(contracts_root, d)).manifest.documents) for d in later)
            except DocumentStoreError:
                out[name] = None
    return out
