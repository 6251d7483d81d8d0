"""Removing catalog rows on a connection the caller owns: a world's (`worlds rm`, `gc`) or a sweep's scenarios'
(`churnbench sweep rm`), in the caller's transaction, so the rows go with the rest of what it removes.

The catalog may not exist yet (nothing was ever evaluated) or predate the experiments table (revision 0004): both
are found and skipped, never created here (`catalog_schema.ensure_catalog` is the one writer of the schema).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from churn_assets.evaluation.catalog_schema import (
    EXPERIMENTS_TABLE,
    RUNS_TABLE,
    experiments_table,
    regclass,
    runs_table,
)

if TYPE_CHECKING:
    import psycopg
    import sqlalchemy as sa


def _execute(conn: psycopg.Connection[Any], statement: sa.ClauseElement) -> psycopg.Cursor[Any]:
    """A Core statement on a psycopg 3 connection the caller owns: compiled for SQLAlchemy's psycopg dialect,
    whose `%(name)s` placeholders psycopg takes as they are (an `IN` list expanded into one placeholder per
    value: SQLAlchemy's post-compile parameters exist only when SQLAlchemy executes the statement itself)."""
    from sqlalchemy.dialects.postgresql.psycopg import dialect

    compiled = statement.compile(dialect=dialect(), compile_kwargs={"render_postcompile": True})
    return conn.execute(str(compiled).encode(), compiled.params)


def _exists_query() -> sa.Select[Any]:
    import sqlalchemy as sa

    return sa.select(sa.func.to_regclass(regclass(RUNS_TABLE)).is_not(None))


def catalog_exists(conn: psycopg.Connection[Any]) -> bool:
    row = _execute(conn, _exists_query()).fetchone()
    return row is not None and bool(row[0])


def catalog_worlds(conn: psycopg.Connection[Any]) -> set[str]:
    """Worlds with at least one catalog row (for `worlds rm` / `gc`)."""
    import sqlalchemy as sa

    if not catalog_exists(conn):
        return set()
    t = runs_table()
    return {r[0] for r in _execute(conn, sa.select(t.c.world).distinct())}


def _experiments_exist(conn: psycopg.Connection[Any]) -> bool:
    """Whether the experiments table exists (a catalog not yet migrated to revision 0004 has none)."""
    import sqlalchemy as sa

    row = _execute(conn, sa.select(sa.func.to_regclass(regclass(EXPERIMENTS_TABLE)).is_not(None))).fetchone()
    return row is not None and bool(row[0])


def delete_world_runs(conn: psycopg.Connection[Any], world: str) -> int:
    """Delete every catalog row of a world (its experiment summaries too); returns how many runs there were."""
    import sqlalchemy as sa

    if not catalog_exists(conn):
        return 0
    if _experiments_exist(conn):
        e = experiments_table()
        _execute(conn, sa.delete(e).where(e.c.world == world))
    t = runs_table()
    return _execute(conn, sa.delete(t).where(t.c.world == world)).rowcount


def delete_scenario_runs(conn: psycopg.Connection[Any], scenario_keys: Sequence[str]) -> int:
    """Delete the catalog rows of these scenarios (`churnbench sweep rm`); returns how many there were."""
    import sqlalchemy as sa

    if not catalog_exists(conn) or not scenario_keys:
        return 0
    if _experiments_exist(conn):
        e = experiments_table()
        _execute(conn, sa.delete(e).where(e.c.scenario_key.in_(list(scenario_keys))))
    t = runs_table()
    return _execute(conn, sa.delete(t).where(t.c.scenario_key.in_(list(scenario_keys)))).rowcount

