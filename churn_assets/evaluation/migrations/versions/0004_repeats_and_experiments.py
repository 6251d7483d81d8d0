"""Issue 33: a catalog row per repeat of an experiment, and a table of experiment summaries.

- `results_runs.repeat` (integer NOT NULL DEFAULT 0): which repeat of its experiment the row is (`--repeats K`:
  repeats 0..K-1, each its own results folder). Every existing row is repeat 0 (a single run is the first repeat
  of its experiment), filled by the server default in the same statement. The row's key becomes
  (experiment hash, code version, repeat): the unique constraint is replaced.
- `results_experiments`: one row per experiment, code version and number of repeats summarized (K = 3 and a
  later K = 5 of one experiment are two rows): mean accuracy with its 90% interval, pass^K, pass@K, answer
  stability, mean stale answers, and the whole summary as JSON (`evaluation/repeats.py`).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

SCHEMA = "churnbench"
TABLE = "results_runs"
EXPERIMENTS = "results_experiments"
OLD_KEY = "results_runs_experiment_hash_code_version_key"
NEW_KEY = "results_runs_experiment_hash_code_version_repeat_key"
COMMENT = ("Every experiment's summary over its repeats: mean accuracy and 90% interval, pass^K, pass@K, answer "
           "stability, per task the K verdicts (summary JSON).")


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("repeat", sa.Integer, nullable=False, server_default=sa.text("0")), schema=SCHEMA)
    op.drop_constraint(OLD_KEY, TABLE, schema=SCHEMA, type_="unique")
    op.create_unique_constraint(NEW_KEY, TABLE, ["experiment_hash", "code_version", "repeat"], schema=SCHEMA)
    op.create_table(
        EXPERIMENTS,
        sa.Column("experiment_id", sa.BigInteger, sa.Identity(always=True)),
        sa.Column("experiment_hash", sa.Text, nullable=False),
        sa.Column("code_version", sa.Text, nullable=False),
        sa.Column("repeats", sa.Integer, nullable=False),
        sa.Column("world", sa.Text, nullable=False),
        sa.Column("scenario_key", sa.Text, nullable=False),
        sa.Column("arm", sa.Text, nullable=False),
        sa.Column("policy", sa.Text, nullable=False),
        sa.Column("t_prime", sa.Date, nullable=False),
        sa.Column("t", sa.Date, nullable=False),
        sa.Column("agent_id", sa.Text, nullable=False),
        sa.Column("saas_profile", sa.Text, nullable=False),
        sa.Column("tasks", sa.Integer, nullable=False),
        sa.Column("accuracy_mean", sa.Double),
        sa.Column("accuracy_low", sa.Double),
        sa.Column("accuracy_high", sa.Double),
        sa.Column("pass_hat_k", sa.Double),
        sa.Column("pass_at_k", sa.Double),
        sa.Column("stability", sa.Double),
        sa.Column("stale_answers_mean", sa.Double),
        sa.Column("summary", postgresql.JSONB, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("experiment_id", name="results_experiments_pkey"),
        sa.UniqueConstraint("experiment_hash", "code_version", "repeats",
                            name="results_experiments_experiment_hash_code_version_repeats_key"),
        sa.CheckConstraint("repeats >= 1", name="results_experiments_repeats_check"),
        schema=SCHEMA,
        comment=COMMENT,
    )
    op.create_index("results_experiments_world_ix", EXPERIMENTS, ["world", "scenario_key"], schema=SCHEMA)


def downgrade() -> None:
    op.drop_index("results_experiments_world_ix", EXPERIMENTS, schema=SCHEMA)
    op.drop_table(EXPERIMENTS, schema=SCHEMA)
    op.drop_constraint(NEW_KEY, TABLE, schema=SCHEMA, type_="unique")
    runs = sa.table(TABLE, sa.column("repeat", sa.Integer), schema=SCHEMA)
    op.execute(sa.delete(runs).where(runs.c.repeat > 0))  # the old key cannot hold two repeats of one run
    op.create_unique_constraint(OLD_KEY, TABLE, ["experiment_hash", "code_version"], schema=SCHEMA)
    op.drop_column(TABLE, "repeat", schema=SCHEMA)
