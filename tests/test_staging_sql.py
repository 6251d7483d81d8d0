"""The staged caches' SQL, built without a database: what each partition copies, and the text is valid SQL.

The builders return `psycopg.sql` compositions; `text` renders them as psycopg sends them (the rendering
needs no connection for these names and literals).

Semantics against the real marts (equality with the source as of d, no date after d) are tested in
tests/integration/test_staged_caches.py.
"""

from __future__ import annotations

import copy
import re

import pytest
import sqlglot
import yaml
from psycopg import sql

from churn_assets.grounding.registry import load_registry, parse_registry
from churn_assets.grounding.staging import (
    META_TABLE,
    REFRESH_DAY,
    SourceColumn,
    StagedSpec,
    StagingError,
    as_of_select,
    create_table_sql,
    diff_sql,
    late_dates_sql,
    meta_table_sql,
    partition_hash_sql,
    source_hash_sql,
    staged_asset_name,
    staged_specs,
    write_sql,
)

SOURCE, STAGING = "w_s1_abcdef_analytics", "w_s1_abcdef_staging"
ASSIGNMENTS = StagedSpec("assignments", "assignments", "fct_license_assignment")
ASSIGNMENT_COLUMNS = [
    SourceColumn("assignment_key", "text"), SourceColumn("license_id", "text"), SourceColumn("user_id", "text"),
    SourceColumn("product_id", "text"), SourceColumn("ended_by", "text"), SourceColumn("valid_from", "date"),
    SourceColumn("valid_to", "date"), SourceColumn("source_seq", "bigint"),
]
USER_STATUS = StagedSpec("user_status", "user_status", "dim_user")
USER_COLUMNS = [
    SourceColumn("user_key", "text"), SourceColumn("user_id", "text"), SourceColumn("user_status", "text"),
    SourceColumn("is_active", "boolean"), SourceColumn("cost_center_id", "text"), SourceColumn("hired_on", "date"),
    SourceColumn("offboarded_on", "date"), SourceColumn("valid_from", "date"), SourceColumn("valid_to", "date"),
]
DAY = "CAST(%(day)s AS date)"


def text(statement: sql.Composable) -> str:
    return statement.as_string(None)


def parses(statement: str) -> None:
    """Valid Postgres syntax once the day parameter is bound."""
    sqlglot.parse_one(statement.replace("%(day)s", "'2024-04-22'"), read="postgres")


def select_items(statement: str) -> list[str]:
    """The items of the outermost SELECT list (split on top-level commas)."""
    body = statement[len("SELECT "):statement.index(" FROM ")]
    items, depth, current = [], 0, ""
    for ch in body:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += ch
    return [*items, current.strip()]


# ---------------------------------------------------------------------------------------------------
# What is staged where
# ---------------------------------------------------------------------------------------------------


def test_every_staged_table_of_the_registry_has_a_spec_and_an_asset() -> None:
    registry = load_registry()
    specs = {s.class_name: s for s in staged_specs(registry)}
    assert {n: (s.table, s.source_relation, s.asset_name) for n, s in specs.items()} == {
        "assignments": ("assignments", "fct_license_assignment", "staged_assignments"),
        "user_status": ("user_status", "dim_user", "staged_user_status"),
        "prices": ("prices", "fct_price", "staged_prices"),
        "cost_center_membership": ("cost_center_membership", "fct_cost_center_membership",
                                   "staged_cost_center_membership"),
        "vendor_dims": ("vendor_dims", "dim_vendor", "staged_vendor_dims"),
    }
    # contract_terms is cached as vector_index partitions; a live class has no staged asset.
    assert staged_asset_name(registry["contract_terms"]) == "vector_index"
    assert {staged_asset_name(c) for c in registry.staged_classes} == {s.asset_name for s in specs.values()} | {
        "vector_index"}
    with pytest.raises(StagingError, match="live"):
        staged_asset_name(registry["consumption"])
    assert specs["assignments"].ends_with_valid_to == ("ended_by",)


def test_a_staged_table_from_another_store_is_refused() -> None:
    from importlib import resources

    data = yaml.safe_load(resources.files("churn_assets.grounding").joinpath("registry.yaml").read_text())
    bad = copy.deepcopy(data)
    bad["entity_classes"]["prices"]["source"] = {"store": "saas", "relation": "/prices"}
    with pytest.raises(StagingError, match="prices: a staged table copies a warehouse mart"):
        staged_specs(parse_registry(bad))
    bad = copy.deepcopy(data)
    bad["entity_classes"]["prices"]["staged"] = {"table": "Prices; drop"}
    with pytest.raises(StagingError, match="not a plain SQL identifier"):
        staged_specs(parse_registry(bad))


# ---------------------------------------------------------------------------------------------------
# The copy as the source looked on d
# ---------------------------------------------------------------------------------------------------


def test_as_of_select_keeps_history_up_to_the_day_and_opens_later_ends() -> None:
    statement = text(as_of_select(ASSIGNMENTS, ASSIGNMENT_COLUMNS, SOURCE))
    parses(statement)
    items = select_items(statement)
    # Every source column, in source order, under its own name.
    assert [re.findall(r'"(\w+)"', i)[-1] for i in items] == [c.name for c in ASSIGNMENT_COLUMNS]
    by_name = dict(zip([c.name for c in ASSIGNMENT_COLUMNS], items, strict=True))
    assert by_name["valid_from"] == '"valid_from"'
    assert by_name["valid_to"] == f'CASE WHEN "valid_to" <= {DAY} THEN "valid_to" END AS "valid_to"'
    # The reason an assignment ended is not known before it ends.
    assert by_name["ended_by"] == f'CASE WHEN "valid_to" <= {DAY} THEN "ended_by" END AS "ended_by"'
    assert by_name["license_id"] == '"license_id"' and by_name["source_seq"] == '"source_seq"'
    assert statement.endswith(f'FROM "{SOURCE}"."fct_license_assignment" WHERE "valid_from" <= {DAY}')


def test_every_other_date_after_the_day_reads_as_null() -> None:
    by_name = dict(zip([c.name for c in USER_COLUMNS],
                       select_items(text(as_of_select(USER_STATUS, USER_COLUMNS, SOURCE))), strict=True))
    assert by_name["offboarded_on"] == f'CASE WHEN "offboarded_on" <= {DAY} THEN "offboarded_on" END AS "offboarded_on"'
    assert by_name["hired_on"].startswith('CASE WHEN "hired_on" <=')
    assert by_name["is_active"] == '"is_active"' and by_name["cost_center_id"] == '"cost_center_id"'
    # Timestamps count as dates too.
    spec = StagedSpec("prices", "prices", "fct_price")
    columns = [SourceColumn("valid_from", "date"), SourceColumn("valid_to", "date"),
               SourceColumn("changed_at", "timestamp with time zone")]
    assert select_items(text(as_of_select(spec, columns, SOURCE)))[2].startswith('CASE WHEN "changed_at" <=')


def test_a_source_that_is_not_scd2_is_refused() -> None:
    with pytest.raises(StagingError, match="no column valid_to"):
        as_of_select(USER_STATUS, [c for c in USER_COLUMNS if c.name != "valid_to"], SOURCE)
    with pytest.raises(StagingError, match="no column ended_by"):
        as_of_select(ASSIGNMENTS, [c for c in ASSIGNMENT_COLUMNS if c.name != "ended_by"], SOURCE)
    with pytest.raises(StagingError, match="already has a column refresh_day"):
        as_of_select(USER_STATUS, [*USER_COLUMNS, SourceColumn(REFRESH_DAY, "date")], SOURCE)


# ---------------------------------------------------------------------------------------------------
# Table, write, hash, verification
# ---------------------------------------------------------------------------------------------------


def test_the_staged_table_has_the_source_columns_then_refresh_day() -> None:
    create, index, comment = map(text, create_table_sql(USER_STATUS, USER_COLUMNS, STAGING))
    for statement in (create, index, comment, text(meta_table_sql(STAGING))):
        parses(statement)
    assert create.startswith(f'CREATE TABLE "{STAGING}"."user_status" (')
    columns = create[create.index("(") + 1:-1].split(", ")
    assert columns == [f'"{c.name}" {c.sql_type}' for c in USER_COLUMNS] + ['"refresh_day" date NOT NULL']
    assert index.endswith(f'ON "{STAGING}"."user_status" ("refresh_day")')
    meta = text(meta_table_sql(STAGING))
    assert f'"{STAGING}"."{META_TABLE}"' in meta and 'PRIMARY KEY (staged_table, "refresh_day")' in meta


def test_a_write_replaces_exactly_one_refresh_day() -> None:
    delete, insert = map(text, write_sql(ASSIGNMENTS, ASSIGNMENT_COLUMNS, SOURCE, STAGING))
    parses(delete)
    parses(insert)
    assert delete == f'DELETE FROM "{STAGING}"."assignments" WHERE "refresh_day" = {DAY}'
    assert insert.startswith(f'INSERT INTO "{STAGING}"."assignments" ("assignment_key", "license_id", ')
    assert '"source_seq", "refresh_day") SELECT s.*, ' + DAY in insert
    assert text(as_of_select(ASSIGNMENTS, ASSIGNMENT_COLUMNS, SOURCE)) in insert


def test_the_content_hash_ignores_refresh_day_and_the_server_locale() -> None:
    staged = text(partition_hash_sql(ASSIGNMENT_COLUMNS, STAGING, "assignments"))
    source = text(source_hash_sql(ASSIGNMENTS, ASSIGNMENT_COLUMNS, SOURCE))
    for statement in (staged, source):
        parses(statement)
        assert 'ORDER BY r::text COLLATE "C"' in statement and statement.startswith("SELECT count(*), md5(")
    inner = staged[staged.index("FROM (") + 6:]
    assert '"refresh_day"' not in inner.split(" FROM ")[0]  # selected columns: the source's only
    assert f'WHERE "refresh_day" = {DAY}' in staged


def test_diff_and_late_dates_read_one_partition() -> None:
    diff = text(diff_sql(ASSIGNMENTS, ASSIGNMENT_COLUMNS, SOURCE, STAGING, limit=5))
    parses(diff)
    assert diff.count("EXCEPT ALL") == 2 and diff.count("LIMIT 5") == 2
    late = text(late_dates_sql(["hired_on", "offboarded_on", "valid_from", "valid_to"], STAGING, "user_status"))
    parses(late)
    assert late.count("FILTER (WHERE") == 4 and f'"offboarded_on" > {DAY}' in late
    assert late.endswith(f'WHERE "refresh_day" = {DAY}')


def test_the_content_hash_statement_is_pinned() -> None:
    # Recorded hashes are compared with recomputed ones (the partition check, the scenario materializer):
    # the statement that computes them must not drift. This is the text the hand-quoted builder made.
    columns = [SourceColumn("user_id", "text"), SourceColumn('odd"name', "date")]
    assert text(partition_hash_sql(columns, STAGING, "user_status")) == (
        "SELECT count(*), md5(coalesce(string_agg(r::text, E'\\n' ORDER BY r::text COLLATE \"C\"), '')) FROM "
        f'(SELECT "user_id", "odd""name" FROM "{STAGING}"."user_status" WHERE "refresh_day" = {DAY}) AS r')
