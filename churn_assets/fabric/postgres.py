"""Postgres plumbing of the fabric: per-world schema names, connections, and all-or-nothing bulk loads.

Schema names (docs/rules.md, "Per-world namespaces"): a world id becomes a SQL identifier by
replacing `-` with `_` (`default-s42-3f9a1c` -> `default_s42_3f9a1c`), and each layer is a schema
`<prefix>_<layer>`: `_truth` (the ledger), `_raw` (the raw projection), `_analytics` (dbt), `_staging`
(staged caches). The mapping is reversible because world names never contain `-`.

A load (`replace_tables`) runs in one transaction under an advisory lock on its schema: tables are created
or truncated, filled with COPY, and the schema's meta table is written last. A failure anywhere rolls the
whole load back, so a reader sees either the previous complete content or the new one, never half a load.
Tables are truncated rather than dropped so that views built on them (dbt staging) survive a reload.

psycopg is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

LAYERS: tuple[str, ...] = ("truth", "raw", "analytics", "staging")
MAX_IDENTIFIER_BYTES = 63  # Postgres truncates longer identifiers silently: refuse them instead
CONNECT_TIMEOUT_S = 10

# `<name>-s<seed>-<hash6>`; the name follows the world config's name rule (lower case, digits, `_`).
_WORLD_ID_RE = re.compile(r"^[a-z][a-z0-9_]{0,30}-s\d+-[0-9a-f]{6}$")
_SCHEMA_RE = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)_s(?P<seed>\d+)_(?P<hash>[0-9a-f]{6})_(?P<layer>[a-z]+)$")


class WarehouseError(UserFacingError):
    """A warehouse load or read failed; the message names the world, the schema and the table."""


# ---------------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------------


def world_prefix(world_id: str) -> str:
    """`default-s42-3f9a1c` -> `default_s42_3f9a1c`; refuses anything that is not a world id."""
    if not _WORLD_ID_RE.match(world_id):
        raise WarehouseError(f"{world_id!r} is not a world id (expected <name>-s<seed>-<hash6>, "
                             "e.g. default-s42-3f9a1c)")
    return world_id.replace("-", "_")


def schema_name(world_id: str, layer: str) -> str:
    """The schema of one layer of a world, e.g. `default_s42_3f9a1c_raw`."""
    if layer not in LAYERS:
        raise ValueError(f"unknown warehouse layer {layer!r} (known: {', '.join(LAYERS)})")
    name = f"{world_prefix(world_id)}_{layer}"
    if len(name.encode()) > MAX_IDENTIFIER_BYTES:
        raise WarehouseError(f"world id {world_id} is too long for a Postgres schema name ({name!r} has "
                             f"more than {MAX_IDENTIFIER_BYTES} bytes); use a shorter world name or seed")
    return name


def world_schemas(world_id: str) -> dict[str, str]:
    """Layer -> schema name, for every layer of a world."""
    return {layer: schema_name(world_id, layer) for layer in LAYERS}


def parse_schema_name(schema: str) -> tuple[str, str] | None:
    """`default_s42_3f9a1c_raw` -> (`default-s42-3f9a1c`, `raw`); None for any other schema."""
    m = _SCHEMA_RE.match(schema)
    if m is None or m["layer"] not in LAYERS:
        return None
    return f"{m['name']}-s{m['seed']}-{m['hash']}", m["layer"]


# ---------------------------------------------------------------------------------------------------
# Connections
# ---------------------------------------------------------------------------------------------------


def connect(url: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A psycopg 3 connection to a libpq URL (`postgresql://...`, Unix-socket URLs included)."""
    import psycopg

    return psycopg.connect(url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S)


@contextmanager
def connection(url: str, *, autocommit: bool = False) -> Iterator[psycopg.Connection[Any]]:
    """`connect` as a context manager that always closes (psycopg's own commits on a clean exit)."""
    conn = connect(url, autocommit=autocommit)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


def dbt_connection_env(url: str) -> dict[str, str]:
    """The `CHURNBENCH_DBT_*` variables `dbt_project/profiles.yml` reads, from a libpq URL (a Unix-socket
    directory is a valid host)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(url)
    env = {
        "CHURNBENCH_DBT_HOST": str(params.get("host") or "127.0.0.1"),
        "CHURNBENCH_DBT_PORT": str(params.get("port") or "5432"),
        "CHURNBENCH_DBT_USER": str(params.get("user") or "postgres"),
        "CHURNBENCH_DBT_DBNAME": str(params.get("dbname") or "churnbench"),
    }
    if params.get("password"):
        env["CHURNBENCH_DBT_PASSWORD"] = str(params["password"])
    return env


def ident(*parts: str) -> sql.Identifier:
    """`psycopg.sql.Identifier(*parts)`: a quoted (possibly qualified) identifier for `psycopg.sql` composition,
    the one way SQL names are quoted in this project (psycopg imported on first use, not with this module)."""
    from psycopg import sql

    return sql.Identifier(*parts)


def content_hash_sql(select: sql.Composable) -> sql.Composed:
    """(rows, content hash) of what `select` returns: the MD5 of its rows' text (`ROW(...)::text`) sorted bytewise
    (the C collation, so the hash does not depend on the server's locale), joined by newlines. The one content hash
    of rows in Postgres: staged partitions (`grounding/staging.py`, recomputed in Python by
    `grounding/readers/staged.py`) and the warehouse's tables (`fabric/warehouse_content.py`)."""
    from psycopg import sql

    return sql.SQL("SELECT count(*), md5(coalesce(string_agg(r::text, E'\\n' ORDER BY r::text COLLATE {}), '')) "
                   "FROM ({}) AS r").format(ident("C"), select)


def relation_exists(conn: psycopg.Connection[Any], schema: str, name: str) -> bool:
    """Whether `schema.name` is a relation (table, view, index...), as `to_regclass` resolves it."""
    # to_regclass parses a qualified name: psycopg quotes it for the server, and it is sent as a value.
    row = conn.execute("SELECT to_regclass(%s)", (ident(schema, name).as_string(conn),)).fetchone()
    return row is not None and row[0] is not None


# ---------------------------------------------------------------------------------------------------
# Table specs and the transactional loader
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str  # as Postgres' format_type() prints it: text, date, bigint, integer, boolean, numeric(12,2), jsonb
    nullable: bool = True


@dataclass(frozen=True)
class TableSpec:
    """One table of a layer: its columns (in COPY order), primary key, extra indexes and a description."""

    name: str
    columns: tuple[Column, ...]
    description: str
    primary_key: tuple[str, ...] = ()
    indexes: tuple[tuple[str, ...], ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


@dataclass
class TableData:
    spec: TableSpec
    rows: Sequence[Sequence[Any]]


@dataclass(frozen=True)
class LoadResult:
    """What a load did: `skipped` when the schema already held this content (same load key)."""

    world_id: str
    schema: str
    skipped: bool
    load_key: str
    row_counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total_rows(self) -> int:
        return sum(self.row_counts.values())


def _create_table_sql(schema: str, spec: TableSpec) -> sql.Composed:
    from psycopg import sql

    # `sql_type` is a type expression written in this package's table specs (`numeric(12,2)`), not a name.
    cols = [sql.SQL("{} {}{}").format(ident(c.name), sql.SQL(c.sql_type),
                                      sql.SQL("" if c.nullable else " NOT NULL"))
            for c in spec.columns]
    if spec.primary_key:
        cols.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(ident(c) for c in spec.primary_key)))
    return sql.SQL("CREATE TABLE {} ({})").format(ident(schema, spec.name), sql.SQL(", ").join(cols))


def table_columns(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[tuple[str, str, bool]]]:
    """Table -> [(column, format_type, nullable)] of the ordinary tables in `schema`, in column order."""
    rows = conn.execute(
        """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE n.nspname = %s AND c.relkind = 'r'
        ORDER BY c.relname, a.attnum
        """,
        (schema,),
    ).fetchall()
    out: dict[str, list[tuple[str, str, bool]]] = {}
    for table, column, sql_type, nullable in rows:
        out.setdefault(table, []).append((column, sql_type, nullable))
    return out


def _matches(spec: TableSpec, existing: list[tuple[str, str, bool]] | None) -> bool:
    return existing == [(c.name, c.sql_type, c.nullable) for c in spec.columns]


def schema_exists(conn: psycopg.Connection[Any], schema: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def read_load_key(conn: psycopg.Connection[Any], schema: str, meta_table: str) -> str | None:
    """The `load_key` stored in a layer's meta table, or None when the layer was never loaded."""
    if not relation_exists(conn, schema, meta_table):
        return None
    from psycopg import sql

    row = conn.execute(sql.SQL("SELECT load_key FROM {} LIMIT 1").format(ident(schema, meta_table))).fetchone()
    return None if row is None else str(row[0])


def replace_tables(
    conn: psycopg.Connection[Any],
    *,
    world_id: str,
    schema: str,
    tables: Sequence[TableData],
    meta_table: str,
    load_key: str,
    force: bool = False,
    on_table: Any = None,
) -> LoadResult:
    """Make `schema` hold exactly `tables`, in one transaction; skip when its meta table has `load_key`.

    `tables` must include `meta_table`, whose rows carry a `load_key` column (written last). Tables of the
    schema that `tables` does not name are dropped (an older layout). A table whose columns differ from
    its spec is dropped and re-created; the others are truncated, so dependent views survive. Any error
    rolls the whole load back and is raised as a `WarehouseError` naming the table.
    """
    started = time.perf_counter()
    names = [t.spec.name for t in tables]
    if meta_table not in names:
        raise ValueError(f"the meta table {meta_table} must be among the tables loaded")
    ordered = [t for t in tables if t.spec.name != meta_table] + [t for t in tables if t.spec.name == meta_table]
    conn.autocommit = True  # so that `transaction()` below is the one real transaction (BEGIN ... COMMIT)
    current = ""
    try:
        with conn.transaction():
            # One loader per schema at a time (two processes loading one world wait for each other).
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
            if not force and read_load_key(conn, schema, meta_table) == load_key:
                counts = _row_counts(conn, schema, names)
                return LoadResult(world_id, schema, True, load_key, counts, time.perf_counter() - started)
            from psycopg import sql

            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(schema)))
            existing = table_columns(conn, schema)
            for stale in sorted(set(existing) - set(names)):
                conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(ident(schema, stale)))
            counts = {}
            for data in ordered:
                spec = data.spec
                current = spec.name
                if spec.name in existing and not _matches(spec, existing[spec.name]):
                    conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(ident(schema, spec.name)))
                    existing.pop(spec.name)
                if spec.name in existing:
                    conn.execute(sql.SQL("TRUNCATE {}").format(ident(schema, spec.name)))
                else:
                    conn.execute(_create_table_sql(schema, spec))
                    for i, columns in enumerate(spec.indexes):
                        conn.execute(sql.SQL("CREATE INDEX {} ON {} ({})").format(
                            ident(f"{spec.name}_ix{i}"), ident(schema, spec.name),
                            sql.SQL(", ").join(ident(c) for c in columns)))
                    conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(
                        ident(schema, spec.name), sql.Literal(spec.description)))
                copy_rows(conn, schema, spec, data.rows)
                counts[spec.name] = len(data.rows)
                if on_table is not None:
                    on_table(spec.name, len(data.rows))
            current = ""
            for data in ordered:
                conn.execute(sql.SQL("ANALYZE {}").format(ident(schema, data.spec.name)))
    except WarehouseError:
        raise
    except Exception as e:
        if _is_connection_error(e):
            raise
        where = f"{schema}.{current}" if current else schema
        raise WarehouseError(f"loading world {world_id} into {where} failed and was rolled back (the "
                             f"previous content is unchanged): {_one_line(e)}") from e
    return LoadResult(world_id, schema, False, load_key, counts, time.perf_counter() - started)


def copy_rows(conn: psycopg.Connection[Any], schema: str, spec: TableSpec, rows: Iterable[Sequence[Any]]) -> None:
    """COPY rows (tuples in the spec's column order) into `schema.spec.name`."""
    from psycopg import sql

    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        ident(schema, spec.name), sql.SQL(", ").join(ident(c) for c in spec.column_names))
    with conn.cursor() as cur, cur.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def _row_counts(conn: psycopg.Connection[Any], schema: str, tables: Sequence[str]) -> dict[str, int]:
    from psycopg import sql

    out = {}
    for table in tables:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident(schema, table))).fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def row_counts(url: str, schema: str) -> dict[str, int]:
    """Rows per table and view of a schema (views counted too), sorted by name; {} when it does not exist."""
    from psycopg import sql

    with connection(url) as conn:
        names = [r[0] for r in conn.execute(
            """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %s AND c.relkind IN ('r', 'v', 'm') ORDER BY c.relname""", (schema,))]
        out = {}
        for name in names:
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident(schema, name))).fetchone()
            out[name] = int(row[0]) if row else 0
        return out


# ---------------------------------------------------------------------------------------------------
# Per-world cleanup (`churnbench worlds rm` / `gc`)
# ---------------------------------------------------------------------------------------------------


def worlds_with_schemas(conn: psycopg.Connection[Any]) -> set[str]:
    """Worlds that have at least one schema (truth, raw, analytics or staging) in the warehouse."""
    found = set()
    for (schema,) in conn.execute("SELECT nspname FROM pg_namespace"):
        parsed = parse_schema_name(schema)
        if parsed is not None:
            found.add(parsed[0])
    return found


def drop_world_schemas(conn: psycopg.Connection[Any], world_id: str) -> list[str]:
    """Drop every schema of a world, in one transaction; returns the schemas that existed."""
    from psycopg import sql

    dropped = []
    with conn.transaction():
        for schema in world_schemas(world_id).values():
            if schema_exists(conn, schema):
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(ident(schema)))
                dropped.append(schema)
    return dropped


# ---------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------


def _is_connection_error(e: BaseException) -> bool:
    """A lost server is the services layer's to report (`services.service_errors`), not a bad load."""
    import psycopg

    return isinstance(e, psycopg.OperationalError | psycopg.InterfaceError) and not isinstance(
        e, psycopg.errors.QueryCanceled)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:400]}" if text else type(e).__name__
