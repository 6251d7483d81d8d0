"""The results catalog: one Postgres row per evaluation run, in `churnbench.results_runs`.

The catalog lives in the warehouse database but in a schema of its own (`churnbench`), which is no
world's (world schemas are `<world>_<layer>`, see `fabric/postgres.py`), so dropping a world's schemas
never touches it; `worlds rm` / `gc` delete a world's rows through `delete_world_runs`.

A row is keyed by (experiment hash, code version, repeat), exactly as the results folder is (a repeat r > 0
of `--repeats K` is the folder `...__rep<r>`, `results.RunKey`; a single run is repeat 0). Its `status`:

- `running`  written when a run starts (or resumes from its checkpoint), with no figures (an earlier attempt's
             are cleared: no figure stands without the summary it came from) and the Dagster run evaluating it;
- `complete` written only after the results folder is complete (summary.json written last), with the
             summary figures and the folder's seal (`seals.py`: a MAC of each results file under the state
             folder's key, which the database never holds; one entry per folder name, so a retry's seal joins
             the first folder's); it changes again only when its folder was removed and the run starts anew;
- `failed`   written when the run raised (an error or an interrupt), with the error and no figures.

A process killed outright (SIGKILL, power loss) leaves its row `running`: never `complete`; the next command
finds it (`running_rows`), sees that its process is gone, and records it `failed` (`mark_dead`; the Dagster run the
row names is recorded failed too), or `complete` when its folder was completed before the kill
(`mark_dead_complete`; `orchestration/dead_runs.py`). A completed
results folder whose row is missing or not complete (the catalog was unreachable when it finished) is
recorded complete by the next `evaluate` of the same key, which reads the folder back.

Statements are SQLAlchemy Core on the table `runs_table()` describes (the newest revision). The schema
itself is Alembic's: the scripts in `migrations/` (shipped in the package, run programmatically, no
alembic.ini), their version in `churnbench.churnbench_alembic_version` (Dagster's own storage uses
`alembic_version` and may share the database). `ensure_catalog` creates the catalog, adopts a table
made before migrations existed (revision 0001 checks it has exactly its columns and keeps every row) and
applies newer revisions, under an advisory lock so that concurrent first runs wait for each other.
SQLAlchemy and Alembic are imported inside the functions (together ~0.6 s): importing this module costs
nothing.

Beside the runs, `churnbench.results_experiments` holds one summary per experiment, code version and number of
repeats (`record_experiment`, written once all K repeats are complete: `evaluation/repeats.py`).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.results import (
    IDENTITY_VERSION,
    STALE_FILE,
    SUMMARY_FILE,
    TASKS_FILE,
    TIMINGS_FILE,
    RunKey,
    parse_folder_name,
)
from churn_assets.evaluation.seals import seal_folder
from churn_assets.evaluation.verdicts import VERDICTS
from churn_assets.fabric.postgres import connect
from churn_assets.freshness.scenario import ScenarioKeyError, parse_scenario_key
from churn_assets.seal_key import SealKey, current_key

if TYPE_CHECKING:
    import psycopg
    import sqlalchemy as sa
    from alembic.config import Config

    from churn_assets.freshness.scenario import Scenario

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
_FILE_COLUMNS = {"tasks": "tasks_file", "stale": "stale_file", "summary": "summary_file", "timings": "timings_file"}


class CatalogError(UserFacingError):
    """A catalog lookup that matched no run or more than one experiment, or a catalog this code cannot use."""


@dataclass(frozen=True)
class CatalogRun:
    """One row of the catalog."""

    run_id: int
    experiment_hash: str
    code_version: str
    world: str
    scenario_key: str
    arm: str
    policy: str
    t_prime: dt.date
    t: dt.date
    agent_id: str
    saas_profile: str
    status: str
    tasks: int | None
    accuracy: float | None
    verdicts: dict[str, int | None]
    stale_answers: int | None
    exposure: int | None
    degenerate_exposure: int | None
    prediction: float | None
    mean_cost_units: float | None
    mean_latency_ms: float | None
    results_dir: str
    files: dict[str, str | None]
    error: str | None
    attempts: int
    started_at: dt.datetime
    finished_at: dt.datetime | None
    identity_version: int = 1
    repeat: int = 0
    seal: dict[str, dict[str, Any]] | None = None  # results folder name -> its seal (`seals.py`)
    dagster_run_id: str | None = None  # the Dagster run of the latest attempt (None: not run by `eval_run`)

    @property
    def older_identity(self) -> bool:
        """Whether the run's experiment hash covers less than today's identity (it is shown, never reused)."""
        return self.identity_version < IDENTITY_VERSION

    @property
    def folder_name(self) -> str:
        return f"{self.experiment_hash}__{self.code_version}"

    @property
    def retry(self) -> int:
        """Which retry of its transport failures the row's results folder is (0: the first answering)."""
        base, _repeat, retry = parse_folder_name(Path(self.results_dir).name)
        return retry if base == self.folder_name else 0


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
        *(sa.Column(c, sa.Text) for c in _FILE_COLUMNS.values()),
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


def _row(m: sa.RowMapping) -> CatalogRun:
    return CatalogRun(
        run_id=m["run_id"], experiment_hash=m["experiment_hash"], code_version=m["code_version"], world=m["world"],
        scenario_key=m["scenario_key"], arm=m["arm"], policy=m["policy"], t_prime=m["t_prime"], t=m["t"],
        agent_id=m["agent_id"], saas_profile=m["saas_profile"], status=m["status"], tasks=m["tasks"],
        accuracy=m["accuracy"], verdicts={v: m[v] for v in VERDICTS}, stale_answers=m["stale_answers"],
        exposure=m["exposure"], degenerate_exposure=m["degenerate_exposure"], prediction=m["prediction"],
        mean_cost_units=m["mean_cost_units"],
        mean_latency_ms=m["mean_latency_ms"], results_dir=m["results_dir"],
        files={name: m[column] for name, column in _FILE_COLUMNS.items()},
        error=m["error"], attempts=m["attempts"], started_at=m["started_at"], finished_at=m["finished_at"],
        identity_version=m["identity_version"], repeat=m["repeat"], seal=m["seal"],
        dagster_run_id=m["dagster_run_id"])


# ---------------------------------------------------------------------------------------------------
# The schema: Alembic, run from code
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


def _regclass(name: str) -> str:
    return f'"{CATALOG_SCHEMA}"."{name}"'


def _exists_query() -> sa.Select[Any]:
    import sqlalchemy as sa

    return sa.select(sa.func.to_regclass(_regclass(RUNS_TABLE)).is_not(None))


def _catalog_state(conn: sa.Connection) -> tuple[bool, str | None]:
    """(the runs table exists, the revision Alembic recorded or None): two cheap reads, no Alembic import."""
    import sqlalchemy as sa

    table_exists, versioned = conn.execute(sa.select(
        sa.func.to_regclass(_regclass(RUNS_TABLE)).is_not(None),
        sa.func.to_regclass(_regclass(VERSION_TABLE)).is_not(None))).one()
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
        table_exists, revision = _catalog_state(conn)  # read again: another process may have just migrated
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


# ---------------------------------------------------------------------------------------------------
# On a caller's psycopg connection (`worlds rm` / `gc`)
# ---------------------------------------------------------------------------------------------------


def _execute(conn: psycopg.Connection[Any], statement: sa.ClauseElement) -> psycopg.Cursor[Any]:
    """A Core statement on a psycopg 3 connection the caller owns: compiled for SQLAlchemy's psycopg dialect,
    whose `%(name)s` placeholders psycopg takes as they are (an `IN` list expanded into one placeholder per
    value: SQLAlchemy's post-compile parameters exist only when SQLAlchemy executes the statement itself)."""
    from sqlalchemy.dialects.postgresql.psycopg import dialect

    compiled = statement.compile(dialect=dialect(), compile_kwargs={"render_postcompile": True})
    return conn.execute(str(compiled).encode(), compiled.params)


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

    row = _execute(conn, sa.select(sa.func.to_regclass(_regclass(EXPERIMENTS_TABLE)).is_not(None))).fetchone()
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


# ---------------------------------------------------------------------------------------------------
# The catalog of one database
# ---------------------------------------------------------------------------------------------------


def _files(run_dir: Path) -> dict[str, str]:
    return {"tasks_file": str(run_dir / TASKS_FILE), "stale_file": str(run_dir / STALE_FILE),
            "summary_file": str(run_dir / SUMMARY_FILE), "timings_file": str(run_dir / TIMINGS_FILE)}


FIGURES = ("tasks", "accuracy", *VERDICTS, "stale_answers", "exposure", "degenerate_exposure", "prediction",
           "mean_cost_units", "mean_latency_ms")  # a row's figures: set only while it is `complete`
NO_FIGURES: dict[str, Any] = dict.fromkeys(FIGURES)


def _figures(summary: Mapping[str, Any], timings: Mapping[str, Any]) -> dict[str, Any]:
    verdicts = summary.get("verdicts") or {}
    return {
        "tasks": summary.get("tasks"), "accuracy": summary.get("accuracy"),
        **{v: verdicts.get(v, 0) for v in VERDICTS},
        "stale_answers": summary.get("stale_answers"), "exposure": summary.get("exposure"),
        "degenerate_exposure": summary.get("degenerate_exposure"),
        "prediction": summary.get("prediction"), "mean_cost_units": summary.get("mean_cost_units"),
        "mean_latency_ms": timings.get("mean_latency_ms"),
    }


def _scenario_columns(scenario: Scenario, key: RunKey) -> dict[str, Any]:
    return {"world": key.world, "scenario_key": key.scenario_key, "arm": scenario.arm, "policy": scenario.policy_id,
            "t_prime": scenario.t_prime, "t": scenario.t, "agent_id": scenario.agent_id,
            "saas_profile": scenario.saas_profile}


@dataclass(frozen=True)
class CatalogExperiment:
    """One row of the experiments table: the summary of an experiment's first `repeats` repeats."""

    experiment_hash: str
    code_version: str
    repeats: int
    scenario_key: str
    summary: dict[str, Any]
    recorded_at: dt.datetime
def _merged_seal(current: Any, new: Any) -> Any:
    """`current || new` in SQL: a row's folder seals with this folder's replaced or added."""
    import sqlalchemy as sa

    return sa.func.coalesce(current, sa.cast(sa.literal("{}"), current.type)).op("||")(new)


def _renamed_path(path: str, old: str, new: str) -> str:
    """`path` with its folder named `old` (the scenario-key folder of a results path) renamed `new`."""
    parts = list(Path(path).parts)
    if old in parts:
        i = len(parts) - 1 - parts[::-1].index(old)
        parts[i] = new
    return str(Path(*parts))


def durable_connection(url: str) -> Any:
    """A psycopg connection whose commits wait for their WAL flush. The embedded cluster commits asynchronously
    (decision 26: Dagster's event log and the rebuildable stores lose at most the last fraction of a second on a
    crash), but a catalog row is a record of what ran, not a projection of the ledger: a run's start (its attempt)
    committed just before Postgres was killed was lost that way (decision 309). The catalog writes a few rows
    per run, so the flush costs nothing measurable."""
    conn = connect(url)
    conn.execute("SET synchronous_commit = on")
    conn.commit()
    return conn


class RunCatalog:
    """The catalog of one warehouse database (a libpq URL); each call opens a short connection."""

    def __init__(self, url: str, seal_key: SealKey | None = None) -> None:
        self.url = url
        self._seal_key = seal_key
        self._ready = False
        self._engine: sa.Engine | None = None

    def _connect(self) -> sa.Connection:
        if self._engine is None:
            import sqlalchemy as sa
            from sqlalchemy.pool import NullPool

            # psycopg opens the libpq URL itself, as every other reader does (Unix-socket URLs, the connect
            # timeout); NullPool closes each connection after its call, so nothing outlives it (forked
            # Dagster runs included).
            url = self.url
            self._engine = sa.create_engine("postgresql+psycopg://", creator=lambda: durable_connection(url),
                                            poolclass=NullPool)
        return self._engine.connect()

    def _ensure(self, conn: sa.Connection, *, create: bool) -> bool:
        """Whether the catalog exists, at the newest revision once this returns. Reads (`create=False`) do not
        create a missing catalog; both adopt or upgrade an existing one, whose columns they need."""
        if self._ready:
            return True
        table_exists, revision = _catalog_state(conn)
        if not table_exists and not create:
            conn.rollback()
            return False
        if not table_exists or revision != HEAD_REVISION:
            ensure_catalog(conn)
        self._ready = True
        return True

    # -- writes (the runner) ---------------------------------------------------------------------------

    def _seal(self, run_dir: Path) -> dict[str, Any]:
        """The folder's seal under the state folder's key (`seals.py`), read from its file on first use: the key is
        never in the database this catalog writes to."""
        if self._seal_key is None:
            self._seal_key = current_key()
        return seal_folder(run_dir, self._seal_key)

    def _write(self, statement: sa.Executable) -> None:
        with self._connect() as conn:
            self._ensure(conn, create=True)
            conn.execute(statement)
            conn.commit()

    def _upsert(self, scenario: Scenario, key: RunKey, run_dir: Path, values: Mapping[str, Any],
                on_conflict: Callable[[Any], dict[str, Any]], where: Any = None) -> None:
        """INSERT ... ON CONFLICT (experiment_hash, code_version, repeat) DO UPDATE SET `on_conflict(excluded)`."""
        from sqlalchemy.dialects.postgresql import insert

        t = runs_table()
        row = {"experiment_hash": key.experiment_hash, "code_version": key.code_version, "repeat": key.repeat,
               **_scenario_columns(scenario, key), "identity_version": IDENTITY_VERSION,
               "results_dir": str(run_dir), **values}
        statement = insert(t).values(row)
        self._write(statement.on_conflict_do_update(
            index_elements=[t.c.experiment_hash, t.c.code_version, t.c.repeat], set_=on_conflict(statement.excluded),
            where=where))

    def start(self, scenario: Scenario, key: RunKey, run_dir: Path, dagster_run_id: str | None = None) -> None:
        """Record a run as `running` (a resumed run counts one more attempt), with no figures. The runner starts a
        run only when its results folder is not complete, so a `complete` row is reset too: its folder was
        removed (or a retry writes a new one), and the row must not keep figures that no folder holds any more.
        `dagster_run_id`: the Dagster run evaluating it, recorded failed with the row if its process dies."""
        import sqlalchemy as sa

        t = runs_table()
        self._upsert(scenario, key, run_dir, {"status": "running", "dagster_run_id": dagster_run_id},
                     lambda excluded: {
            "status": "running", "error": None, "finished_at": None, "started_at": sa.func.now(),
            "attempts": t.c.attempts + 1, "results_dir": excluded.results_dir,
            "dagster_run_id": excluded.dagster_run_id, **NO_FIGURES})

    def complete(self, scenario: Scenario, key: RunKey, run_dir: Path, summary: Mapping[str, Any],
                 timings: Mapping[str, Any]) -> None:
        """Record a run `complete` with its figures (call only once its results folder is complete).
        Idempotent: a row that is complete already keeps its figures and timestamps."""
        t = runs_table()
        figures = {**_figures(summary, timings), **_files(run_dir)}
        self._upsert(scenario, key, run_dir,
                     {"status": "complete", "finished_at": dt.datetime.now(dt.UTC), **figures,
                      "seal": {run_dir.name: self._seal(run_dir)}},
                     lambda excluded: {"status": "complete", "error": None, "finished_at": excluded.finished_at,
                                       **{c: excluded[c] for c in [*figures, "results_dir"]},
                                       "seal": _merged_seal(t.c.seal, excluded.seal)},
                     where=t.c.status != "complete")

    def fail(self, key: RunKey, error: str) -> None:
        """Record a run `failed` (an error or an interrupt); a complete row is left as it is."""
        import sqlalchemy as sa

        t = runs_table()
        self._write(sa.update(t)
                    .where(t.c.experiment_hash == key.experiment_hash, t.c.code_version == key.code_version,
                           t.c.repeat == key.repeat, t.c.status != "complete")
                    .values(status="failed", error=error[:2000], finished_at=sa.func.now(), **NO_FIGURES))

    def record_experiment(self, scenario: Scenario, key: RunKey, summary: Mapping[str, Any]) -> None:
        """Record (or replace) the summary of an experiment's first `summary["repeats"]` repeats, all complete
        (`evaluation/repeats.py`); `key`: any repeat's key (its experiment hash and code version are used)."""
        from sqlalchemy.dialects.postgresql import insert

        e = experiments_table()
        interval = summary.get("accuracy_interval_90") or [None, None]
        k = str(summary["repeats"])
        figures = {"tasks": summary["tasks"], "accuracy_mean": summary.get("accuracy_mean"),
                   "accuracy_low": interval[0], "accuracy_high": interval[1],
                   "pass_hat_k": (summary.get("pass_hat_k") or {}).get(k),
                   "pass_at_k": (summary.get("pass_at_k") or {}).get(k), "stability": summary.get("stability"),
                   "stale_answers_mean": summary.get("stale_answers_mean"),
                   "summary": json.loads(json.dumps(dict(summary), default=str))}
        statement = insert(e).values({"experiment_hash": key.experiment_hash, "code_version": key.code_version,
                                      "repeats": int(summary["repeats"]), **_scenario_columns(scenario, key),
                                      **figures})
        self._write(statement.on_conflict_do_update(
            index_elements=[e.c.experiment_hash, e.c.code_version, e.c.repeats],
            set_={**{c: statement.excluded[c] for c in figures}, "recorded_at": statement.excluded.recorded_at}))

    def experiments(self, experiment_hash: str, code_version: str) -> list[CatalogExperiment]:
        """The recorded summaries of one experiment and code version, most repeats first."""
        import sqlalchemy as sa

        e = experiments_table()
        query = (sa.select(e).where(e.c.experiment_hash == experiment_hash, e.c.code_version == code_version)
                 .order_by(e.c.repeats.desc()))
        with self._connect() as conn:
            if not self._ensure(conn, create=False):
                return []
            return [CatalogExperiment(m["experiment_hash"], m["code_version"], m["repeats"], m["scenario_key"],
                                      dict(m["summary"]), m["recorded_at"])
                    for m in (r._mapping for r in conn.execute(query))]

    def repeats_of(self, run: CatalogRun) -> list[CatalogRun]:
        """Every repeat row of `run`'s experiment and code version (`run` included), by repeat."""
        import sqlalchemy as sa

        t = runs_table()
        return self._read(sa.select(t).where(t.c.experiment_hash == run.experiment_hash,
                                             t.c.code_version == run.code_version).order_by(t.c.repeat))

    # -- runs whose process is gone (`orchestration/dead_runs.py`) ------------------------------------------

    def running_rows(self) -> list[CatalogRun]:
        """Every row recorded `running` (a run in progress, or one whose process was killed)."""
        import sqlalchemy as sa

        t = runs_table()
        return self._read(sa.select(t).where(t.c.status == "running").order_by(t.c.run_id))

    def _still_running(self, run: CatalogRun) -> Any:
        """The row of `run` while it is still the attempt that was read (a run started again meanwhile, which
        counts one more attempt, is left alone)."""
        t = runs_table()
        return (t.c.experiment_hash == run.experiment_hash, t.c.code_version == run.code_version,
                t.c.repeat == run.repeat, t.c.status == "running", t.c.attempts == run.attempts)

    def mark_dead(self, run: CatalogRun, error: str) -> bool:
        """Record `failed` a `running` row whose process is gone; False when the row moved on meanwhile."""
        import sqlalchemy as sa

        t = runs_table()
        with self._connect() as conn:
            self._ensure(conn, create=True)
            count = conn.execute(sa.update(t).where(*self._still_running(run))
                                 .values(status="failed", error=error[:2000], finished_at=sa.func.now(),
                                         **NO_FIGURES)).rowcount
            conn.commit()
        return bool(count)

    def mark_dead_complete(self, run: CatalogRun, summary: Mapping[str, Any], timings: Mapping[str, Any]) -> bool:
        """Record `complete` a `running` row whose process is gone after its folder was completed (killed between
        summary.json and the catalog write)."""
        import sqlalchemy as sa

        t = runs_table()
        run_dir = Path(run.results_dir)
        with self._connect() as conn:
            self._ensure(conn, create=True)
            count = conn.execute(sa.update(t).where(*self._still_running(run)).values(
                status="complete", error=None, finished_at=sa.func.now(), **_figures(summary, timings),
                **_files(run_dir),
                seal=_merged_seal(t.c.seal, sa.literal({run_dir.name: self._seal(run_dir)}, t.c.seal.type)))).rowcount
            conn.commit()
        return bool(count)

    def set_seal(self, run_id: int, seal: Mapping[str, Any]) -> None:
        """Replace a row's seals (folder name -> seal): `churnbench migrate` re-seals a run whose plain seal of
        before issue 46 (SHA-256) still holds."""
        import sqlalchemy as sa

        t = runs_table()
        self._write(sa.update(t).where(t.c.run_id == run_id).values(seal=dict(seal)))

    # -- the key rename of `churnbench migrate` (issue 20) ---------------------------------------------

    def rename_scenario_keys(self, rename: Callable[[str], str | None]) -> int:
        """Give every row whose `rename(scenario key)` is a new key that key, and point its results folder and
        files at the folder renamed with it (`<world>/<key>/<run>`); returns the rows changed. One transaction,
        under the catalog's lock; a missing catalog has nothing to rename. The experiment hash and code version
        (the row's identity) never change: a scenario key is not part of the experiment."""
        import sqlalchemy as sa

        t = runs_table()
        with self._connect() as conn:
            if not self._ensure(conn, create=False):
                return 0
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(LOCK_KEY))))
            rows = conn.execute(sa.select(t.c.run_id, t.c.scenario_key, t.c.results_dir,
                                          *(t.c[c] for c in _FILE_COLUMNS.values()))).all()
            changed = 0
            for row in rows:
                m = row._mapping
                new = rename(m["scenario_key"])
                if new is None or new == m["scenario_key"]:
                    continue
                values = {"scenario_key": new, "results_dir": _renamed_path(m["results_dir"], m["scenario_key"], new)}
                values |= {c: _renamed_path(m[c], m["scenario_key"], new) for c in _FILE_COLUMNS.values()
                           if m[c] is not None}
                conn.execute(sa.update(t).where(t.c.run_id == m["run_id"]).values(**values))
                changed += 1
            conn.commit()
            return changed

    # -- reads (the CLI) -------------------------------------------------------------------------------

    def _read(self, statement: sa.Select[Any]) -> list[CatalogRun]:
        with self._connect() as conn:
            if not self._ensure(conn, create=False):
                return []
            return [_row(r._mapping) for r in conn.execute(statement)]

    def runs(self, world: str | None = None) -> list[CatalogRun]:
        """Every run (of one world), oldest first."""
        import sqlalchemy as sa

        t = runs_table()
        query = sa.select(t)
        if world:
            query = query.where(t.c.world == world)
        return self._read(query.order_by(t.c.started_at, t.c.run_id))

    def get(self, key: RunKey) -> CatalogRun | None:
        """The row of a run key (experiment hash, code version and repeat), or None."""
        import sqlalchemy as sa

        t = runs_table()
        rows = self._read(sa.select(t).where(t.c.experiment_hash == key.experiment_hash,
                                             t.c.code_version == key.code_version, t.c.repeat == key.repeat))
        return rows[0] if rows else None

    def find(self, ref: str) -> list[CatalogRun]:
        """Runs a reference names: a run id, a scenario key (today's form or the form before issue 20: either
        finds rows stored under either), `<experiment hash>__<code version>` (a results folder's name: with
        `__rep<r>`, that repeat's), a results folder's path, or an experiment hash prefix (at least 4 hex
        digits). Newest first; a scenario key or hash prefix finds every repeat."""
        import sqlalchemy as sa

        t = runs_table()
        ref = ref.strip()
        if "/" in ref:  # a results folder, as `churnbench run` prints it: its name is the run's identity
            ref = Path(ref.rstrip("/")).name
        # A retry's folder names the experiment (and repeat) it retried; a repeat's folder, that repeat.
        ref, repeat, _retry = parse_folder_name(ref)
        keys = [ref]
        try:
            parts = parse_scenario_key(ref)
            keys = [str(parts), parts.legacy]
        except ScenarioKeyError:
            pass  # not a scenario key: the ref is matched as a run id or run folder name below
        clauses = [t.c.scenario_key.in_(keys),
                   sa.and_(t.c.experiment_hash.concat("__").concat(t.c.code_version) == ref, t.c.repeat == repeat)]
        if ref.isdigit():
            clauses.append(t.c.run_id == int(ref))
        if len(ref) >= 4 and all(ch in "0123456789abcdef" for ch in ref.lower()):
            clauses.append(t.c.experiment_hash.startswith(ref.lower(), autoescape=True))
        return self._read(sa.select(t).where(sa.or_(*clauses)).order_by(t.c.started_at.desc(), t.c.run_id.desc()))

    def resolve(self, ref: str) -> tuple[CatalogRun, list[CatalogRun]]:
        """The one run `ref` names, and the other code versions of the same experiment (their repeat 0 rows,
        newest first).

        Several code versions of one experiment resolve to the newest (name one with
        `<experiment hash>__<code version>`), and several repeats to repeat 0 unless `ref` is a run id or a
        repeat's folder; a reference matching several experiments is refused, listed.
        """
        found = self.find(ref)
        if not found:
            raise CatalogError(f"no run {ref!r} in the results catalog (see `churnbench results list`)")
        by_id = [r for r in found if str(r.run_id) == ref]
        if by_id:
            chosen = by_id[0]
        else:
            experiments = {r.experiment_hash for r in found}
            if len(experiments) > 1:
                listed = "\n  ".join(f"{r.run_id}  {r.experiment_hash}__{r.code_version}  {r.scenario_key}"
                                     + (f"  (repeat {r.repeat})" if r.repeat else "") for r in found)
                raise CatalogError(f"{ref!r} names {len(experiments)} experiments; use a longer hash prefix or a "
                                   f"run id:\n  {listed}")
            chosen = min((r for r in found if r.code_version == found[0].code_version), key=lambda r: r.repeat)
        return chosen, [r for r in self.find(chosen.experiment_hash)
                        if r.code_version != chosen.code_version and r.repeat == 0]
