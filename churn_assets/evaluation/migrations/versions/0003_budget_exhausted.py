"""Issue 33: the `budget_exhausted` verdict (a model agent that asked to read past its per-task budget).

- `budget_exhausted` (integer): answers with no value because the agent's per-task read budget ran out
  (`evaluation/verdicts.py`); rows written before have none (NULL reads as "not counted then", as for
  `unattributed_error` in 0002).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

SCHEMA = "churnbench"
TABLE = "results_runs"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("budget_exhausted", sa.Integer), schema=SCHEMA)


def downgrade() -> None:
    op.drop_column(TABLE, "budget_exhausted", schema=SCHEMA)
