"""Staged caches: per-world copies of each staged entity class, one partition per refresh day.

Contract with the router (issue 11) and any other reader
--------------------------------------------------------
- One table `<world>_staging.<table>` per staged class (`staged.table` in `registry.yaml`), copied from the
  class's source mart in `<world>_analytics`:

      assignments            <- fct_license_assignment
      user_status            <- dim_user
      prices                 <- fct_price
      cost_center_membership <- fct_cost_center_membership
      vendor_dims            <- dim_vendor

  (`contract_terms` is cached as `vector_index` partitions, not here.)
- Columns: exactly the source mart's columns (same names, types and order), then `refresh_day date NOT NULL`.
- Partition (class, d) = the rows `WHERE refresh_day = d`: the source's rows with `valid_from <= d` (the rows
  valid on d and the class's history up to d), as the source looked on d (docs/rules.md, "Staged
  copies hold history"):
    * a `valid_to` later than d is stored as NULL (open: the end was not known on d);
    * any other date later than d is stored as NULL (e.g. `dim_user.offboarded_on`);
    * a column describing an end that was not known on d is NULL with it (`fct_license_assignment.ended_by`).
  So no date in a partition is later than d, and a partition's content depends only on (world, class, d).
- Readers select exactly `WHERE refresh_day = <served day>` (the class's day in the scenario's served-vintage
  map) and apply as-of filters themselves (`valid_from <= T AND (valid_to IS NULL OR T < valid_to)` for the
  state served at T; since nothing in the partition is later than d, that is the state as of d). Never
  `max(refresh_day)`: the newest partition that happens to exist is not the one a policy serves.
- `refresh_day` is indexed. The read-only arm role (`fabric/roles.py`) may SELECT every staged table; the
  grant is made in the transaction that creates the table.
- Bookkeeping: `<world>_staging.staged_partitions(staged_table, refresh_day, source_relation, row_count,
  content_hash)`, one row per written partition, written in the same transaction as the rows. A partition
  exists when its row is there (the scenario materializer and the asset check read it).

Writing a partition is idempotent: one transaction deletes that refresh day's rows and inserts them again
(under an advisory lock per table and day, so two processes never interleave). The content hash covers
the partition's rows without `refresh_day`: two refresh days with identical content have the same hash.

Everything here composes SQL (`psycopg.sql`: identifiers quoted by `sql.Identifier`, values bound) and
plans, pure and testable without a database or Dagster; the small `write_partition` / `verify_partition`
helpers run it on a psycopg connection.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError
from churn_assets.fabric.postgres import content_hash_sql, ident, relation_exists, schema_name
from churn_assets.fabric.roles import grant_arm_access
from churn_assets.faults import fault_point
from churn_assets.grounding.registry import EntityClass, Registry

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

REFRESH_DAY = "refresh_day"
META_TABLE = "staged_partitions"
VALID_FROM, VALID_TO = "valid_from", "valid_to"
SOURCE_LAYER, STAGING_LAYER = "analytics", "staging"
STAGED_ASSET_PREFIX = "staged_"

# Columns that describe the end of a row's validity: unknown on d while the end is after d, so they are
# NULL exactly when `valid_to` is stored as NULL (keyed by source relation; the as-of views do the same).
ENDS_WITH_VALID_TO: dict[str, tuple[str, ...]] = {
    "fct_license_assignment": ("ended_by",),
}
MAX_DIFF_ROWS = 20  # rows shown per side when a partition differs from its source

_IDENT_RE = re.compile(r"^[a-z_][a-z0-9_]*$")


class StagingError(UserFacingError):
    """A staged partition cannot be written or verified; the message names the world, class and day."""


# ---------------------------------------------------------------------------------------------------
# What is staged where
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StagedSpec:
    """One staged class: where its partitions live and what they copy."""

    class_name: str
    table: str  # <world>_staging.<table>
    source_relation: str  # <world>_analytics.<relation> (a dbt mart)

    @property
    def asset_name(self) -> str:
        return f"{STAGED_ASSET_PREFIX}{self.class_name}"

    @property
    def ends_with_valid_to(self) -> tuple[str, ...]:
        return ENDS_WITH_VALID_TO.get(self.source_relation, ())


def staged_asset_name(entity_class: EntityClass) -> str:
    """The asset whose day partitions are the class's refreshes: `staged_<class>` for a staged table, the
    index asset for a class cached as an index (`contract_terms` -> `vector_index`)."""
    if entity_class.staged_table:
        return f"{STAGED_ASSET_PREFIX}{entity_class.name}"
    if entity_class.staged_index:
        return entity_class.staged_index
    raise StagingError(f"entity class {entity_class.name} is live: it is never staged")


def staged_specs(registry: Registry) -> list[StagedSpec]:
    """Every class cached as a `<world>_staging` table, in registry order. Only warehouse marts are
    staged as tables (a class from another store is cached some other way, e.g. as an index)."""
    specs = []
    for c in registry.staged_classes:
        if not c.staged_table:
            continue
        if c.source.store != "warehouse":
            raise StagingError(f"class {c.name}: a staged table copies a warehouse mart; source store "
                               f"{c.source.store!r} is not supported")
        for name in (c.staged_table, c.source.relation):
            if not _IDENT_RE.match(name):
                raise StagingError(f"class {c.name}: {name!r} is not a plain SQL identifier")
        specs.append(StagedSpec(c.name, c.staged_table, c.source.relation))
    return specs


# ---------------------------------------------------------------------------------------------------
# SQL (pure: composed here, run below)
# ---------------------------------------------------------------------------------------------------
# Every statement is a `psycopg.sql` composition: identifiers are `sql.Identifier`s (`ident`), the partition's
# day is the bound parameter `%(day)s`, and the other values (a table comment, a LIMIT) are `sql.Literal`s.
# Rendered, each statement is byte for byte the text the hand-quoted builders made before (decision 77):
# the content hash computed in SQL is the same.


def _day() -> sql.SQL:
    """The partition's day: the parameter every statement here binds as {"day": <date>}."""
    from psycopg import sql

    return sql.SQL("CAST(%(day)s AS date)")


@dataclass(frozen=True)
class SourceColumn:
    name: str
    sql_type: str  # as format_type() prints it

    @property
    def is_date(self) -> bool:
        return self.sql_type == "date" or self.sql_type.startswith("timestamp")


def _require_interval(spec: StagedSpec, columns: Sequence[SourceColumn]) -> None:
    names = {c.name for c in columns}
    missing = [n for n in (VALID_FROM, VALID_TO, *spec.ends_with_valid_to) if n not in names]
    if missing:
        raise StagingError(f"source {spec.source_relation} of class {spec.class_name} has no column "
                           f"{', '.join(missing)}: a staged class copies an SCD2 mart (valid_from, valid_to)")
    if REFRESH_DAY in names:
        raise StagingError(f"source {spec.source_relation} already has a column {REFRESH_DAY}")


def _names(columns: Sequence[SourceColumn]) -> sql.Composable:
    from psycopg import sql

    return sql.SQL(", ").join(ident(c.name) for c in columns)


def _on_day(column: str = REFRESH_DAY) -> sql.Composable:
    """`"<column>" = CAST(%(day)s AS date)`: one partition."""
    from psycopg import sql

    return sql.SQL("{} = {}").format(ident(column), _day())


def as_of_select(spec: StagedSpec, columns: Sequence[SourceColumn], source_schema: str) -> sql.Composed:
    """The source as it looked on `%(day)s`: rows with valid_from <= day; a valid_to or any other date
    after the day reads as NULL, and so do the columns that describe that end. Columns in source order."""
    from psycopg import sql

    _require_interval(spec, columns)
    ends = set(spec.ends_with_valid_to)
    # An end (or any event) after d had not happened yet on d.
    later_is_null = sql.SQL("CASE WHEN {when} <= {day} THEN {col} END AS {col}")
    items: list[sql.Composable] = []
    for c in columns:
        col = ident(c.name)
        if c.name == VALID_FROM:
            items.append(col)  # <= day by the WHERE clause
        elif c.is_date:
            items.append(later_is_null.format(when=col, day=_day(), col=col))
        elif c.name in ends:
            items.append(later_is_null.format(when=ident(VALID_TO), day=_day(), col=col))
        else:
            items.append(col)
    return sql.SQL("SELECT {} FROM {} WHERE {} <= {}").format(
        sql.SQL(", ").join(items), ident(source_schema, spec.source_relation), ident(VALID_FROM), _day())


def _column_type(column: SourceColumn) -> sql.SQL:
    from psycopg import sql

    # A type expression, not a name: the text format_type() printed for the source column (`numeric(12,2)`,
    # `timestamp with time zone`), in which the server already quoted any identifier. It cannot be an
    # `sql.Identifier` (`numeric(12,2)` is no name); it is only ever read from the catalogue (`source_columns`).
    return sql.SQL(column.sql_type)


def create_table_sql(spec: StagedSpec, columns: Sequence[SourceColumn], staging_schema: str
                     ) -> list[sql.Composed]:
    """DDL of a staged table: the source's columns (names, types, order), then `refresh_day date NOT NULL`,
    indexed on refresh_day (every read selects one refresh day)."""
    from psycopg import sql

    _require_interval(spec, columns)
    table = ident(staging_schema, spec.table)
    cols = [sql.SQL("{} {}").format(ident(c.name), _column_type(c)) for c in columns]
    cols.append(sql.SQL("{} date NOT NULL").format(ident(REFRESH_DAY)))
    comment = (f"Staged cache of class {spec.class_name}: partitions of {spec.source_relation} as of each "
               f"{REFRESH_DAY}")
    return [
        sql.SQL("CREATE TABLE {} ({})").format(table, sql.SQL(", ").join(cols)),
        sql.SQL("CREATE INDEX {} ON {} ({})").format(ident(f"{spec.table}_refresh_day_ix"), table,
                                                     ident(REFRESH_DAY)),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(table, sql.Literal(comment)),
    ]


def meta_table_sql(staging_schema: str) -> sql.Composed:
    from psycopg import sql

    return sql.SQL("CREATE TABLE IF NOT EXISTS {table} (staged_table text NOT NULL, {day} date NOT NULL, "
                   "source_relation text NOT NULL, row_count bigint NOT NULL, content_hash text NOT NULL, "
                   "PRIMARY KEY (staged_table, {day}))").format(table=ident(staging_schema, META_TABLE),
                                                                 day=ident(REFRESH_DAY))


def write_sql(spec: StagedSpec, columns: Sequence[SourceColumn], source_schema: str, staging_schema: str
              ) -> list[sql.Composed]:
    """The statements that (re)write partition `%(day)s`; run them in one transaction."""
    from psycopg import sql

    table = ident(staging_schema, spec.table)
    return [
        sql.SQL("DELETE FROM {} WHERE {}").format(table, _on_day()),
        sql.SQL("INSERT INTO {} ({}, {}) SELECT s.*, {} FROM ({}) AS s").format(
            table, _names(columns), ident(REFRESH_DAY), _day(), as_of_select(spec, columns, source_schema)),
    ]


def partition_select(columns: Sequence[SourceColumn], staging_schema: str, table: str) -> sql.Composed:
    """Partition `%(day)s` of a staged table, without its refresh_day column (comparable with the source)."""
    from psycopg import sql

    return sql.SQL("SELECT {} FROM {} WHERE {}").format(_names(columns), ident(staging_schema, table), _on_day())


def partition_hash_sql(columns: Sequence[SourceColumn], staging_schema: str, table: str) -> sql.Composed:
    """(rows, content hash) of partition `%(day)s`; the hash ignores refresh_day."""
    return content_hash_sql(partition_select(columns, staging_schema, table))


def source_hash_sql(spec: StagedSpec, columns: Sequence[SourceColumn], source_schema: str) -> sql.Composed:
    """(rows, content hash) the partition of `%(day)s` should have: the source as of the day."""
    return content_hash_sql(as_of_select(spec, columns, source_schema))


def diff_sql(spec: StagedSpec, columns: Sequence[SourceColumn], source_schema: str, staging_schema: str,
             limit: int = MAX_DIFF_ROWS) -> sql.Composed:
    """Rows of partition `%(day)s` that the source as of the day does not have (side 'staged') and the
    other way round (side 'source'), duplicates counted, at most `limit` per side."""
    from psycopg import sql

    return sql.SQL("(SELECT 'staged' AS side, d::text AS row FROM (({staged}) EXCEPT ALL ({source})) AS d "
                   "LIMIT {limit}) UNION ALL "
                   "(SELECT 'source', d::text FROM (({source}) EXCEPT ALL ({staged})) AS d LIMIT {limit})").format(
        staged=partition_select(columns, staging_schema, spec.table),
        source=as_of_select(spec, columns, source_schema), limit=sql.Literal(int(limit)))


def late_dates_sql(date_columns: Sequence[str], staging_schema: str, table: str) -> sql.SQL | sql.Composed:
    """One row: for each date column, how many rows of partition `%(day)s` carry a date after the day."""
    from psycopg import sql

    if not date_columns:
        return sql.SQL("SELECT")
    counts = [sql.SQL("count(*) FILTER (WHERE {col} > {day}) AS {col}").format(col=ident(c), day=_day())
              for c in date_columns]
    return sql.SQL("SELECT {} FROM {} WHERE {}").format(sql.SQL(", ").join(counts), ident(staging_schema, table),
                                                        _on_day())


@dataclass(frozen=True)
class _PartitionSql:
    """What writing and checking a partition of one staged table runs (the day is bound per call)."""

    write: tuple[sql.Composed, ...]
    partition_hash: sql.Composed
    source_hash: sql.Composed


@functools.lru_cache(maxsize=64)
def _partition_sql(spec: StagedSpec, columns: tuple[SourceColumn, ...], source_schema: str, staging_schema: str
                   ) -> _PartitionSql:
    # The statements depend on the class, its source's columns and the world, never on the day: composed once
    # per process instead of once per partition (composing them costs ~0.3 ms, on the path the benchmark's
    # "one staged partition" measures; psycopg renders the cached compositions at each execute).
    return _PartitionSql(tuple(write_sql(spec, columns, source_schema, staging_schema)),
                         partition_hash_sql(columns, staging_schema, spec.table),
                         source_hash_sql(spec, columns, source_schema))


# ---------------------------------------------------------------------------------------------------
# Running it (psycopg)
# ---------------------------------------------------------------------------------------------------


def relation_columns(conn: psycopg.Connection[Any], schema: str, relation: str) -> list[SourceColumn]:
    """Columns of a table or view, in order ([] when it does not exist)."""
    rows = conn.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'v', 'm', 'p')
        ORDER BY a.attnum
        """,
        (schema, relation),
    ).fetchall()
    return [SourceColumn(name, sql_type) for name, sql_type in rows]


def source_columns(conn: psycopg.Connection[Any], world_id: str, spec: StagedSpec) -> list[SourceColumn]:
    source_schema = schema_name(world_id, SOURCE_LAYER)
    columns = relation_columns(conn, source_schema, spec.source_relation)
    if not columns:
        raise StagingError(f"world {world_id} has no {source_schema}.{spec.source_relation} (the source of "
                           f"{spec.class_name}): materialize the world's dbt build first")
    return columns


@dataclass(frozen=True)
class StagedPartition:
    """A written partition, as recorded in the meta table."""

    world_id: str
    table: str
    refresh_day: dt.date
    source_relation: str
    rows: int
    content_hash: str
    seconds: float = 0.0
    created_table: bool = False

    @property
    def source(self) -> str:
        return f"{schema_name(self.world_id, SOURCE_LAYER)}.{self.source_relation}"

    @property
    def location(self) -> str:
        return f"{schema_name(self.world_id, STAGING_LAYER)}.{self.table}"


def _ensure_table(conn: psycopg.Connection[Any], world_id: str, spec: StagedSpec,
                  columns: Sequence[SourceColumn]) -> bool:
    """Create the staged table (and grant it to the arm role) unless it exists with the source's columns;
    a table whose columns differ (the mart changed) is dropped with its partitions' meta rows. Runs inside
    the caller's transaction. True when the table was (re)created."""
    staging = schema_name(world_id, STAGING_LAYER)
    wanted = [*columns, SourceColumn(REFRESH_DAY, "date")]
    existing = relation_columns(conn, staging, spec.table)
    if existing == wanted:
        return False
    # One DDL writer per world (two processes creating the first staged table of a world collide in the
    # catalogue otherwise); taken only on this slow path.
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"churnbench staging ddl {staging}",))
    existing = relation_columns(conn, staging, spec.table)
    if existing == wanted:
        return False
    from psycopg import sql

    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(staging)))
    conn.execute(meta_table_sql(staging))
    if existing:
        conn.execute(sql.SQL("DROP TABLE {}").format(ident(staging, spec.table)))
        conn.execute(sql.SQL("DELETE FROM {} WHERE staged_table = %s").format(ident(staging, META_TABLE)),
                     (spec.table,))
    for statement in create_table_sql(spec, columns, staging):
        conn.execute(statement)
    # In the creating transaction, so no reader ever sees a staged table the arms cannot read.
    grant_arm_access(conn, world_id)
    return True


def write_partition(conn: psycopg.Connection[Any], world_id: str, spec: StagedSpec, day: dt.date
                    ) -> StagedPartition:
    """(Re)write partition (world, class, day) from the source mart, in one transaction: delete the day's
    rows, insert the source as of the day, record rows and content hash in the meta table."""
    from psycopg import sql

    started = time.perf_counter()
    staging, source = schema_name(world_id, STAGING_LAYER), schema_name(world_id, SOURCE_LAYER)
    meta = ident(staging, META_TABLE)
    params = {"day": day}
    conn.autocommit = True  # so that `transaction()` is the one real transaction
    with conn.transaction():
        columns = source_columns(conn, world_id, spec)
        _require_interval(spec, columns)
        created = _ensure_table(conn, world_id, spec, columns)
        # One writer per partition: two processes refreshing the same day never interleave delete and insert.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                     (f"churnbench staging {staging}.{spec.table} {day.isoformat()}",))
        statements = _partition_sql(spec, tuple(columns), source, staging)
        for statement in statements.write:
            conn.execute(statement, params)
        row = conn.execute(statements.partition_hash, params).fetchone()
        rows, digest = (int(row[0]), str(row[1])) if row else (0, "")
        conn.execute(sql.SQL("DELETE FROM {} WHERE staged_table = %s AND {} = %s").format(meta, ident(REFRESH_DAY)),
                     (spec.table, day))
        conn.execute(sql.SQL("INSERT INTO {} (staged_table, {}, source_relation, row_count, content_hash) "
                             "VALUES (%s, %s, %s, %s, %s)").format(meta, ident(REFRESH_DAY)),
                     (spec.table, day, spec.source_relation, rows, digest))
        fault_point("staged_before_commit")  # the reliability tests kill Postgres here, mid-transaction
    return StagedPartition(world_id, spec.table, day, spec.source_relation, rows, digest,
                           time.perf_counter() - started, created)


def partition_record(conn: psycopg.Connection[Any], world_id: str, table: str, day: dt.date
                     ) -> StagedPartition | None:
    """The meta row of a written partition, or None when (world, table, day) was never written."""
    from psycopg import sql

    staging = schema_name(world_id, STAGING_LAYER)
    if not relation_exists(conn, staging, META_TABLE):
        return None
    row = conn.execute(sql.SQL("SELECT source_relation, row_count, content_hash FROM {} "
                               "WHERE staged_table = %s AND {} = %s").format(ident(staging, META_TABLE),
                                                                             ident(REFRESH_DAY)),
                       (table, day)).fetchone()
    return None if row is None else StagedPartition(world_id, table, day, row[0], int(row[1]), row[2])


def staged_days(conn: psycopg.Connection[Any], world_id: str, table: str) -> list[dt.date]:
    """The refresh days written for a staged table of a world, in calendar order."""
    from psycopg import sql

    staging = schema_name(world_id, STAGING_LAYER)
    if not relation_exists(conn, staging, META_TABLE):
        return []
    rows = conn.execute(sql.SQL("SELECT {} FROM {} WHERE staged_table = %s ORDER BY 1").format(
        ident(REFRESH_DAY), ident(staging, META_TABLE)), (table,))
    return [r[0] for r in rows]


@dataclass(frozen=True)
class Verification:
    """What `verify_partition` found; `problems` is empty when the partition is right."""

    world_id: str
    table: str
    refresh_day: dt.date
    rows: int
    expected_rows: int
    content_hash: str
    expected_hash: str
    recorded_hash: str | None
    late_dates: dict[str, int] = field(default_factory=dict)  # date column -> rows with a date after the day
    only_staged: list[str] = field(default_factory=list)  # rows (as text) the source as of the day lacks
    only_source: list[str] = field(default_factory=list)  # rows of the source as of the day not staged
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def verify_partition(conn: psycopg.Connection[Any], world_id: str, spec: StagedSpec, day: dt.date
                     ) -> Verification:
    """Check partition (world, class, day): it exists, holds no date after the day (every date column of
    the staged table, whatever the spec says), and equals its source as of the day, row for row."""
    staging, source = schema_name(world_id, STAGING_LAYER), schema_name(world_id, SOURCE_LAYER)
    where = f"{staging}.{spec.table} [{day}]"
    params = {"day": day}
    record = partition_record(conn, world_id, spec.table, day)
    staged_cols = relation_columns(conn, staging, spec.table)
    if record is None or not staged_cols:
        problem = f"{where} was never written: materialize {spec.asset_name} for world {world_id} and day {day}"
        return Verification(world_id, spec.table, day, 0, 0, "", "", None, problems=[problem])
    problems: list[str] = []
    date_cols = [c.name for c in staged_cols if c.is_date and c.name != REFRESH_DAY]
    late: dict[str, int] = {}
    if date_cols:
        row = conn.execute(late_dates_sql(date_cols, staging, spec.table), params).fetchone()
        late = {c: int(n) for c, n in zip(date_cols, row or (), strict=True) if n}
    for col, n in late.items():
        problems.append(f"{where}: {n} row(s) with {col} later than {day}")
    columns = source_columns(conn, world_id, spec)
    data_cols = [c for c in staged_cols if c.name != REFRESH_DAY]
    if data_cols != list(columns):
        problems.append(f"{where}: columns differ from {source}.{spec.source_relation}'s")
        return Verification(world_id, spec.table, day, record.rows, 0, "", "", record.content_hash,
                            late_dates=late, problems=problems)
    statements = _partition_sql(spec, tuple(columns), source, staging)
    got = conn.execute(statements.partition_hash, params).fetchone()
    want = conn.execute(statements.source_hash, params).fetchone()
    rows, digest = (int(got[0]), str(got[1])) if got else (0, "")
    expected_rows, expected_hash = (int(want[0]), str(want[1])) if want else (0, "")
    only_staged: list[str] = []
    only_source: list[str] = []
    if digest != expected_hash:
        for side, text in conn.execute(diff_sql(spec, columns, source, staging), params):
            (only_staged if side == "staged" else only_source).append(text)
        problems.append(f"{where} differs from {source}.{spec.source_relation} as of {day}: "
                        f"{rows} rows staged, {expected_rows} expected; "
                        f"{len(only_staged)}{'+' if len(only_staged) >= MAX_DIFF_ROWS else ''} only staged, "
                        f"{len(only_source)}{'+' if len(only_source) >= MAX_DIFF_ROWS else ''} only in the source")
    if record.content_hash != digest:
        problems.append(f"{where}: content hash {digest[:12]} differs from the one recorded when it was written "
                        f"({record.content_hash[:12]})")
    return Verification(world_id, spec.table, day, rows, expected_rows, digest, expected_hash, record.content_hash,
                        late_dates=late, only_staged=only_staged, only_source=only_source, problems=problems)
