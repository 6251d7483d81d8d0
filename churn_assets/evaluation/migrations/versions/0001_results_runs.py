"""The results catalog as the hand-written DDL of issue 13 made it; adopts such a table when it exists.

Before migrations, `ensure_catalog` ran CREATE TABLE IF NOT EXISTS (plus ADD COLUMN IF NOT EXISTS for columns
that never came). A database holding that table but no version table reaches this revision first: the table
is kept, with every row, once it is found to have exactly this revision's columns (names, types, NOT NULL);
Alembic then records 0001 and later revisions apply to it as to any other. A table of another shape is refused
with the differences named, and nothing is changed.

A frozen copy: later changes to the model (`catalog_schema.runs_table()`) go into later revisions, never here.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from churn_assets.evaluation.catalog_schema import CatalogError

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

SCHEMA = "churnbench"
TABLE = "results_runs"
COMMENT = ("Every evaluation run: identity (experiment hash, code version, scenario), status "
           "(running/complete/failed), summary figures and its results files.")
_TYPES: dict[str, sa.types.TypeEngine[Any]] = {  # Postgres' format_type() spelling -> the SQLAlchemy type
    "bigint": sa.BigInteger(), "text": sa.Text(), "integer": sa.Integer(), "double precision": sa.Double(),
    "date": sa.Date(), "timestamp with time zone": sa.DateTime(timezone=True),
}
# (column, format_type, NOT NULL, server default), in the old DDL's order; the verdicts as they were then.
COLUMNS: tuple[tuple[str, str, bool, str | None], ...] = (
    ("run_id", "bigint", True, None),  # GENERATED ALWAYS AS IDENTITY PRIMARY KEY
    ("experiment_hash", "text", True, None),
    ("code_version", "text", True, None),
    ("world", "text", True, None),
    ("scenario_key", "text", True, None),
    ("arm", "text", True, None),
    ("policy", "text", True, None),
    ("t_prime", "date", True, None),
    ("t", "date", True, None),
    ("agent_id", "text", True, None),
    ("saas_profile", "text", True, None),
    ("status", "text", True, None),
    ("tasks", "integer", False, None),
    ("accuracy", "double precision", False, None),
    ("correct", "integer", False, None),
    ("freshness_error", "integer", False, None),
    ("mixed_vintage_error", "integer", False, None),
    ("reasoning_error", "integer", False, None),
    ("parse_failure", "integer", False, None),
    ("transport_failure", "integer", False, None),
    ("stale_answers", "integer", False, None),
    ("exposure", "integer", False, None),
    ("prediction", "double precision", False, None),
    ("mean_cost_units", "double precision", False, None),
    ("mean_latency_ms", "double precision", False, None),
    ("results_dir", "text", True, None),
    ("tasks_file", "text", False, None),
    ("stale_file", "text", False, None),
    ("summary_file", "text", False, None),
    ("timings_file", "text", False, None),
    ("error", "text", False, None),
    ("attempts", "integer", True, "1"),
    ("started_at", "timestamp with time zone", True, "now()"),
    ("finished_at", "timestamp with time zone", False, None),
)


def upgrade() -> None:
    bind = op.get_bind()
    if sa.inspect(bind).has_table(TABLE, schema=SCHEMA):
        _adopt(bind)
        return
    op.create_table(
        TABLE,
        *(sa.Column(name, _TYPES[sql_type], *([sa.Identity(always=True)] if name == "run_id" else []),
                    nullable=not not_null, server_default=sa.text(default) if default else None)
          for name, sql_type, not_null, default in COLUMNS),
        sa.PrimaryKeyConstraint("run_id", name="results_runs_pkey"),
        sa.UniqueConstraint("experiment_hash", "code_version", name="results_runs_experiment_hash_code_version_key"),
        sa.CheckConstraint("status IN ('running', 'complete', 'failed')", name="results_runs_status_check"),
        sa.CheckConstraint("status <> 'complete' OR (finished_at IS NOT NULL AND tasks IS NOT NULL)",
                           name="results_runs_check"),
        schema=SCHEMA,
        comment=COMMENT,
    )
    op.create_index("results_runs_world_ix", TABLE, ["world", "scenario_key"], schema=SCHEMA)


def _adopt(bind: sa.Connection) -> None:
    """Keep a table the hand-written DDL made, after checking that it has exactly this revision's columns."""
    rows = bind.execute(sa.text(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull FROM pg_attribute a "
        "WHERE a.attrelid = CAST(:table AS regclass) AND a.attnum > 0 AND NOT a.attisdropped"),
        {"table": f'"{SCHEMA}"."{TABLE}"'}).tuples()  # rows as plain tuples (the same result, typed)
    found: dict[str, tuple[str, bool]] = {name: (sql_type, not_null) for name, sql_type, not_null in rows}
    wanted = {name: (sql_type, not_null) for name, sql_type, not_null, _ in COLUMNS}
    problems = [f"{name} is missing" for name in wanted if name not in found]
    problems += [f"{name} is {_spell(found[name])}, not {_spell(want)}" for name, want in wanted.items()
                 if name in found and found[name] != want]
    problems += [f"{name} is not a catalog column" for name in found if name not in wanted]
    if problems:
        raise CatalogError(f"{SCHEMA}.{TABLE} exists but is not a results catalog this churnbench can adopt "
                           f"({'; '.join(problems)}); nothing was changed: rename or drop that table and run again")


def _spell(column: tuple[str, bool]) -> str:
    sql_type, not_null = column
    return f"{sql_type}{' NOT NULL' if not_null else ''}"


def downgrade() -> None:
    op.drop_table(TABLE, schema=SCHEMA)  # its index goes with it
