"""Staged caches and the scenario materializer against the real embedded services, on the 30-day world.

One scenario (T' = 2024-01-10, T = 2024-01-14, tiered: hot classes refreshed on 01-12 and 01-14, the rest
served as of T') is materialized once for the module; then:
- each staged partition equals its source as of its day, and also the dbt as-of history views (an
  independent implementation of "as seen on d"); no date in any partition is after its refresh day;
- corrupting a staged row fails its check (differs from the source), and so does a date after the day;
- re-materializing a partition changes nothing (no duplicate rows, same content hash);
- a partition whose data vanished behind its record is rebuilt;
- a second process materializing an overlapping scenario runs only the missing partitions (asserted on
  the instance's materialization records);
- a failing input makes the materializer list it, and what depends on it, and build the rest;
- `worlds rm` removes the staged tables (the warehouse cleanup drops the whole `<world>_staging` schema).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from churn_assets.arms.registry import define_scenario
from churn_assets.fabric.postgres import connection, schema_exists, schema_name
from churn_assets.fabric.roles import arm_role, arm_secret
from churn_assets.freshness.scenario import Scenario
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.staging import (
    META_TABLE,
    REFRESH_DAY,
    partition_record,
    relation_columns,
    staged_specs,
    verify_partition,
    write_partition,
)
from churn_assets.orchestration.materialize import MaterializationError, Session, materialize, run_checks
from churn_assets.orchestration.partitions import world_day_key
from churn_assets.orchestration.scenario_inputs import (
    BlockingChecks,
    asset_keys_of,
    blocking_checks,
    existing_inputs,
    scenario_plan,
)
from churn_assets.orchestration.scenario_materializer import (
    SCENARIO_TAG,
    ScenarioBuild,
    ScenarioMaterializationError,
    materialize_scenario,
)
from churn_assets.orchestration.scenarios import register_scenario
from churn_assets.orchestration.world_registry import add_world, remove_world, world_artefacts
from churn_assets.world.config import load_config

pytestmark = pytest.mark.integration

T_PRIME, T = dt.date(2024, 1, 10), dt.date(2024, 1, 14)
SPECS = {s.class_name: s for s in staged_specs(load_registry())}
# The dbt as-of history view of each staged source (models/as_of/*_history_as_of.sql).
HISTORY_VIEWS = {"assignments": "assignments_history_as_of", "user_status": "users_history_as_of",
                 "prices": "prices_history_as_of", "cost_center_membership": "cost_center_membership_history_as_of",
                 "vendor_dims": "vendors_history_as_of"}


def grounding_scenario(session: Session, world: str, t_prime: dt.date, t: dt.date, policy: str) -> Scenario:
    """The grounding arm's scenario, defined and registered (the materializer plans registered scenarios)."""
    scenario = define_scenario(world, "grounding", policy, t_prime, t)
    register_scenario(session.paths, session.instance, scenario)
    return scenario


@pytest.fixture(scope="module")
def scenario(session: Session, session_defs: dg.Definitions, small_world: str) -> ScenarioBuild:
    lines: list[str] = []
    defined = grounding_scenario(session, small_world, T_PRIME, T, "tiered")
    build = materialize_scenario(session, session_defs, defined, echo=lines.append)
    assert lines[0].startswith(f"scenario {defined.label}: 17 inputs")
    assert lines[-1].startswith(f"scenario {defined.label}: built")
    return build


@pytest.fixture(scope="module")
def url(session: Session) -> str:
    return session.urls.warehouse


def checks_of(defs: dg.Definitions) -> BlockingChecks:
    return blocking_checks(defs.resolve_asset_graph())


def served_partitions(build: ScenarioBuild) -> list[tuple[str, dt.date]]:
    return [(c, build.served_vintage[c]) for c in SPECS]


def test_the_scenario_serves_its_policys_vintage(scenario: ScenarioBuild, session: Session,
                                                 session_defs: dg.Definitions) -> None:
    assert {c: scenario.served_vintage[c] for c in (*SPECS, "contract_terms", "tickets")} == {
        "assignments": T, "user_status": T, "prices": T_PRIME, "cost_center_membership": T_PRIME,
        "vendor_dims": T_PRIME, "contract_terms": T_PRIME, "tickets": T}
    existing, vanished = existing_inputs(session, scenario.plan.inputs, checks=checks_of(session_defs))
    assert existing == set(scenario.plan.inputs) and not vanished


def test_a_staged_partition_equals_its_source_as_of_the_day(scenario: ScenarioBuild, url: str) -> None:
    world = scenario.scenario.world_id
    staging, analytics = schema_name(world, "staging"), schema_name(world, "analytics")
    with connection(url) as conn:
        for name, day in served_partitions(scenario):
            spec = SPECS[name]
            found = verify_partition(conn, world, spec, day)
            assert found.passed, found.problems
            assert found.rows == found.expected_rows > 0 and found.content_hash == found.recorded_hash
            # The same rows as dbt's own as-of history view on that day, on the columns both have.
            view_cols = [c.name for c in relation_columns(conn, analytics, HISTORY_VIEWS[name])
                         if c.name != "as_of_day"]
            staged_cols = [c.name for c in relation_columns(conn, staging, spec.table)]
            common = ", ".join(f'"{c}"' for c in view_cols if c in staged_cols)
            staged = f'SELECT {common} FROM "{staging}"."{spec.table}" WHERE refresh_day = %(d)s'
            view = f'SELECT {common} FROM "{analytics}"."{HISTORY_VIEWS[name]}" WHERE as_of_day = %(d)s'
            for a, b in ((staged, view), (view, staged)):
                row = conn.execute(f"SELECT count(*) FROM (({a}) EXCEPT ALL ({b})) x".encode(), {"d": day}).fetchone()
                assert row is not None and row[0] == 0, (name, day)
        # The copy is "as the source looked": rows whose end lies after the day are stored open.
        day = scenario.served_vintage["user_status"]
        later = conn.execute(f'SELECT count(*) FROM "{analytics}"."dim_user" WHERE valid_from <= %s AND valid_to > %s'
                             .encode(), (day, day)).fetchone()
        assert later is not None and later[0] > 0, "the small world has no user change after T: test is vacuous"
        # Readable by the arms' read-only role.
        for spec in SPECS.values():
            row = conn.execute("SELECT has_table_privilege(%s, %s, 'SELECT')",
                               (arm_role(world), f'"{staging}"."{spec.table}"')).fetchone()
            assert row == (True,), spec.table


def test_no_date_in_a_partition_is_after_its_refresh_day(scenario: ScenarioBuild, url: str) -> None:
    world = scenario.scenario.world_id
    staging = schema_name(world, "staging")
    with connection(url) as conn:
        for spec in SPECS.values():
            dates = [c.name for c in relation_columns(conn, staging, spec.table) if c.is_date and c.name != REFRESH_DAY]
            assert {"valid_from", "valid_to"} <= set(dates)
            later = " OR ".join(f'"{c}" > refresh_day' for c in dates)
            row = conn.execute(f'SELECT count(*), count(DISTINCT refresh_day) FROM "{staging}"."{spec.table}" '
                               f"WHERE {later}".encode()).fetchone()
            assert row == (0, 0), spec.table


def check_result(session: Session, defs: dg.Definitions, asset: str, world: str, day: dt.date
                 ) -> tuple[bool, dict[str, Any], str]:
    [evaluation] = run_checks(session, defs, [dg.AssetCheckKey(dg.AssetKey(asset), "equals_source_as_of_day")],
                              str(world_day_key(world, day)))
    return (evaluation.passed, {k: v.value for k, v in evaluation.metadata.items()},
            evaluation.description or "")


@pytest.fixture
def restore_partition(session: Session, url: str, scenario: ScenarioBuild) -> Iterator[None]:
    """Rewrite the prices partition after a test corrupted it."""
    yield
    with connection(url, autocommit=True) as conn:
        write_partition(conn, scenario.scenario.world_id, SPECS["prices"], T_PRIME)


def test_a_corrupted_staged_row_fails_the_check(session: Session, session_defs: dg.Definitions, url: str,
                                                scenario: ScenarioBuild, restore_partition: None) -> None:
    world = scenario.scenario.world_id
    staging = schema_name(world, "staging")
    assert check_result(session, session_defs, "staged_prices", world, T_PRIME)[0]
    with connection(url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{staging}"."prices" SET list_price_usd = list_price_usd + 1 WHERE ctid = '
                     f'(SELECT ctid FROM "{staging}"."prices" WHERE refresh_day = %s LIMIT 1)'.encode(), (T_PRIME,))
    passed, metadata, description = check_result(session, session_defs, "staged_prices", world, T_PRIME)
    assert not passed
    assert "differs from" in description and f"{world.replace('-', '_')}_analytics.fct_price" in description
    assert len(metadata["only_staged"]) == len(metadata["only_source"]) == 1
    assert metadata["late_dates"] == {}
    # The other classes' partitions are untouched.
    assert check_result(session, session_defs, "staged_vendor_dims", world, T_PRIME)[0]


def test_a_read_of_a_partition_whose_content_is_another_days_stops_with_an_integrity_error(
        session: Session, url: str, scenario: ScenarioBuild) -> None:
    """Another day's rows under this day's label: the reader's hash of what it read is not the hash the
    partition was written with, so the read stops (naming the table and day) instead of serving T' as T."""
    from churn_assets.fabric.sources import close_sources, connect_sources
    from churn_assets.grounding.registry import load_registry
    from churn_assets.grounding.router import Router
    from churn_assets.grounding.routes import RoutingMode
    from churn_assets.grounding.rows import Request
    from churn_assets.grounding.traces import DataIntegrityError

    world = scenario.scenario.world_id
    staging = schema_name(world, "staging")
    served = scenario.served_vintage
    assert served["user_status"] == T  # the hot class is refreshed on T; its T' copy differs (tested above)

    def read_users() -> Any:
        sources = connect_sources(world, warehouse_url=url,
                                  warehouse_secret=arm_secret(session.paths.arm_secret_file))
        try:
            router = Router(load_registry(), sources, t=T, served=served, mode=RoutingMode.REGISTRY)
            return router.retrieve([Request("users")])
        finally:
            close_sources(sources)

    _rows, entry = read_users()
    [read] = entry.reads
    assert (read.data_time, read.planned_day) == (T, T) and read.observed_hash
    with connection(url) as conn:
        assert read.observed_hash == partition_record(conn, world, "user_status", T).content_hash  # type: ignore[union-attr]
    try:
        with connection(url, autocommit=True) as conn, conn.transaction():
            columns = [c.name for c in relation_columns(conn, staging, "user_status") if c.name != REFRESH_DAY]
            cols = ", ".join(f'"{c}"' for c in columns)
            conn.execute(f'DELETE FROM "{staging}"."user_status" WHERE refresh_day = %s'.encode(), (T,))
            conn.execute(f'INSERT INTO "{staging}"."user_status" ({cols}, refresh_day) SELECT {cols}, %s FROM '
                         f'"{staging}"."user_status" WHERE refresh_day = %s'.encode(), (T, T_PRIME))
        with pytest.raises(DataIntegrityError, match=rf"{staging}\.user_status @ {T}.*not what its label says"):
            read_users()
    finally:
        with connection(url, autocommit=True) as conn:
            write_partition(conn, world, SPECS["user_status"], T)
    assert read_users()[1].reads[0].observed_hash == read.observed_hash  # rebuilt: served again


def test_a_date_after_the_refresh_day_fails_the_check(session: Session, session_defs: dg.Definitions, url: str,
                                                     scenario: ScenarioBuild, restore_partition: None) -> None:
    world = scenario.scenario.world_id
    staging = schema_name(world, "staging")
    with connection(url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{staging}"."prices" SET valid_to = refresh_day + 3 WHERE ctid = (SELECT ctid FROM '
                     f'"{staging}"."prices" WHERE refresh_day = %s AND valid_to IS NULL LIMIT 1)'.encode(), (T_PRIME,))
    passed, metadata, description = check_result(session, session_defs, "staged_prices", world, T_PRIME)
    assert not passed
    assert metadata["late_dates"] == {"valid_to": 1}
    assert f"1 row(s) with valid_to later than {T_PRIME}" in description
    # A blocking check: materializing over the bad partition repairs it, and the check passes again.
    materialize(session, session_defs, ["staged_prices"], [world_day_key(world, T_PRIME)])
    assert check_result(session, session_defs, "staged_prices", world, T_PRIME)[0]


def test_rematerializing_a_partition_is_idempotent(session: Session, session_defs: dg.Definitions, url: str,
                                                   scenario: ScenarioBuild) -> None:
    world = scenario.scenario.world_id
    staging = schema_name(world, "staging")
    key = world_day_key(world, T)

    def state() -> tuple[Any, ...]:
        with connection(url) as conn:
            rows = conn.execute(f'SELECT count(*), count(DISTINCT assignment_key) FROM "{staging}"."assignments" '
                                "WHERE refresh_day = %s".encode(), (T,)).fetchone()
            meta = conn.execute(f'SELECT count(*) FROM "{staging}"."{META_TABLE}" WHERE staged_table = %s AND '
                                "refresh_day = %s".encode(), ("assignments", T)).fetchone()
            record = partition_record(conn, world, "assignments", T)
        return rows, meta, record

    before = state()
    runs = [materialize(session, session_defs, ["staged_assignments"], [key])[0] for _ in range(2)]
    after = state()
    assert before == after
    assert before[0] is not None and before[0][0] == before[0][1] > 0 and before[1] == (1,)
    hashes = {r.metadata["staged_assignments"]["content_hash"] for r in runs}
    assert hashes == {before[2].content_hash}  # type: ignore[union-attr]
    metadata = runs[0].metadata["staged_assignments"]
    assert metadata["refresh_day"] == T.isoformat() and metadata["rows"] == before[0][0]
    assert metadata["source"] == f"{schema_name(world, 'analytics')}.fct_license_assignment"
    assert metadata["table"] == f"{staging}.assignments"


def test_a_partition_whose_data_vanished_is_rebuilt(session: Session, session_defs: dg.Definitions, url: str,
                                                    scenario: ScenarioBuild) -> None:
    world = scenario.scenario.world_id
    staging = schema_name(world, "staging")
    with connection(url, autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{staging}"."vendor_dims" WHERE refresh_day = %s'.encode(), (T_PRIME,))
        conn.execute(f'DELETE FROM "{staging}"."{META_TABLE}" WHERE staged_table = %s AND refresh_day = %s'.encode(),
                     ("vendor_dims", T_PRIME))
    build = materialize_scenario(session, session_defs, scenario.scenario)
    [(item, why)] = build.rebuilt.items()
    assert why == "recorded as materialized but its data is gone"
    assert (item.asset, item.day) == ("staged_vendor_dims", T_PRIME)
    assert build.built == [item]
    with connection(url) as conn:
        assert verify_partition(conn, world, SPECS["vendor_dims"], T_PRIME).passed


SECOND_PROCESS = textwrap.dedent("""
    import datetime as dt, sys, warnings
    warnings.simplefilter("ignore")
    from churn_assets.arms.registry import define_scenario
    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.scenario_materializer import materialize_scenario
    from churn_assets.orchestration.scenarios import register_scenario
    from churn_assets.state import StatePaths

    world, t_prime, t, policy = sys.argv[1:5]
    paths = StatePaths.resolve()
    scenario = define_scenario(world, "grounding", policy, dt.date.fromisoformat(t_prime), dt.date.fromisoformat(t))
    with open_session(paths) as session:
        register_scenario(paths, session.instance, scenario)
        build = materialize_scenario(session, defs_for(str(paths.root)), scenario, echo=print)
    print("SERVED", sorted((c, d.isoformat()) for c, d in build.served_vintage.items()))
""")


def materialized_by_tag(instance: dg.DagsterInstance, tag: str) -> set[tuple[str, str]]:
    """(asset, partition) of every materialization made by runs carrying this scenario tag."""
    out = set()
    for record in instance.get_run_records(filters=dg.RunsFilter(tags={SCENARIO_TAG: tag})):
        for event in instance.all_logs(record.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            data = event.dagster_event
            assert data is not None and data.asset_key is not None
            out.add((data.asset_key.to_user_string(), str(data.partition)))
    return out


def materialization_counts(instance: dg.DagsterInstance, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
    out = {}
    for asset, partition in pairs:
        result = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey.from_user_string(asset), asset_partitions=[partition]),
            limit=1000)
        out[(asset, partition)] = len(result.records)
    return out


def test_a_second_process_runs_only_the_missing_partitions(session: Session, scenario: ScenarioBuild,
                                                           state_dir: Path, churnbench_exe: str,
                                                           session_defs: dg.Definitions) -> None:
    world = scenario.scenario.world_id
    t2 = T + dt.timedelta(days=2)  # overlaps: same T', hot classes one refresh further
    second = grounding_scenario(session, world, T_PRIME, t2, "tiered")
    plan = scenario_plan(session, second)  # planned once and stored: the second process reads this plan
    assert "rag_index" not in {i.asset for i in plan.inputs}  # only the RAG arms read the RAG corpus
    existing, _ = existing_inputs(session, plan.inputs, checks=checks_of(session_defs))
    missing = [i for i in plan.inputs if i not in existing]
    assert {(i.asset, i.day) for i in missing} >= {
        ("operational_store", t2), ("contract_documents", t2), ("staged_assignments", t2),
        ("staged_user_status", t2), ("task_set", t2)}
    assert all(i.day == t2 for i in missing)
    pair = lambda i: {(k, i.world if i.day is None else str(world_day_key(i.world, i.day)))  # noqa: E731
                      for k in asset_keys_of(i)}
    expected = set().union(*(pair(i) for i in missing))
    reused = set().union(*(pair(i) for i in existing))
    counts_before = materialization_counts(session.instance, reused)

    python = str(Path(churnbench_exe).parent / "python")
    env = {**os.environ, "CHURNBENCH_STATE_DIR": str(state_dir)}
    done = subprocess.run([python, "-c", SECOND_PROCESS, world, T_PRIME.isoformat(), t2.isoformat(), "tiered"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(plan.inputs)} inputs, {len(existing)} reused, {len(missing)} to build" in done.stdout
    assert "('assignments', '2024-01-16')" in done.stdout and "('prices', '2024-01-10')" in done.stdout

    assert materialized_by_tag(session.instance, second.key) == expected
    assert materialization_counts(session.instance, reused) == counts_before  # nothing existing ran again
    assert existing_inputs(session, plan.inputs, checks=checks_of(session_defs))[0] == set(plan.inputs)


def test_a_failed_input_is_listed_with_what_depends_on_it(session: Session, session_defs: dg.Definitions,
                                                          scenario: ScenarioBuild, monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    import churn_assets.orchestration.scenario_materializer as sm

    world = scenario.scenario.world_id
    t_prime = dt.date(2024, 1, 24)  # off: every cached class at T', one day later T (days no other test uses)
    real = sm.materialize

    def failing(session: Session, defs: dg.Definitions, assets: list[str], keys: list[Any], **kw: Any) -> Any:
        if assets == ["contract_documents"] and str(keys[0]).startswith(t_prime.isoformat()):
            raise MaterializationError("contract_documents broke on purpose")
        if assets == ["vector_index"]:
            raise AssertionError("a step after a failed input must be skipped, not run")
        return real(session, defs, assets, keys, **kw)

    monkeypatch.setattr(sm, "materialize", failing)
    off = grounding_scenario(session, world, t_prime, t_prime + dt.timedelta(days=1), "off")
    with pytest.raises(ScenarioMaterializationError) as raised:
        materialize_scenario(session, session_defs, off)
    message = str(raised.value)
    assert "1 run(s) failed, 1 skipped" in message
    assert f"failed  contract_documents [{world} {t_prime}]: contract_documents broke on purpose" in message
    assert f"skipped vector_index [{world} {t_prime}]" in message
    # Independent inputs were built all the same.
    plan = scenario_plan(session, off)
    existing, _ = existing_inputs(session, plan.inputs, checks=checks_of(session_defs))
    assert {i.asset for i in plan.inputs if i not in existing} == {"contract_documents", "vector_index"}


def test_worlds_rm_removes_the_staged_tables(session: Session, url: str) -> None:
    """The warehouse cleanup of `worlds rm` drops the whole `<world>_staging` schema, staged tables included.
    The world gets a hand-made source mart: a dbt build is not needed to stage from it."""
    config = load_config(days=30, seed=9)
    world = config.world_id
    add_world(session.paths, session.instance, config)
    analytics, staging = schema_name(world, "analytics"), schema_name(world, "staging")
    spec = SPECS["prices"]
    with connection(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{analytics}"'.encode())
        conn.execute(f'CREATE TABLE "{analytics}"."fct_price" (price_key text, product_id text, '
                     "list_price_usd numeric, price_change_reason text, valid_from date, valid_to date, "
                     "source_seq bigint)".encode())
        conn.execute(f'INSERT INTO "{analytics}"."fct_price" VALUES (%s, %s, 10, %s, %s, %s, 1), '
                     "(%s, %s, 12, %s, %s, NULL, 2)".encode(),
                     ("k1", "p1", "listed", dt.date(2024, 1, 1), dt.date(2024, 1, 5),
                      "k2", "p1", "raise", dt.date(2024, 1, 5)))
        written = write_partition(conn, world, spec, dt.date(2024, 1, 3))
        assert (written.rows, written.created_table) == (1, True)
        assert verify_partition(conn, world, spec, dt.date(2024, 1, 3)).passed
        row = conn.execute(f'SELECT valid_to FROM "{staging}"."prices"'.encode()).fetchone()
        assert row == (None,)  # the 01-05 price change was not known on 01-03
    assert "warehouse schemas" in world_artefacts(session.paths, session.instance, world)

    removed = remove_world(session.paths, session.instance, world)
    assert "warehouse schemas" in removed
    with connection(url) as conn:
        assert not schema_exists(conn, staging) and not schema_exists(conn, analytics)
        assert relation_columns(conn, staging, spec.table) == []
        assert partition_record(conn, world, spec.table, dt.date(2024, 1, 3)) is None
    assert world_artefacts(session.paths, session.instance, world) == []
