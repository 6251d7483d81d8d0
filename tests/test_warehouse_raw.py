"""The raw projection (pure): it agrees with the fold on every day, keeps contract terms out, refuses a
ledger that contradicts itself; plus the warehouse's naming, truth rows, roles URL and parity comparison."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from churn_assets.fabric.postgres import (
    _WORLD_ID_RE,
    MAX_IDENTIFIER_BYTES,
    WarehouseError,
    dbt_connection_env,
    parse_schema_name,
    schema_name,
    world_prefix,
    world_schemas,
)
from churn_assets.fabric.quality import UNALLOCATED, Mismatch, compare_measures, parity_days
from churn_assets.fabric.roles import arm_password, arm_role, arm_url
from churn_assets.fabric.truth import EVENTS, LEDGER, truth_tables
from churn_assets.fabric.warehouse_raw import (
    CONTRACT_TERM_FIELDS,
    RAW_TABLES,
    ProjectionError,
    RawProjection,
    WorldInfo,
    project_raw,
)
from churn_assets.world.config import load_config
from churn_assets.world.fold import (
    active_users,
    license_holders,
    list_price_of,
    walk_ledger,
)
from churn_assets.world.ledger import LoadedLedger, load_ledger
from churn_assets.world.simulator import generate_ledger

DBT_DIR = Path(__file__).resolve().parents[1] / "dbt_project"
DAYS = 30


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> LoadedLedger:
    config = load_config(days=DAYS)
    out = tmp_path_factory.mktemp("ledger") / config.world_id
    generate_ledger(config, out)
    return load_ledger(out)


@pytest.fixture(scope="module")
def info(loaded: LoadedLedger) -> WorldInfo:
    assert loaded.manifest is not None and loaded.manifest.world_id is not None
    return WorldInfo(loaded.manifest.world_id, dt.date(2024, 1, 1), dt.date(2024, 1, 30),
                     dates_through=dt.date(2024, 6, 28), head_hash=loaded.head_hash)


@pytest.fixture(scope="module")
def raw(loaded: LoadedLedger, info: WorldInfo) -> RawProjection:
    return project_raw(loaded.records, info)


def rows(raw: RawProjection, table: str) -> Iterator[dict[str, Any]]:
    names = RAW_TABLES[table].column_names
    for row in raw.tables[table]:
        yield dict(zip(names, row, strict=True))


def holds(row: dict[str, Any], day: dt.date) -> bool:
    return row["valid_from"] <= day and (row["valid_to"] is None or day < row["valid_to"])


# ---------------------------------------------------------------------------------------------------
# The projection agrees with the fold
# ---------------------------------------------------------------------------------------------------


def test_every_table_is_projected_with_the_spec_shape(raw: RawProjection) -> None:
    assert list(raw.tables) == list(RAW_TABLES)
    py_types = {"text": str, "date": dt.date, "bigint": int, "integer": int, "boolean": bool,
                "numeric(12,2)": float}
    for name, spec in RAW_TABLES.items():
        assert raw.tables[name], f"raw table {name} is empty"
        for row in raw.tables[name][:50]:
            assert len(row) == len(spec.columns)
            for value, column in zip(row, spec.columns, strict=True):
                if value is None:
                    assert column.nullable, f"{name}.{column.name} is NULL but not nullable"
                else:
                    assert isinstance(value, py_types[column.sql_type]), (name, column.name, value)
    counts = raw.row_counts
    assert counts["consumption"] == 9000 and counts["world"] == 1


def test_projection_equals_the_fold_on_every_day(loaded: LoadedLedger, raw: RawProjection) -> None:
    users, members = list(rows(raw, "users")), list(rows(raw, "cost_center_memberships"))
    holdings, prices = list(rows(raw, "assignments")), list(rows(raw, "prices"))
    tickets, vendors = list(rows(raw, "tickets")), list(rows(raw, "vendors"))
    checked = 0
    for day, state in walk_ledger(loaded.records):
        assert {u["user_id"] for u in users if holds(u, day) and u["status"] == "active"} == active_users(state, day)
        assert {h["license_id"]: h["user_id"] for h in holdings if holds(h, day)} == license_holders(state, day)
        for m in members:
            if holds(m, day):
                assert state.cost_center_membership.cost_center_on(m["user_id"], day) == m["cost_center_id"]
        for p in prices:
            if holds(p, day):
                assert list_price_of(state, p["product_id"], day) == p["list_price_usd"]
        for t in tickets:
            if holds(t, day):
                assert state.tickets.tickets[t["ticket_id"]].status_on(day) == t["status"]
        for v in vendors:
            if holds(v, day):
                version = state.vendor_dims.vendors[v["vendor_id"]].version_on(day)
                assert version is not None and (version.name, version.tier) == (v["vendor_name"], v["vendor_tier"])
        checked += 1
    assert checked == DAYS


def test_intervals_are_well_formed_and_never_overlap(raw: RawProjection) -> None:
    entity = {"vendors": "vendor_id", "users": "user_id", "cost_center_memberships": "user_id",
              "assignments": "license_id", "prices": "product_id", "tickets": "ticket_id"}
    for table, key in entity.items():
        by_entity: dict[str, list[dict[str, Any]]] = {}
        for row in rows(raw, table):
            assert row["valid_to"] is None or row["valid_from"] <= row["valid_to"], (table, row)
            by_entity.setdefault(row[key], []).append(row)
        for versions in by_entity.values():
            versions.sort(key=lambda r: (r["valid_from"], r["source_seq"]))
            for a, b in itertools.pairwise(versions):
                if table == "assignments":  # a license may sit unassigned between two holders
                    assert a["valid_to"] is not None and a["valid_to"] <= b["valid_from"], (a, b)
                else:  # the other classes always have exactly one version from the first on
                    assert a["valid_to"] == b["valid_from"], (table, a, b)
            if table != "assignments":
                assert versions[-1]["valid_to"] is None


def test_contract_terms_never_enter_the_raw_layer(loaded: LoadedLedger, info: WorldInfo,
                                                  raw: RawProjection) -> None:
    assert RAW_TABLES["contracts"].column_names == ("contract_id", "valid_from", "valid_to", "source_seq")
    for name, spec in RAW_TABLES.items():
        forbidden = CONTRACT_TERM_FIELDS - {"vendor_id"}  # products name their vendor; contracts never do
        assert not forbidden & set(spec.column_names), name
    signed = {r["entity_id"] for r in loaded.records if r["kind"] == "contract_signed"}
    assert {c["contract_id"] for c in rows(raw, "contracts")} == signed
    # Renewals and expiries change nothing in the warehouse.
    without = [r for r in loaded.records if r["kind"] not in ("contract_renewed", "contract_expired")]
    assert len(without) < loaded.count
    stripped = project_raw(without, info)
    assert all(stripped.tables[t] == raw.tables[t] for t in RAW_TABLES if t != "world")


def test_world_row_and_load_key(raw: RawProjection, info: WorldInfo, loaded: LoadedLedger) -> None:
    [world] = list(rows(raw, "world"))
    assert world["world_id"] == info.world_id and world["event_count"] == loaded.count
    assert (world["first_day"], world["last_day"]) == (dt.date(2024, 1, 1), dt.date(2024, 1, 30))
    assert world["dates_through"] == dt.date(2024, 6, 28) and world["head_hash"] == loaded.head_hash
    other_head = WorldInfo(info.world_id, info.calendar_start, info.calendar_end, info.dates_through, "f" * 64)
    assert other_head.load_key() != info.load_key() == world["load_key"]


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda recs: recs.append(next(r for r in recs if r["kind"] == "license_assigned")), "already held"),
    (lambda recs: next(r for r in recs if r["kind"] == "license_reassigned")["payload"].update(
        from_user_id="usr_nobody"), "taken from usr_nobody"),
    (lambda recs: next(r for r in recs if r["kind"] == "ticket_status_changed")["payload"].update(
        previous_status="in_progress"), "ticket leaves status in_progress but is open"),
    (lambda recs: recs.insert(len(recs) // 2, {**recs[0], "kind": "mystery"}), "unknown event kind"),
])
def test_a_contradictory_ledger_is_refused_naming_the_event(loaded: LoadedLedger, info: WorldInfo,
                                                           mutate: Any, message: str) -> None:
    records = copy.deepcopy(loaded.records)
    mutate(records)
    with pytest.raises(ProjectionError, match=message) as err:
        project_raw(sorted(records, key=lambda r: r["at"]), info)
    assert re.search(r"seq \d+ \(\w+ \S+ on 2024-\d\d-\d\d\)", str(err.value))


def test_format_1_ledgers_are_refused_clearly(info: WorldInfo) -> None:
    v1 = WorldInfo(info.world_id, info.calendar_start, info.calendar_end, format_version=1)
    with pytest.raises(ProjectionError, match="format-2 ledgers only"):
        project_raw([], v1)


# ---------------------------------------------------------------------------------------------------
# Truth rows
# ---------------------------------------------------------------------------------------------------


def test_truth_rows_carry_every_record_field(loaded: LoadedLedger, info: WorldInfo) -> None:
    events, ledger = truth_tables(info.world_id, loaded)
    assert events.spec is EVENTS and ledger.spec is LEDGER
    assert len(events.rows) == loaded.count
    first = dict(zip(EVENTS.column_names, events.rows[0], strict=True))
    rec = loaded.records[0]
    assert {k: first[k] for k in ("seq", "at", "kind", "entity_id", "hash", "prev_hash")} == {
        k: rec[k] for k in ("seq", "at", "kind", "entity_id", "hash", "prev_hash")}
    [meta] = ledger.rows
    assert meta[0] == info.world_id and meta[2] == loaded.count and meta[3] == loaded.head_hash


# ---------------------------------------------------------------------------------------------------
# Names, connection settings, roles, dbt project
# ---------------------------------------------------------------------------------------------------


def test_schema_names() -> None:
    assert world_prefix("default-s42-3f9a1c") == "default_s42_3f9a1c"
    assert schema_name("my_world-s7-abcdef", "raw") == "my_world_s7_abcdef_raw"
    assert world_schemas("default-s42-3f9a1c") == {
        "truth": "default_s42_3f9a1c_truth", "raw": "default_s42_3f9a1c_raw",
        "analytics": "default_s42_3f9a1c_analytics", "staging": "default_s42_3f9a1c_staging"}
    for layer, schema in world_schemas("my_world-s7-abcdef").items():
        assert parse_schema_name(schema) == ("my_world-s7-abcdef", layer)
    assert parse_schema_name("public") is None and parse_schema_name("default_s42_3f9a1c_other") is None
    for bad in ("Default-s42-3f9a1c", "default-s42-3f9a1", "default_s42_3f9a1c", "x; drop table y"):
        with pytest.raises(WarehouseError, match="not a world id"):
            world_prefix(bad)
    long_id = f"{'a' * 31}-s{'9' * 30}-abcdef"
    assert len(f"{world_prefix(long_id)}_analytics") > MAX_IDENTIFIER_BYTES
    with pytest.raises(WarehouseError, match="too long"):
        schema_name(long_id, "analytics")


def test_dbt_macro_validates_world_ids_like_python() -> None:
    macro = (DBT_DIR / "macros" / "world.sql").read_text()
    pattern = re.search(r"modules\.re\.match\('([^']+)'", macro)
    assert pattern is not None
    assert pattern.group(1).replace("[0-9]", r"\d") == _WORLD_ID_RE.pattern


def test_dbt_connection_env_from_a_socket_url() -> None:
    env = dbt_connection_env("postgresql://postgres@/churnbench?host=/var/tmp/pg/data&port=5433")
    assert env == {"CHURNBENCH_DBT_HOST": "/var/tmp/pg/data", "CHURNBENCH_DBT_PORT": "5433",
                   "CHURNBENCH_DBT_USER": "postgres", "CHURNBENCH_DBT_DBNAME": "churnbench"}
    env = dbt_connection_env("postgresql://u:s3cret@db.example:6543/wh")
    assert env["CHURNBENCH_DBT_PASSWORD"] == "s3cret" and env["CHURNBENCH_DBT_HOST"] == "db.example"


def test_arm_url_and_role_name_match_the_dbt_grants() -> None:
    world = "default-s42-3f9a1c"
    assert arm_role(world) == "default_s42_3f9a1c_arm"
    # No password in the URL (connect_arm passes it as a parameter), whatever the warehouse URL had.
    assert arm_url("postgresql://postgres@/churnbench?host=/tmp/s", world) == \
        "postgresql://default_s42_3f9a1c_arm@/churnbench?host=/tmp/s"
    assert arm_url("postgresql://admin:x@db:5432/wh", world) == "postgresql://default_s42_3f9a1c_arm@db:5432/wh"
    project = yaml.safe_load((DBT_DIR / "dbt_project.yml").read_text())
    (grant,) = project["models"]["churnbench"]["as_of"]["+grants"]["select"]
    # dbt renders `var('world') | replace('-', '_')` with the world of the build: the same rule as arm_role.
    jinja = "{{ var('world', 'unset-s0-000000') | replace('-', '_') }}"
    assert grant == jinja + "_arm"
    assert grant.replace(jinja, world.replace("-", "_")) == arm_role(world)


def test_arm_passwords_differ_per_world_and_secret() -> None:
    a, b = "default-s42-3f9a1c", "default-s43-3f9a1c"
    assert arm_password(a, "s1") == arm_password(a, "s1")
    assert len({arm_password(a, "s1"), arm_password(b, "s1"), arm_password(a, "s2")}) == 3
    assert "s1" not in arm_password(a, "s1")


# ---------------------------------------------------------------------------------------------------
# Parity comparison
# ---------------------------------------------------------------------------------------------------


def test_parity_days() -> None:
    first, last = dt.date(2024, 1, 1), dt.date(2024, 6, 28)
    assert parity_days(first, last, [dt.date(2024, 4, 27), dt.date(2025, 1, 1)]) == [
        first, dt.date(2024, 3, 30), dt.date(2024, 4, 27), last]


def test_compare_measures_names_entity_and_day() -> None:
    d = dt.date(2024, 1, 5)
    expected = {d: {"active_users": {"usr_1", "usr_2"}, "assigned_licenses": {"lic_1": "usr_1"},
                    "spend_by_cost_center": {"cc_1": 10.0, UNALLOCATED: 5.0}}}
    actual = {d: {"active_users": {"usr_1", "usr_3"}, "assigned_licenses": {"lic_1": "usr_9"},
                  "spend_by_cost_center": {"cc_1": 10.004, UNALLOCATED: 6.0}}}
    found = compare_measures(expected, actual)
    assert [(m.measure, m.entity) for m in found] == [
        ("active_users", "usr_2"), ("active_users", "usr_3"), ("assigned_licenses", "lic_1"),
        ("spend_by_cost_center", UNALLOCATED)]
    assert str(found[0]) == "active_users on 2024-01-05: usr_2 is missing from the warehouse"
    assert str(found[1]) == "active_users on 2024-01-05: usr_3 is in the warehouse, not in the ledger"
    assert "lic_1 is 'usr_9' in the warehouse, 'usr_1' in the ledger" in str(found[2])
    assert compare_measures(expected, expected) == []
    assert isinstance(found[0], Mismatch)
