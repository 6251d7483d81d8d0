"""Issue 35: results sealed, the Dagster run of each attempt, and no figures on a row that is not complete.

- `seal` (jsonb): the SHA-256 of each results file, per results folder of the run (`evaluation/seals.py`:
  `{folder name: {file: sha256}}`), written when the run completes; rows written before have none (NULL:
  `verify-results` says the run is unsealed).
- `dagster_run_id` (text): the Dagster run of the latest attempt, which the dead-run reaper records failed when it
  records the row failed (`orchestration/dead_runs.py`).
- A row that is not `complete` keeps no figures: a run started again over a complete row (its folder removed) or a
  failed attempt used to keep the figures of an earlier attempt, with no summary behind them; they are cleared.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

SCHEMA = "churnbench"
TABLE = "results_runs"
# The figures as of this revision (written out: a migration must not change when the code's lists do).
FIGURES = ("tasks", "accuracy", "correct", "freshness_error", "mixed_vintage_error", "unattributed_error",
           "reasoning_error", "parse_failure", "transport_failure", "budget_exhausted", "stale_answers", "exposure",
           "degenerate_exposure", "prediction", "mean_cost_units", "mean_latency_ms")


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("seal", postgresql.JSONB), schema=SCHEMA)
    op.add_column(TABLE, sa.Column("dagster_run_id", sa.Text), schema=SCHEMA)
    runs = sa.table(TABLE, *(sa.column(c) for c in ("status", *FIGURES)), schema=SCHEMA)
    op.execute(sa.update(runs).where(runs.c.status != "complete").values(dict.fromkeys(FIGURES)))


def downgrade() -> None:
    for column in ("dagster_run_id", "seal"):
        op.drop_column(TABLE, column, schema=SCHEMA)
