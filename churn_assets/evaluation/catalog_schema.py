"""The results catalog's schema: its two tables in SQLAlchemy Core and their Alembic migrations, run from code.

The catalog lives in the warehouse database but in a schema of its own (`churnbench`), which is no world's (world
schemas are `<world>_<layer>`, see `fabric/postgres.py`), so dropping a world's schemas never touches it. The rows
and what they mean are `catalog.py`'s; removing a world's or a sweep's rows on a caller's connection is
`catalog_removal.py`'s.

`runs_table()` and `experiments_table()` describe the newest revision. The schema itself is Alembic's: the scripts in
`migrations/` (shipped in the package, run programmatically, no alembic.ini), their version in
`churnbench.churnbench_alembic_version` (Dagster's own storage uses `alembic_version` and may share the database).
`ensure_catalog` creates the catalog, adopts a table made before migrations existed (revision 0001 checks it has
exactly its columns and keeps every row) and applies newer revisions, under an advisory lock so that concurrent
first runs wait for each other. SQLAlchemy and Alembic are imported inside the functions (together ~0.6 s):
importing this module costs nothing.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.verdicts import VERDICTS

if TYPE_CHECKING:
    import sqlalchemy as sa
    from alembic.config import Config

CATALOG_SCHEMA = "churnbench"
RUNS_TABLE = "results_runs"
EXPERIMENTS_TABLE = "results_experiments"
STATUSES = ("running", "complete", "failed")
# Alembic's version table, beside the catalog and under a name of its own: Dagster's storage keeps its
# migrations in `alembic_version` and may use the same database.
VERSION_TABLE = "churnbench_alembic_version"
# The newest script in migrations/versions; reading it here spares every call the import of Alembic
# (tests/test_catalog_migrations.py fails when a new script is added without moving this).
HEAD_REVISION = "0005"
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# The key of the old hand-written DDL's lock too, so a process of either version waits for the other.
LOCK_KEY = "churnbench results catalog"

TABLE_COMMENT = ("Every evaluation run: identity (experiment hash, code version, scenario), status "
                 "(running/complete/failed), summary figures and its results files.")
EXPERIMENTS_COMMENT = ("Every experiment's summary over its repeats: mean accuracy and 90% interval, pass^K, pass@K, "
                       "answer stability, per task the K verdicts (summary JSON).")
# The results files a row names, by name -> column.
FILE_COLUMNS = {"tasks": "tasks_file", "stale": "stale_file", "summary": "summary_file", "timings": "timings_file"}


class CatalogError(UserFacingError):
    """A catalog lookup that matched no run or more than one experiment, or a catalog this code cannot use."""




@functools.cache
def runs_table() -> sa.Table:
    """`churnbench.results_runs` as the newest revision leaves it (constraint names are the ones Postgres
    gave the hand-written DDL, so a catalog made by either is the same table)."""
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql

    metadata = sa.MetaData(schema=CATALOG_SCHEMA)
    statuses = ", ".join(f"'{s}'" for s in STATUSES)
    return sa.Table(
        RUNS_TABLE, metadata,
        *_experiment_column_defs("run_id"),
        *_scenario_column_defs(),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("tasks", sa.Integer),
        sa.Column("accuracy", sa.Double),
        *(sa.Column(v, sa.Integer) for v in VERDICTS),
        sa.Column("stale_answers", sa.Integer),
        sa.Column("exposure", sa.Integer),
        sa.Column("degenerate_exposure", sa.Integer),
        sa.Column("prediction", sa.Double),
        sa.Column("mean_cost_units", sa.Double),
        sa.Column("mean_latency_ms", sa.Double),
        sa.Column("results_dir", sa.Text, nullable=False),
        *(sa.Column(c, sa.Text) for c in FILE_COLUMNS.values()),
        sa.Column("error", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("identity_version", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("repeat", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("seal", postgresql.JSONB),
        sa.Column("dagster_run_id", sa.Text),
        *_keys(RUNS_TABLE, "run_id", "repeat"),
        sa.CheckConstraint(f"status IN ({statuses})", name="results_runs_status_check"),
        sa.CheckConstraint("status <> 'complete' OR (finished_at IS NOT NULL AND tasks IS NOT NULL)",
                           name="results_runs_check"),
        comment=TABLE_COMMENT,
    )


def _experiment_column_defs(row_id: str) -> list[sa.Column[Any]]:
    """A row's own id, then the experiment it belongs to (hash and code version), as both tables begin."""
    import sqlalchemy as sa

    return [sa.Column(row_id, sa.BigInteger, sa.Identity(always=True)),
            sa.Column("experiment_hash", sa.Text, nullable=False), sa.Column("code_version", sa.Text, nullable=False)]


def _keys(table: str, row_id: str, repeat: str) -> list[sa.schema.SchemaItem]:
    """Both tables' keys, named as Postgres named them in the hand-written DDL: the row id; one row per experiment,
    code version and `repeat` (the repeat's number, or the number of repeats summarized); an index by world."""
    import sqlalchemy as sa

    return [sa.PrimaryKeyConstraint(row_id, name=f"{table}_pkey"),
            sa.UniqueConstraint("experiment_hash", "code_version", repeat,
                                name=f"{table}_experiment_hash_code_version_{repeat}_key"),
            sa.Index(f"{table}_world_ix", "world", "scenario_key")]


def _scenario_column_defs() -> list[sa.Column[Any]]:
    """The scenario's columns, in the order both tables have them (`_scenario_columns` fills them)."""
    import sqlalchemy as sa

    return [sa.Column(name, kind, nullable=False) for name, kind in (
        ("world", sa.Text), ("scenario_key", sa.Text), ("arm", sa.Text), ("policy", sa.Text), ("t_prime", sa.Date),
        ("t", sa.Date), ("agent_id", sa.Text), ("saas_profile", sa.Text))]


@functools.cache
def experiments_table() -> sa.Table:
    """`churnbench.results_experiments` (revision 0004): one summary per experiment, code version and number
    of repeats."""
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql

    return sa.Table(
        EXPERIMENTS_TABLE, runs_table().metadata,
        *_experiment_column_defs("experiment_id"),
        sa.Column("repeats", sa.Integer, nullable=False),
        *_scenario_column_defs(),
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
        *_keys(EXPERIMENTS_TABLE, "experiment_id", "repeats"),
        sa.CheckConstraint("repeats >= 1", name="results_experiments_repeats_check"),
        comment=EXPERIMENTS_COMMENT,
    )


def catalog_metadata() -> sa.MetaData:
    """The catalog's MetaData (Alembic's `target_metadata`: autogenerate and the model-vs-scripts test)."""
    experiments_table()  # both tables in one MetaData
    return runs_table().metadata



# ---------------------------------------------------------------------------------------------------
# The migrations: Alembic, run from code
# ---------------------------------------------------------------------------------------------------


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """Alembic's configuration for the catalog without an alembic.ini: the scripts shipped in the package,
    and the connection `migrations/env.py` migrates (in `attributes`). New revisions are written with it too:
    `alembic.command.revision(alembic_config(), message=..., rev_id="0002")`."""
    from alembic.config import Config

    config = Config()
    # configparser interpolates `%`: a checkout path holding one must not break the script location.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.set_main_option("path_separator", "os")  # Alembic >= 1.16 warns without it
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def regclass(name: str) -> str:
    """A catalog table's name as `to_regclass` takes it (quoted: the schema and table names are ours)."""
    return f'"{CATALOG_SCHEMA}"."{name}"'


def catalog_state(conn: sa.Connection) -> tuple[bool, str | None]:
    """(the runs table exists, the revision Alembic recorded or None): two cheap reads, no Alembic import."""
    import sqlalchemy as sa

    table_exists, versioned = conn.execute(sa.select(
        sa.func.to_regclass(regclass(RUNS_TABLE)).is_not(None),
        sa.func.to_regclass(regclass(VERSION_TABLE)).is_not(None))).one()
    if not versioned:
        return bool(table_exists), None
    version = sa.table(VERSION_TABLE, sa.column("version_num"), schema=CATALOG_SCHEMA)
    revision = conn.execute(sa.select(version.c.version_num)).scalar()
    return bool(table_exists), revision


def ensure_catalog(conn: sa.Connection) -> None:
    """Bring the catalog to the newest revision and commit (idempotent).

    Creates schema and table when missing; adopts a table the hand-written DDL made before migrations
    (no version table: revision 0001 finds it has its columns, and Alembic records the revision); applies
    newer revisions. All in one transaction, under an advisory lock, so concurrent first runs wait for
    each other and the second finds the work done. A catalog at a revision this code does not know (a
    newer churnbench migrated it) is refused in one line.
    """
    import sqlalchemy as sa
    from alembic import command
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(LOCK_KEY))))
        # The version table goes into this schema, and Alembic creates it before any revision runs.
        conn.execute(sa.schema.CreateSchema(CATALOG_SCHEMA, if_not_exists=True))
        table_exists, revision = catalog_state(conn)  # read again: another process may have just migrated
        config = alembic_config(conn)
        if revision is not None and not table_exists:
            # The table was dropped by hand (to start the catalog afresh): create it again, as the old DDL did;
            # the experiment summaries of the runs dropped with it go too (the scripts create them again).
            conn.execute(sa.schema.DropTable(experiments_table(), if_exists=True))
            conn.execute(sa.delete(sa.table(VERSION_TABLE, schema=CATALOG_SCHEMA)))
        elif revision is not None:
            try:
                ScriptDirectory.from_config(config).get_revision(revision)
            except CommandError:
                raise CatalogError(
                    f"the results catalog {CATALOG_SCHEMA}.{RUNS_TABLE} is at revision {revision!r}, which this "
                    f"churnbench does not know (its newest is {HEAD_REVISION}): a newer churnbench migrated it; "
                    "use that version") from None
        command.upgrade(config, "head")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise

