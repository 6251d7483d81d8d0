"""The results catalog's schema under Alembic, against the real embedded Postgres: a new catalog is the table
the hand-written DDL made (plus the later revisions, written out here as DDL), the model agrees with the
migration scripts, a catalog made by the old code is adopted with every row, a table of another shape or a
catalog of an unknown revision is refused unchanged, concurrent first runs create the catalog once, and
(revisions 0003-0004, issue 33) repeats of one experiment are rows of their own beside the experiment's summary, and
(revision 0005, issue 35) rows carry their seals and keep no figures unless complete.

Each test gets a database of its own on the session's server, so the warehouse's catalog (which other tests
write) is never touched.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.catalog_removal import catalog_exists, catalog_worlds, delete_world_runs
from churn_assets.evaluation.catalog_schema import (
    CATALOG_SCHEMA,
    HEAD_REVISION,
    VERSION_TABLE,
    CatalogError,
    catalog_metadata,
)
from churn_assets.evaluation.results import RunKey
from churn_assets.fabric.postgres import connection
from churn_assets.freshness.scenario import Scenario
from churn_assets.services import ServiceUrls
from churn_assets.services.base import with_database, with_driver

pytestmark = pytest.mark.integration

WORLD = "default-s42-3f9a1c"
SCENARIO = Scenario(WORLD, "naive", "tiered", dt.date(2024, 3, 29), dt.date(2024, 4, 27))
VERDICTS_THEN = ("correct", "freshness_error", "mixed_vintage_error", "reasoning_error", "parse_failure",
                 "transport_failure")

# ---------------------------------------------------------------------------------------------------
# The old schema: `_COLUMNS` and `ensure_catalog` of catalog.py before migrations (commit 96cf42b), verbatim
# ---------------------------------------------------------------------------------------------------

OLD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("world", "text NOT NULL"),
    ("scenario_key", "text NOT NULL"),
    ("arm", "text NOT NULL"),
    ("policy", "text NOT NULL"),
    ("t_prime", "date NOT NULL"),
    ("t", "date NOT NULL"),
    ("agent_id", "text NOT NULL"),
    ("saas_profile", "text NOT NULL"),
    ("status", "text NOT NULL"),
    ("tasks", "integer"),
    ("accuracy", "double precision"),
    *((v, "integer") for v in VERDICTS_THEN),
    ("stale_answers", "integer"),
    ("exposure", "integer"),
    ("prediction", "double precision"),
    ("mean_cost_units", "double precision"),
    ("mean_latency_ms", "double precision"),
    ("results_dir", "text NOT NULL"),
    ("tasks_file", "text"),
    ("stale_file", "text"),
    ("summary_file", "text"),
    ("timings_file", "text"),
    ("error", "text"),
    ("attempts", "integer NOT NULL DEFAULT 1"),
    ("started_at", "timestamptz NOT NULL DEFAULT now()"),
    ("finished_at", "timestamptz"),
)

# What revision 0002 adds (issue 19), written out here as DDL so the comparison does not reuse the script.
ADDED_IN_0002: tuple[tuple[str, str], ...] = (
    ("unattributed_error", "integer"),
    ("degenerate_exposure", "integer"),
    ("identity_version", "integer NOT NULL DEFAULT 1"),
)
# What revision 0003 adds (issue 33): the `budget_exhausted` verdict's count.
ADDED_IN_0003: tuple[tuple[str, str], ...] = (("budget_exhausted", "integer"),)


# What revision 0004 does (issue 33), as DDL: the `repeat` column in the runs table's key, and the experiments table.
DDL_0004 = (
    "ALTER TABLE churnbench.results_runs ADD COLUMN repeat integer NOT NULL DEFAULT 0",
    "ALTER TABLE churnbench.results_runs DROP CONSTRAINT results_runs_experiment_hash_code_version_key",
    "ALTER TABLE churnbench.results_runs ADD CONSTRAINT results_runs_experiment_hash_code_version_repeat_key "
    "UNIQUE (experiment_hash, code_version, repeat)",
    "CREATE TABLE churnbench.results_experiments (experiment_id bigint GENERATED ALWAYS AS IDENTITY "
    "CONSTRAINT results_experiments_pkey PRIMARY KEY, experiment_hash text NOT NULL, code_version text NOT NULL, "
    "repeats integer NOT NULL, world text NOT NULL, scenario_key text NOT NULL, arm text NOT NULL, policy text NOT "
    "NULL, t_prime date NOT NULL, t date NOT NULL, agent_id text NOT NULL, saas_profile text NOT NULL, tasks integer "
    "NOT NULL, accuracy_mean double precision, accuracy_low double precision, accuracy_high double precision, "
    "pass_hat_k double precision, pass_at_k double precision, stability double precision, stale_answers_mean "
    "double precision, summary jsonb NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now(), CONSTRAINT "
    "results_experiments_experiment_hash_code_version_repeats_key UNIQUE (experiment_hash, code_version, repeats), "
    "CONSTRAINT results_experiments_repeats_check CHECK (repeats >= 1))",
    "CREATE INDEX results_experiments_world_ix ON churnbench.results_experiments (world, scenario_key)",
)
# What revision 0005 adds (issue 35): the results folders' seals and the Dagster run of the latest attempt.
ADDED_IN_0005: tuple[tuple[str, str], ...] = (
    ("seal", "jsonb"),
    ("dagster_run_id", "text"),
)


def old_ensure_catalog(conn: psycopg.Connection[Any], columns: tuple[tuple[str, str], ...] = OLD_COLUMNS) -> None:
    ident, table = sql.Identifier, sql.Identifier("churnbench", "results_runs")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('churnbench results catalog'))")
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident("churnbench")))
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "experiment_hash text NOT NULL, code_version text NOT NULL, {}, "
            "UNIQUE (experiment_hash, code_version), "
            "CHECK (status IN ({})), "
            "CHECK (status <> 'complete' OR (finished_at IS NOT NULL AND tasks IS NOT NULL)))").format(
                table, sql.SQL(", ").join(sql.SQL(f"{{}} {t}").format(ident(c)) for c, t in columns),
                sql.SQL(", ").join(sql.Literal(s) for s in ("running", "complete", "failed"))))
        for column, sql_type in columns:
            if "NOT NULL" not in sql_type or "DEFAULT" in sql_type:
                conn.execute(sql.SQL(f"ALTER TABLE {{}} ADD COLUMN IF NOT EXISTS {{}} {sql_type}").format(
                    table, ident(column)))
        conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (world, scenario_key)").format(
            ident("results_runs_world_ix"), table))
        conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(table, sql.Literal(
            "Every evaluation run: identity (experiment hash, code version, scenario), status "
            "(running/complete/failed), summary figures and its results files.")))


# Rows as the old code wrote them: complete with figures, running (resumed once), failed with its error.
OLD_ROWS: tuple[dict[str, Any], ...] = (
    {"experiment_hash": "aaaa000000000001", "code_version": "git-old1", "status": "complete", "tasks": 180,
     "accuracy": 0.75, "correct": 135, "freshness_error": 40, "mixed_vintage_error": 5, "reasoning_error": 0,
     "parse_failure": 0, "transport_failure": 0, "stale_answers": 45, "exposure": 45, "prediction": 44.2,
     "mean_cost_units": 3.5, "mean_latency_ms": 12.25, "tasks_file": "/r/1/tasks.jsonl",
     "stale_file": "/r/1/stale.csv", "summary_file": "/r/1/summary.json", "timings_file": "/r/1/timings.json",
     "attempts": 1, "started_at": dt.datetime(2026, 11, 1, 8, 0, tzinfo=dt.UTC),
     "finished_at": dt.datetime(2026, 11, 1, 8, 5, tzinfo=dt.UTC)},
    {"experiment_hash": "aaaa000000000002", "code_version": "git-old1", "status": "running", "attempts": 2,
     "started_at": dt.datetime(2026, 11, 2, 8, 0, tzinfo=dt.UTC)},
    {"experiment_hash": "bbbb000000000003", "code_version": "git-old2", "status": "failed",
     "error": "RuntimeError: source refused", "attempts": 1,
     "started_at": dt.datetime(2026, 11, 3, 8, 0, tzinfo=dt.UTC),
     "finished_at": dt.datetime(2026, 11, 3, 8, 1, tzinfo=dt.UTC)},
)


def insert_old_rows(conn: psycopg.Connection[Any]) -> None:
    for row in OLD_ROWS:
        full = {"world": WORLD, "scenario_key": SCENARIO.key, "arm": "naive", "policy": "tiered",
                "t_prime": SCENARIO.t_prime, "t": SCENARIO.t, "agent_id": "det", "saas_profile": "default",
                "results_dir": f"/r/{row['experiment_hash']}", **row}
        conn.execute(sql.SQL("INSERT INTO churnbench.results_runs ({}) VALUES ({})").format(
            sql.SQL(", ").join(map(sql.Identifier, full)), sql.SQL(", ").join(sql.Placeholder() * len(full))),
            list(full.values()))


# ---------------------------------------------------------------------------------------------------
# Fixtures and probes
# ---------------------------------------------------------------------------------------------------


@pytest.fixture
def database(services: ServiceUrls) -> Iterator[str]:
    """A fresh database of its own on the session's server (libpq URL); dropped afterwards."""
    name = f"catalog_{uuid.uuid4().hex[:10]}"
    with connection(services.postgres_server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(services.warehouse, name)
    finally:
        with connection(services.postgres_server, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def definition(url: str) -> dict[str, Any]:
    """Everything Postgres says about the runs table: columns (type, NOT NULL, identity, default), constraints,
    indexes, comment, identity sequence, and the other relations of the schema."""
    with connection(url) as conn:
        def rows(query: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in conn.execute(query.encode())]
        return {
            "columns": rows("""SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                                      a.attidentity, pg_get_expr(d.adbin, d.adrelid)
                               FROM pg_attribute a
                               LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                               WHERE a.attrelid = 'churnbench.results_runs'::regclass AND a.attnum > 0
                                 AND NOT a.attisdropped ORDER BY a.attnum"""),
            "constraints": rows("""SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
                                   WHERE conrelid = 'churnbench.results_runs'::regclass ORDER BY conname"""),
            "indexes": rows("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'results_runs' "
                            "ORDER BY indexname"),
            "comment": rows("SELECT obj_description('churnbench.results_runs'::regclass, 'pg_class')"),
            "sequences": rows("SELECT sequencename, data_type, start_value, increment_by, max_value, cycle "
                              "FROM pg_sequences WHERE schemaname = 'churnbench'"),
            "relations": rows(f"""SELECT c.relname, c.relkind FROM pg_class c
                                  JOIN pg_namespace n ON n.oid = c.relnamespace
                                  WHERE n.nspname = 'churnbench' AND c.relname <> '{VERSION_TABLE}'
                                    AND c.relname NOT LIKE '{VERSION_TABLE}%' ORDER BY c.relname"""),
        }


def all_rows(url: str) -> list[dict[str, Any]]:
    with connection(url) as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(b"SELECT * FROM churnbench.results_runs ORDER BY run_id").fetchall()


def recorded_revisions(url: str) -> list[str] | None:
    """The version rows of the catalog's Alembic version table (None when there is none)."""
    with connection(url) as conn:
        if conn.execute(b"SELECT to_regclass('churnbench.churnbench_alembic_version')").fetchone() == (None,):
            return None
        return [r[0] for r in conn.execute(b"SELECT version_num FROM churnbench.churnbench_alembic_version")]


def key(experiment_hash: str, code_version: str = "git-new") -> RunKey:
    return RunKey(WORLD, SCENARIO.key, experiment_hash, code_version)


# ---------------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------------


def test_a_new_catalog_is_the_table_the_old_ddl_made(database: str) -> None:
    """A new catalog at head is the old DDL's table with the columns of the later revisions appended."""
    with connection(database, autocommit=True) as conn:
        old_ensure_catalog(conn, OLD_COLUMNS + ADDED_IN_0002 + ADDED_IN_0003)
        for statement in DDL_0004:
            conn.execute(statement.encode())
        for name, kind in ADDED_IN_0005:
            conn.execute(f"ALTER TABLE churnbench.results_runs ADD COLUMN {name} {kind}".encode())
    old = definition(database)
    with connection(database, autocommit=True) as conn:
        conn.execute(b"DROP SCHEMA churnbench CASCADE")

    RunCatalog(database).start(SCENARIO, key("cccc000000000001"), Path("/r/new"))
    assert definition(database) == old
    assert recorded_revisions(database) == [HEAD_REVISION]
    with connection(database) as conn:  # Dagster's `alembic_version` is left to Dagster
        assert conn.execute(b"SELECT to_regclass('public.alembic_version')").fetchone() == (None,)
        assert catalog_exists(conn) and catalog_worlds(conn) == {WORLD}

    # A runs table dropped by hand (to start afresh) is created again, as the old DDL did.
    with connection(database, autocommit=True) as conn:
        conn.execute(b"DROP TABLE churnbench.results_runs")
    RunCatalog(database).start(SCENARIO, key("cccc000000000002"), Path("/r/new"))
    assert definition(database) == old and [r["experiment_hash"] for r in all_rows(database)] == ["cccc000000000002"]


def test_the_model_matches_the_migration_scripts(database: str) -> None:
    """What `catalog_schema.runs_table()` describes is what the scripts build (Alembic's autogenerate finds nothing)."""
    import sqlalchemy as sa
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    RunCatalog(database).start(SCENARIO, key("cccc000000000001"), Path("/r/new"))
    engine = sa.create_engine(with_driver(database, "psycopg"), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={
                "include_schemas": True, "compare_type": True, "compare_server_default": True,
                "version_table": VERSION_TABLE, "version_table_schema": CATALOG_SCHEMA,
                "include_name": lambda name, type_, _parents: name == CATALOG_SCHEMA if type_ == "schema"
                else name != VERSION_TABLE})
            assert compare_metadata(context, catalog_metadata()) == []
    finally:
        engine.dispose()


def test_an_old_catalog_is_adopted_with_every_row(database: str) -> None:
    with connection(database, autocommit=True) as conn:
        old_ensure_catalog(conn)
        insert_old_rows(conn)
    before, old_definition = all_rows(database), definition(database)
    assert len(before) == len(OLD_ROWS) and recorded_revisions(database) is None

    catalog = RunCatalog(database)
    listed = catalog.runs()  # a read adopts it: stamped at the baseline, then upgraded to head
    assert recorded_revisions(database) == [HEAD_REVISION]
    added = {"unattributed_error": None, "degenerate_exposure": None, "identity_version": 1, "budget_exhausted": None,
             "repeat": 0, "seal": None, "dagster_run_id": None}
    before = [{**b, **added} for b in before]
    assert all_rows(database) == before
    after = definition(database)
    last = len(old_definition["columns"])
    assert after["columns"][:last] == old_definition["columns"]
    assert after["columns"][last:] == [(last + 1, "unattributed_error", "integer", False, "", None),
                                       (last + 2, "degenerate_exposure", "integer", False, "", None),
                                       (last + 3, "identity_version", "integer", True, "", "1"),
                                       (last + 4, "budget_exhausted", "integer", False, "", None),
                                       (last + 5, "repeat", "integer", True, "", "0"),
                                       (last + 6, "seal", "jsonb", False, "", None),
                                       (last + 7, "dagster_run_id", "text", False, "", None)]
    # revision 0004: the key gains the repeat (every old row is repeat 0), and the experiments table is added
    renamed = [("results_runs_experiment_hash_code_version_repeat_key",
                "UNIQUE (experiment_hash, code_version, repeat)") if c[0].endswith("code_version_key") else c
               for c in old_definition["constraints"]]
    assert after["constraints"] == sorted(renamed)
    assert {k: v for k, v in after.items() if k not in ("columns", "constraints", "indexes", "relations",
                                                        "sequences")} == {
        k: v for k, v in old_definition.items() if k not in ("columns", "constraints", "indexes", "relations",
                                                             "sequences")}
    assert set(after["relations"]) - set(old_definition["relations"]) == {
        ("results_experiments", "r"), ("results_experiments_experiment_hash_code_version_repeats_key", "i"),
        ("results_experiments_experiment_id_seq", "S"), ("results_experiments_pkey", "i"),
        ("results_experiments_world_ix", "i"), ("results_runs_experiment_hash_code_version_repeat_key", "i")}
    assert [(r.run_id, r.experiment_hash, r.status, r.attempts) for r in listed] == [
        (b["run_id"], b["experiment_hash"], b["status"], b["attempts"]) for b in before]
    done = next(r for r in listed if r.status == "complete")
    assert (done.tasks, done.accuracy, done.verdicts["freshness_error"], done.prediction, done.mean_latency_ms) == (
        180, 0.75, 40, 44.2, 12.25)
    assert done.files["summary"] == "/r/1/summary.json" and done.finished_at == before[0]["finished_at"]
    assert catalog.find("bbbb")[0].error == "RuntimeError: source refused"

    # New writes work on the adopted table: a new run, the adopted running run completed, the failed one resumed.
    catalog.start(SCENARIO, key("dddd000000000004"), Path("/r/4"))
    running, failed = before[1], before[2]
    catalog.complete(SCENARIO, key(running["experiment_hash"], running["code_version"]), Path("/r/2"),
                     {"tasks": 180, "accuracy": 1.0, "verdicts": {"correct": 180}}, {"mean_latency_ms": 3.0})
    catalog.start(SCENARIO, key(failed["experiment_hash"], failed["code_version"]), Path("/r/3"))
    catalog.fail(key("dddd000000000004"), "KeyboardInterrupt: interrupted")

    after = {r["experiment_hash"]: r for r in all_rows(database)}
    assert after["aaaa000000000001"] == before[0]  # untouched
    assert after["dddd000000000004"]["run_id"] > max(b["run_id"] for b in before)  # the identity goes on
    assert (after["dddd000000000004"]["status"], after["dddd000000000004"]["error"]) == (
        "failed", "KeyboardInterrupt: interrupted")
    resumed = after["aaaa000000000002"]
    assert (resumed["status"], resumed["tasks"], resumed["correct"], resumed["attempts"]) == ("complete", 180, 180, 2)
    restarted = after["bbbb000000000003"]
    assert (restarted["status"], restarted["error"], restarted["attempts"]) == ("running", None, 2)
    with connection(database, autocommit=True) as conn:
        assert delete_world_runs(conn, WORLD) == 4 and catalog_worlds(conn) == set()


def test_revision_0005_clears_the_figures_of_rows_that_are_not_complete(database: str) -> None:
    """Issue 35: a row restarted over a complete one, then failed, kept the earlier attempt's figures with no summary
    behind them (`failed 83.9% 29` in `results list`); the revision clears them, and the code keeps them cleared."""
    from alembic import command

    from churn_assets.evaluation.catalog_schema import alembic_config

    with connection(database, autocommit=True) as conn:
        old_ensure_catalog(conn)
        insert_old_rows(conn)
        conn.execute(b"UPDATE churnbench.results_runs SET tasks = 180, accuracy = 0.839, stale_answers = 29, "
                     b"correct = 151 WHERE status = 'failed'")
    import sqlalchemy as sa

    engine = sa.create_engine(with_driver(database, "psycopg"), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            command.stamp(alembic_config(conn), "0001")
            command.upgrade(alembic_config(conn), "0002")
            conn.commit()
    finally:
        engine.dispose()
    catalog = RunCatalog(database)
    rows = {r.experiment_hash: r for r in catalog.runs()}  # upgraded to head by the read
    failed, complete = rows["bbbb000000000003"], rows["aaaa000000000001"]
    assert (failed.status, failed.tasks, failed.accuracy, failed.stale_answers, failed.verdicts["correct"]) == (
        "failed", None, None, None, None)
    assert (complete.tasks, complete.accuracy, complete.stale_answers) == (180, 0.75, 45)  # kept
    # The code: a complete row started again (its folder removed) has no figures, nor once it fails.
    done = key(complete.experiment_hash, complete.code_version)
    catalog.start(SCENARIO, done, Path("/r/again"), dagster_run_id="run-1")
    restarted = catalog.get(done)
    assert restarted is not None and (restarted.status, restarted.accuracy, restarted.tasks) == ("running", None, None)
    assert restarted.dagster_run_id == "run-1"
    catalog.fail(done, "RuntimeError: source refused")
    failed_again = catalog.get(done)
    assert failed_again is not None and (failed_again.status, failed_again.accuracy) == ("failed", None)


def test_a_table_of_another_shape_is_refused_and_left_as_it_was(database: str) -> None:
    # saas_profile missing, tasks bigint, one column the catalog never had
    other = (*((c, "bigint" if c == "tasks" else t) for c, t in OLD_COLUMNS if c != "saas_profile"), ("notes", "text"))
    with connection(database, autocommit=True) as conn:
        old_ensure_catalog(conn, other)
        conn.execute(b"INSERT INTO churnbench.results_runs (experiment_hash, code_version, world, scenario_key, arm, "
                     b"policy, t_prime, t, agent_id, status, results_dir) VALUES ('e', 'c', 'w', 's', 'a', 'p', "
                     b"'2024-01-01', '2024-01-02', 'det', 'running', '/r')")
    before = definition(database)

    with pytest.raises(CatalogError) as raised:
        RunCatalog(database).start(SCENARIO, key("cccc000000000001"), Path("/r/new"))
    message = str(raised.value)
    assert message.startswith("churnbench.results_runs exists but is not a results catalog this churnbench can adopt")
    assert "saas_profile is missing" in message and "notes is not a catalog column" in message
    assert "tasks is bigint, not integer" in message and "\n" not in message
    assert definition(database) == before and recorded_revisions(database) is None and len(all_rows(database)) == 1
    with pytest.raises(CatalogError):  # a read refuses it too, rather than reading the wrong columns
        RunCatalog(database).runs()


def test_a_catalog_at_an_unknown_revision_is_refused(database: str) -> None:
    catalog = RunCatalog(database)
    catalog.start(SCENARIO, key("cccc000000000001"), Path("/r/new"))
    with connection(database, autocommit=True) as conn:
        conn.execute(b"UPDATE churnbench.churnbench_alembic_version SET version_num = '0099'")
    with pytest.raises(CatalogError, match=r"is at revision '0099', which this churnbench does not know "
                                           rf"\(its newest is {HEAD_REVISION}\)"):
        RunCatalog(database).start(SCENARIO, key("cccc000000000002"), Path("/r/new"))
    assert [r["experiment_hash"] for r in all_rows(database)] == ["cccc000000000001"]


def test_concurrent_first_runs_create_the_catalog_once(database: str) -> None:
    """Four processes' first runs at once: the advisory lock makes the later ones find the catalog made."""
    writers = 4
    barrier, errors = threading.Barrier(writers), []

    def first_run(i: int) -> None:
        try:
            catalog = RunCatalog(database)
            barrier.wait(timeout=30)
            catalog.start(SCENARIO, key(f"eeee00000000000{i}"), Path(f"/r/{i}"))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=first_run, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert recorded_revisions(database) == [HEAD_REVISION]
    assert sorted(r["experiment_hash"] for r in all_rows(database)) == [f"eeee00000000000{i}" for i in range(writers)]


def test_repeats_are_rows_of_their_own_beside_the_experiment_summary(database: str) -> None:
    catalog = RunCatalog(database)
    for repeat in (0, 1, 2):
        k = key("ffff000000000001").repeated(repeat)
        catalog.start(SCENARIO, k, Path(f"/r/{k.folder_name}"))
        catalog.complete(SCENARIO, k, Path(f"/r/{k.folder_name}"), {"tasks": 10, "accuracy": (repeat + 5) / 10,
                                                                     "verdicts": {"correct": repeat + 5}}, {})
    catalog.fail(key("ffff000000000001").repeated(2), "ignored: a complete row stays complete")
    rows = catalog.repeats_of(catalog.find("ffff000000000001")[0])
    assert [(r.repeat, r.status, r.accuracy) for r in rows] == [(0, "complete", 0.5), (1, "complete", 0.6),
                                                               (2, "complete", 0.7)]
    # a scenario key or hash names the experiment (repeat 0 shown); a repeat's folder names that repeat
    assert catalog.resolve("ffff000000000001")[0].repeat == 0
    assert catalog.resolve("/r/ffff000000000001__git-new__rep2")[0].repeat == 2
    assert catalog.resolve("/r/ffff000000000001__git-new__rep2__retry1")[0].repeat == 2
    summary = {"repeats": 3, "tasks": 10, "accuracy_mean": 0.6, "accuracy_interval_90": [0.5, 0.7],
               "pass_hat_k": {"3": 0.4}, "pass_at_k": {"3": 0.8}, "stability": 0.9, "stale_answers_mean": 1.0,
               "per_task": {"t1": {"verdicts": ["correct"] * 3}}}
    catalog.record_experiment(SCENARIO, key("ffff000000000001"), summary)
    catalog.record_experiment(SCENARIO, key("ffff000000000001"), {**summary, "stability": 0.95})  # replaced
    catalog.record_experiment(SCENARIO, key("ffff000000000001"), {**summary, "repeats": 2})
    [three, two] = catalog.experiments("ffff000000000001", "git-new")
    assert (three.repeats, three.summary["stability"], three.summary["per_task"]["t1"]["verdicts"]) == (
        3, 0.95, ["correct"] * 3)
    assert two.repeats == 2
    with connection(database) as conn:
        row = conn.execute(b"SELECT accuracy_low, accuracy_high, pass_hat_k, pass_at_k FROM "
                           b"churnbench.results_experiments WHERE repeats = 3").fetchone()
    assert row == (0.5, 0.7, 0.4, 0.8)
    with connection(database, autocommit=True) as conn:
        assert delete_world_runs(conn, WORLD) == 3
        assert conn.execute(b"SELECT count(*) FROM churnbench.results_experiments").fetchone() == (0,)


def test_the_catalog_commits_durably_on_a_database_that_commits_asynchronously(database: str,
                                                                               services: ServiceUrls) -> None:
    """The embedded cluster's commits are asynchronous (decision 26); a catalog row must survive a Postgres crash
    (decision 309: a run's attempt committed just before Postgres was killed was lost), so the catalog's own
    connections wait for the WAL flush."""
    import sqlalchemy as sa
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(database)["dbname"]
    with connection(services.postgres_server, autocommit=True) as conn:  # whatever the server's own default
        conn.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name)))
    with connection(database) as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
    catalog = RunCatalog(database)
    catalog.start(SCENARIO, key("dddd000000000001"), Path("/r/durable"))
    with catalog._connect() as conn:
        assert conn.execute(sa.text("SHOW synchronous_commit")).scalar() == "on"
