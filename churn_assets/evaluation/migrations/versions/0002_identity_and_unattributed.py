"""Issue 19: the `unattributed_error` verdict, the degenerate exposure, and the identity version of a run.

- `unattributed_error` (integer): answers wrong at T that equal a served gold carrying no information
  (`evaluation/verdicts.py`); rows written before have none (NULL reads as "not counted then").
- `degenerate_exposure` (integer): the tasks whose gold differs under the served vintage only as an empty or
  unknown value (`evaluation/exposure.py`).
- `identity_version` (integer NOT NULL DEFAULT 1): what the run's experiment hash covers
  (`evaluation/results.py::IDENTITY_VERSION`); every existing row is of identity 1, which `results list` marks.
  NOT NULL with a server default, so the rows already there get 1 in the same statement.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

SCHEMA = "churnbench"
TABLE = "results_runs"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("unattributed_error", sa.Integer), schema=SCHEMA)
    op.add_column(TABLE, sa.Column("degenerate_exposure", sa.Integer), schema=SCHEMA)
    op.add_column(TABLE, sa.Column("identity_version", sa.Integer, nullable=False, server_default=sa.text("1")),
                  schema=SCHEMA)


def downgrade() -> None:
    for column in ("identity_version", "degenerate_exposure", "unattributed_error"):
        op.drop_column(TABLE, column, schema=SCHEMA)
