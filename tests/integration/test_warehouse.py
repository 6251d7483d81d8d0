"""The warehouse against the real embedded Postgres: truth and raw layers, as-of reads, the arm role,
the checks (each made to fail on a corrupted row, naming the entity and the day), failed loads, and
`worlds rm`. The session's 30-day world is projected once (`warehouse_world.projected_world`)."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import psycopg
import pytest
from click.testing import CliRunner

from churn_assets.cli import main
from churn_assets.fabric.postgres import (
    TableData,
    WarehouseError,
    connection,
    read_load_key,
    replace_tables,
    schema_name,
    world_schemas,
)
from churn_assets.fabric.quality import parity, parity_days
from churn_assets.fabric.roles import arm_readable, arm_role, arm_secret, connect_arm
from churn_assets.fabric.truth import read_truth_records
from churn_assets.fabric.warehouse_raw import META_TABLE, RAW_TABLES
from churn_assets.orchestration.assets.common import load_world_ledger
from churn_assets.orchestration.assets.warehouse_checks import (
    PARITY_CHECKS,
    warehouse_raw_expectations,
    warehouse_truth_matches_ledger,
)
from churn_assets.orchestration.materialize import MaterializationError, Session, materialize
from churn_assets.orchestration.world_registry import add_world, is_registered, remove_world, world_artefacts
from churn_assets.world.config import load_config
from churn_assets.world.ledger import LEDGER_FILE

from .warehouse_world import AT, FIRST, LAST, Projected, corrupted, metadata, projected_world, run_checks

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def world(session: Session, small_world: str) -> Projected:
    return projected_world(session, small_world)


def check_key(check: dg.AssetChecksDefinition) -> dg.AssetCheckKey:
    [key] = check.check_keys
    return key


# ---------------------------------------------------------------------------------------------------
# `churnbench project`, truth and raw
# ---------------------------------------------------------------------------------------------------


def test_project_command_prints_row_counts(world: Projected) -> None:
    out = world.output
    assert f"world {world.world_id}: 30 days, 2024-01-01..2024-01-30" in out
    assert "truth + raw" in out and "dbt build" in out and "parity checks passed" in out
    assert f"{world.schema('truth')} (tables):" in out and f"{world.schema('raw')} (tables):" in out
    assert f"(as-of views on {AT})" in out
    for name in ("events", "assignments", "consumption", "dim_user", "fct_license_assignment",
                 "spend_by_cost_center_as_of", "active_users_as_of"):
        assert any(line.split()[:1] == [name] for line in out.splitlines()), name


def test_truth_holds_the_ledger_and_loads_are_idempotent(session: Session, session_defs: dg.Definitions,
                                                         world: Projected) -> None:
    loaded = load_world_ledger(session.paths.ledger_dir(world.world_id), world.world_id)
    with connection(session.urls.warehouse) as conn:
        assert read_truth_records(conn, world.world_id) == loaded.records  # byte-for-byte the same records
        raw_key = read_load_key(conn, world.schema("raw"), META_TABLE)
    [run] = materialize(session, session_defs, ["warehouse_truth", "warehouse_raw"], [world.world_id])
    truth, raw = run.metadata["warehouse_truth"], run.metadata["warehouse_raw"]
    assert truth["skipped"] and raw["skipped"]  # same head hash: nothing reloaded
    assert truth["row_counts"]["events"] == loaded.count
    assert raw["load_key"] == raw_key and raw["row_counts"]["consumption"] == 9000


def test_a_failed_load_rolls_back_and_keeps_the_previous_content(session: Session, world: Projected) -> None:
    schema = world.schema("raw")
    with connection(session.urls.warehouse, autocommit=True) as conn:
        before = conn.execute(f'SELECT count(*) FROM "{schema}".users').fetchone()
        key_before = read_load_key(conn, schema, META_TABLE)
        good_users = TableData(RAW_TABLES["users"], [("usr_x", "active", None, dt.date(2024, 1, 1), None, 1)])
        bad_prices = TableData(RAW_TABLES["prices"], [("prd_x", "not money", None, dt.date(2024, 1, 1), None, 2)])
        meta = TableData(RAW_TABLES[META_TABLE], [])
        with pytest.raises(WarehouseError, match=rf"{schema}\.prices failed and was rolled back"):
            replace_tables(conn, world_id=world.world_id, schema=schema, tables=[good_users, bad_prices, meta],
                           meta_table=META_TABLE, load_key="other", force=True)
        assert conn.execute(f'SELECT count(*) FROM "{schema}".users').fetchone() == before
        assert read_load_key(conn, schema, META_TABLE) == key_before


# ---------------------------------------------------------------------------------------------------
# As-of reads
# ---------------------------------------------------------------------------------------------------


def test_as_of_views_equal_the_fold_on_three_days(session: Session, world: Projected) -> None:
    loaded = load_world_ledger(session.paths.ledger_dir(world.world_id), world.world_id)
    days = parity_days(FIRST, LAST)
    assert len(days) == 3
    with connection(session.urls.warehouse) as conn:
        assert parity(conn, world.world_id, loaded.records, days) == []


def test_no_as_of_view_returns_a_row_or_date_after_its_day(session: Session, world: Projected) -> None:
    schema = world.schema("analytics")
    with connection(session.urls.warehouse) as conn:
        views = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.views WHERE table_schema = %s AND table_name LIKE %s",
            (schema, "%\\_as\\_of"))]
        assert len(views) >= 15 and "assignments_as_of" in views and "spend_by_cost_center_as_of" in views
        for view in views:
            dates = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "AND data_type = 'date' AND column_name <> 'as_of_day'", (schema, view))]
            seen = 0
            for day in (FIRST, AT, LAST):
                count = conn.execute(f'SELECT count(*) FROM "{schema}"."{view}" WHERE as_of_day = %s', (day,))
                seen += count.fetchone()[0]  # type: ignore[index]
                for column in dates:
                    later = conn.execute(f'SELECT count(*) FROM "{schema}"."{view}" WHERE as_of_day = %s '
                                         f'AND "{column}" > %s', (day, day)).fetchone()
                    assert later == (0,), f"{view}.{column} shows a date after {day}"
            assert seen > 0, view


def test_an_as_of_day_sees_the_past_not_the_future(session: Session, world: Projected) -> None:
    """A user offboarded after the day reads as active with no offboarding date on that day."""
    schema = world.schema("analytics")
    with connection(session.urls.warehouse) as conn:
        row = conn.execute(f'SELECT user_id, offboarded_on FROM "{schema}".dim_user '
                           "WHERE offboarded_on > %s AND hired_on < %s LIMIT 1", (AT, AT)).fetchone()
        assert row is not None
        user, offboarded = row
        early = conn.execute(f'SELECT is_active, offboarded_on FROM "{schema}".users_as_of '
                             "WHERE as_of_day = %s AND user_id = %s", (AT, user)).fetchone()
        late = conn.execute(f'SELECT is_active, offboarded_on FROM "{schema}".users_as_of '
                            "WHERE as_of_day = %s AND user_id = %s", (LAST, user)).fetchone()
    assert early == (True, None) and late == (False, offboarded)


# ---------------------------------------------------------------------------------------------------
# The read-only arm role
# ---------------------------------------------------------------------------------------------------


def test_arm_role_reads_as_of_views_and_staging_only(session: Session, world: Projected) -> None:
    staging = world.schema("staging")
    with connection(session.urls.warehouse, autocommit=True) as conn:  # as issue 9 will: a staged table
        conn.execute(f'CREATE TABLE IF NOT EXISTS "{staging}".arm_probe (x int)')
        conn.execute(f'INSERT INTO "{staging}".arm_probe VALUES (1)')
        readable = arm_readable(conn, world.world_id)
    try:
        assert set(readable) == {world.schema("analytics"), staging}
        assert all(v.endswith("_as_of") or v == "dim_date" for v in readable[world.schema("analytics")])
        assert "assignments_as_of" in readable[world.schema("analytics")]
        with connect_arm(session.urls.warehouse, world.world_id, arm_secret(session.paths.arm_secret_file)) as arm:
            assert arm.execute("SELECT current_user").fetchone() == (arm_role(world.world_id),)
            n = arm.execute(f'SELECT count(*) FROM "{world.schema("analytics")}".active_users_as_of '
                            "WHERE as_of_day = %s", (AT,)).fetchone()
            assert n is not None and n[0] > 0
            assert arm.execute(f'SELECT x FROM "{staging}".arm_probe').fetchone() == (1,)
            refused = [f'SELECT 1 FROM "{world.schema("truth")}".events LIMIT 1',
                       f'SELECT 1 FROM "{world.schema("raw")}".users LIMIT 1',
                       f'SELECT 1 FROM "{world.schema("analytics")}".dim_user LIMIT 1',
                       f'SELECT 1 FROM "{world.schema("analytics")}".stg_users LIMIT 1']
            for statement in refused:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    arm.execute(statement)
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                arm.execute(f'INSERT INTO "{staging}".arm_probe VALUES (2)')
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                arm.execute(f'CREATE TABLE "{staging}".arm_table (x int)')
    finally:
        with connection(session.urls.warehouse, autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{staging}".arm_probe')


# ---------------------------------------------------------------------------------------------------
# Checks fail on corrupted rows, naming the entity and the day
# ---------------------------------------------------------------------------------------------------


def test_checks_pass_on_the_projected_world(session: Session, session_defs: dg.Definitions,
                                            world: Projected) -> None:
    checks = [warehouse_truth_matches_ledger, warehouse_raw_expectations, *PARITY_CHECKS]
    evaluations = run_checks(session, session_defs, world.world_id, [check_key(c) for c in checks])
    assert {name: e.passed for name, e in evaluations.items()} == {check_key(c).name: True for c in checks}


def test_truth_check_fails_on_a_changed_event(session: Session, session_defs: dg.Definitions,
                                              world: Projected) -> None:
    events = f'"{world.schema("truth")}".events'
    with connection(session.urls.warehouse) as conn:
        seq, entity, payload = conn.execute(f"SELECT seq, entity_id, payload::text FROM {events} "
                                            "WHERE kind = 'consumption_logged' AND at = '2024-01-10' "
                                            "ORDER BY seq LIMIT 1").fetchone()  # type: ignore[misc]
    with corrupted(session.urls.warehouse,
                   [f"UPDATE {events} SET payload = jsonb_set(payload, '{{api_calls}}', '999999') WHERE seq = {seq}"],
                   [f"UPDATE {events} SET payload = '{payload}'::jsonb WHERE seq = {seq}"]):
        [evaluation] = run_checks(session, session_defs, world.world_id,
                                  [check_key(warehouse_truth_matches_ledger)]).values()
    assert not evaluation.passed
    md = metadata(evaluation)
    assert md["entities"] == [entity] and md["days"] == ["2024-01-10"]
    assert f"seq {seq} ({entity} on 2024-01-10)" in md["problems"][0]


def test_raw_expectations_fail_on_bad_rows(session: Session, session_defs: dg.Definitions,
                                           world: Projected) -> None:
    raw = world.schema("raw")
    with connection(session.urls.warehouse) as conn:
        lic, lic_seq, lic_from, lic_to, holder = conn.execute(
            f'SELECT license_id, source_seq, valid_from, valid_to, user_id FROM "{raw}".assignments '
            "WHERE valid_to > valid_from ORDER BY source_seq LIMIT 1").fetchone()  # type: ignore[misc]
        prd, prd_seq, price, prd_from = conn.execute(
            f'SELECT product_id, source_seq, list_price_usd, valid_from FROM "{raw}".prices '
            "ORDER BY source_seq DESC LIMIT 1").fetchone()  # type: ignore[misc]
    bad_to = lic_from - dt.timedelta(days=2)
    do = [f"UPDATE \"{raw}\".assignments SET valid_to = '{bad_to}' WHERE source_seq = {lic_seq}",
          f'UPDATE "{raw}".prices SET list_price_usd = -5 WHERE source_seq = {prd_seq}',
          f'ALTER TABLE "{raw}".tickets ALTER COLUMN user_id DROP NOT NULL',
          f'UPDATE "{raw}".tickets SET user_id = NULL WHERE source_seq = (SELECT min(source_seq) FROM "{raw}".tickets)']
    with connection(session.urls.warehouse) as conn:
        tkt, tkt_user, tkt_from = conn.execute(
            f'SELECT ticket_id, user_id, valid_from FROM "{raw}".tickets ORDER BY source_seq LIMIT 1').fetchone()  # type: ignore[misc]
    undo = [f"UPDATE \"{raw}\".assignments SET valid_to = '{lic_to}' WHERE source_seq = {lic_seq}",
            f'UPDATE "{raw}".prices SET list_price_usd = {price} WHERE source_seq = {prd_seq}',
            f"UPDATE \"{raw}\".tickets SET user_id = '{tkt_user}' WHERE ticket_id = '{tkt}' AND user_id IS NULL",
            f'ALTER TABLE "{raw}".tickets ALTER COLUMN user_id SET NOT NULL']
    with corrupted(session.urls.warehouse, do, undo):
        [evaluation] = run_checks(session, session_defs, world.world_id,
                                  [check_key(warehouse_raw_expectations)]).values()
    assert not evaluation.passed
    failures = metadata(evaluation)["failures"]
    assert any(f.startswith("raw.assignments.valid_to/valid_from") and f"{lic} (valid_from {lic_from})" in f
               for f in failures), failures
    assert any(f.startswith("raw.prices.list_price_usd") and f"{prd} (valid_from {prd_from})" in f
               for f in failures), failures
    assert any(f.startswith("raw.tickets.user_id") and f"{tkt} (valid_from {tkt_from})" in f
               for f in failures), failures
    assert holder  # the row's own holder was left alone


def test_parity_checks_fail_on_corrupted_marts(session: Session, session_defs: dg.Definitions,
                                               world: Projected) -> None:
    """One corrupted mart row per measure: each check fails, naming its entity and the last day."""
    an = world.schema("analytics")
    last = f"'{LAST}'"
    holds = f"valid_from <= {last} AND (valid_to IS NULL OR valid_to > {last})"
    with connection(session.urls.warehouse) as conn:
        user_key, user = conn.execute(
            f'SELECT user_key, user_id FROM "{an}".dim_user WHERE {holds} AND is_active ORDER BY user_id LIMIT 1'
        ).fetchone()  # type: ignore[misc]
        a_key, lic, a_user = conn.execute(
            f'SELECT a.assignment_key, a.license_id, a.user_id FROM "{an}".fct_license_assignment a '
            f'JOIN "{an}".assignments_as_of s ON s.license_id = a.license_id AND s.as_of_day = {last} '
            f"AND s.holder_active WHERE a.{holds} AND a.user_id <> '{user}' ORDER BY a.license_id LIMIT 1"
        ).fetchone()  # type: ignore[misc]
        t_key, ticket = conn.execute(
            f'SELECT ticket_version_key, ticket_id FROM "{an}".fct_ticket WHERE {holds} AND is_open '
            "ORDER BY ticket_id LIMIT 1").fetchone()  # type: ignore[misc]
        p_key, _product, cost_center = conn.execute(
            f'SELECT p.price_key, p.product_id, l.spend_cost_center_id FROM "{an}".fct_price p '
            f'JOIN "{an}".licenses_as_of l ON l.product_id = p.product_id AND l.as_of_day = {last} '
            f"AND l.is_allocated WHERE p.{holds} AND l.license_id <> '{lic}' "
            f"AND l.holder_user_id <> '{user}' ORDER BY p.product_id LIMIT 1").fetchone()  # type: ignore[misc]
    do = [f"UPDATE \"{an}\".dim_user SET is_active = false WHERE user_key = '{user_key}'",
          f"UPDATE \"{an}\".fct_license_assignment SET user_id = 'usr_ghost' WHERE assignment_key = '{a_key}'",
          f"UPDATE \"{an}\".fct_ticket SET is_open = false WHERE ticket_version_key = '{t_key}'",
          f"UPDATE \"{an}\".fct_price SET list_price_usd = list_price_usd + 100 WHERE price_key = '{p_key}'"]
    undo = [f"UPDATE \"{an}\".dim_user SET is_active = true WHERE user_key = '{user_key}'",
            f"UPDATE \"{an}\".fct_license_assignment SET user_id = '{a_user}' WHERE assignment_key = '{a_key}'",
            f"UPDATE \"{an}\".fct_ticket SET is_open = true WHERE ticket_version_key = '{t_key}'",
            f"UPDATE \"{an}\".fct_price SET list_price_usd = list_price_usd - 100 WHERE price_key = '{p_key}'"]
    with corrupted(session.urls.warehouse, do, undo):
        evaluations = run_checks(session, session_defs, world.world_id, [check_key(c) for c in PARITY_CHECKS])
    expected = {"active_users_match_fold": (user, "active_users"),
                "assigned_licenses_match_fold": (lic, "assigned_licenses"),
                "open_tickets_match_fold": (ticket, "open_tickets"),
                "spend_matches_fold": (cost_center, "spend_by_cost_center")}
    assert set(evaluations) == set(expected)
    for name, (entity, measure) in expected.items():
        evaluation = evaluations[name]
        assert not evaluation.passed, name
        md = metadata(evaluation)
        assert entity in md["entities"], (name, md)
        assert any(m.startswith(f"{measure} on {LAST}: {entity} ") for m in md["mismatches"]), (name, md)
    # Put right again: the same checks pass.
    again = run_checks(session, session_defs, world.world_id, [check_key(c) for c in PARITY_CHECKS])
    assert all(e.passed for e in again.values())


# ---------------------------------------------------------------------------------------------------
# Bad input, and `worlds rm`
# ---------------------------------------------------------------------------------------------------


def test_bad_ledger_fails_clearly_and_worlds_rm_drops_the_schemas(
        session: Session, session_defs: dg.Definitions, world: Projected) -> None:
    config = load_config(days=30, seed=505)
    scratch = config.world_id
    add_world(session.paths, session.instance, config)
    try:
        materialize(session, session_defs, ["ledger"], [scratch])
        materialize(session, session_defs, ["warehouse_truth", "warehouse_raw"], [scratch])
        with connection(session.urls.warehouse) as conn:
            key_before = read_load_key(conn, schema_name(scratch, "raw"), META_TABLE)
        assert key_before is not None

        # A tampered ledger: the load is refused naming the line, and the warehouse keeps its content.
        ledger_file = session.paths.ledger_dir(scratch) / LEDGER_FILE
        lines = ledger_file.read_text().splitlines(keepends=True)
        lines[4] = lines[4].replace('"seq":4', '"seq":4 ', 1)
        ledger_file.write_text("".join(lines))
        with pytest.raises(MaterializationError, match=r"line 5"):
            materialize(session, session_defs, ["warehouse_raw"], [scratch])
        result = CliRunner().invoke(main, ["project", "--world", scratch])
        assert result.exit_code == 1 and "line 5" in result.stderr and "Traceback" not in result.stderr
        with connection(session.urls.warehouse) as conn:
            assert read_load_key(conn, schema_name(scratch, "raw"), META_TABLE) == key_before

        bad_day = CliRunner().invoke(main, ["project", "--world", scratch, "--at", "2024-02-30"])
        assert bad_day.exit_code == 2 and "not a calendar day (February 2024 has 29 days)" in bad_day.stderr

        assert "warehouse schemas" in world_artefacts(session.paths, session.instance, scratch)
        removed = remove_world(session.paths, session.instance, scratch)
        assert "warehouse schemas" in removed
        with connection(session.urls.warehouse) as conn:
            left = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)",
                                (list(world_schemas(scratch).values()),)).fetchall()
            kept = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = ANY(%s)",
                                (list(world_schemas(world.world_id).values()),)).fetchone()
        assert left == [] and kept == (4,)  # the other world's schemas are untouched
    finally:
        if is_registered(session.instance, scratch) or world_artefacts(session.paths, session.instance, scratch):
            remove_world(session.paths, session.instance, scratch)
