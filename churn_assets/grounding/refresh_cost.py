"""What refreshes cost: the rows a plan's refreshes copied, read from the stores' own records.

A staged partition records its row count (`staged_partitions.row_count`); a vector index day its chunks
(`vector_index_builds.chunks`). The cost of a plan over (T', T] is the sum over its refresh days after T' (the
build on T' is every policy's, so it is left out): what the `budget` sweep puts against staleness.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from churn_assets.fabric.postgres import ident, relation_exists, schema_name
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.staging import META_TABLE as STAGED_META
from churn_assets.grounding.staging import STAGING_LAYER
from churn_assets.grounding.vector_index import BUILDS_TABLE


def refresh_rows(conn: psycopg.Connection[Any], world_id: str, refresh_days: Mapping[str, Sequence[dt.date]],
                 t_prime: dt.date) -> dict[str, int | None]:
    """Class -> rows copied by its refreshes after T' (None when a refreshed partition has no record: not built)."""
    from psycopg import sql

    registry = load_registry()
    schema = schema_name(world_id, STAGING_LAYER)
    out: dict[str, int | None] = {}
    for name, days in refresh_days.items():
        later = sorted(d for d in days if d > t_prime)
        entity = registry.classes[name]
        if not later:
            out[name] = 0
            continue
        if entity.staged_table is not None:
            table, query = STAGED_META, sql.SQL("SELECT refresh_day, row_count FROM {} WHERE staged_table = %s "
                                                "AND refresh_day = ANY(%s)").format(ident(schema, STAGED_META))
            params: tuple[Any, ...] = (entity.staged_table, later)
        else:
            table, query = BUILDS_TABLE, sql.SQL("SELECT day, chunks FROM {} WHERE day = ANY(%s)").format(
                ident(schema, BUILDS_TABLE))
            params = (later,)
        if not relation_exists(conn, schema, table):
            out[name] = None
            continue
        found = dict(conn.execute(query, params).fetchall())
        out[name] = sum(int(found[d]) for d in later) if all(d in found for d in later) else None
    return out
