"""The staged-caches reader (store `staging`): a class's `<world>_staging.<table>` partition of its served
refresh day, read whole once per router and checked before any row is served.

What a read observes, and checks against what the partition's writer recorded (`staged_partitions`):
- the day: the `refresh_day` of the rows read (the partition record's day when the partition is empty);
- the content: the MD5 of the rows' text without `refresh_day`, sorted bytewise, computed here over the rows
  actually read, exactly as `grounding/staging.py` computes it in SQL when it writes the partition. A partition
  whose content was replaced (another day's rows under this day's label, an edited row) fails here with a
  `DataIntegrityError` naming the table and the day, whatever its label says.
Requests then filter the verified rows in memory (`select`): the content served is the content checked.

A partition nobody materialized is an error, never an empty answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import churn_assets.grounding.readers.sql as sql
from churn_assets.fabric.postgres import ident, schema_name
from churn_assets.grounding.readers.base import Found, ReadContext, as_day, as_day_required
from churn_assets.grounding.routes import Route, RouterError, check_relation
from churn_assets.grounding.rows import CostCenterRow, Request, Row, UserRow, seen_on
from churn_assets.grounding.traces import DataIntegrityError
from churn_assets.world.calendar import Day

LAYER = "staging"
REFRESH_DAY = "refresh_day"
META_TABLE = "staged_partitions"


@dataclass(frozen=True)
class Partition:
    """One staged partition as read and verified: its columns (without `refresh_day`) and rows."""

    table: str
    day: Day
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    content_hash: str


def content_hash(row_texts: Sequence[str]) -> str:
    """The content hash of a partition from its rows' text (`ROW(...)::text`): MD5 of the texts sorted bytewise
    (the C collation), joined by newlines; the same value `grounding/staging.py` records in SQL."""
    return hashlib.md5("\n".join(sorted(row_texts, key=lambda t: t.encode("utf-8"))).encode("utf-8")).hexdigest()


def partition(ctx: ReadContext, table: str, day: Day) -> Partition:
    """The verified partition (table, day), read once per router."""
    key = (LAYER, ctx.world_id, table, day)
    cached = ctx.cache.get(key)
    if cached is None:
        cached = ctx.cache[key] = _read_partition(ctx, table, day)
    return cached


def _read_partition(ctx: ReadContext, table: str, day: Day) -> Partition:
    from psycopg import sql as psql

    schema = schema_name(ctx.world_id, LAYER)
    check_relation(ctx.world_id, schema, table)
    where = f"{schema}.{table} @ {day}"
    conn = sql.pg(ctx)
    try:
        record = conn.execute(psql.SQL("SELECT row_count, content_hash FROM {} WHERE staged_table = %s AND "
                                       "refresh_day = %s").format(ident(schema, META_TABLE)), (table, day)).fetchone()
        if record is None:
            raise RouterError(f"staged partition {where} was never materialized (the scenario materializer "
                              "builds it)")
        columns = tuple(r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped "
            "AND attname <> %s ORDER BY attnum", (ident(schema, table).as_string(conn), REFRESH_DAY)).fetchall())
        found = conn.execute(psql.SQL("SELECT {day}, ROW({cols})::text, {cols} FROM {table} WHERE {day} = %s").format(
            day=ident(REFRESH_DAY), cols=psql.SQL(", ").join(ident(c) for c in columns),
            table=ident(schema, table)), (day,)).fetchall()
    except (RouterError, DataIntegrityError):
        raise
    except Exception as e:
        if type(e).__name__ == "InsufficientPrivilege":
            raise RouterError(f"refused by the database: {where} ({e})") from None
        raise RouterError(f"reading staged partition {where}: {type(e).__name__}: {e}") from None
    labels = {r[0] for r in found}
    if labels - {day}:
        raise DataIntegrityError(f"staged partition {where} holds rows labelled {sorted(map(str, labels))}")
    digest = content_hash([r[1] for r in found])
    recorded_rows, recorded_hash = int(record[0]), str(record[1])
    if digest != recorded_hash or len(found) != recorded_rows:
        raise DataIntegrityError(
            f"staged partition {where}: its {len(found)} rows hash to {digest[:12]}, but the partition was "
            f"written with {recorded_rows} rows hashing to {recorded_hash[:12]}: its content is not what its "
            "label says; rebuild it (materialize the staged asset for that day)")
    return Partition(table, day, columns, tuple(tuple(r[2:]) for r in found), digest)


def select(ctx: ReadContext, relation: str, columns: Sequence[str], day: Day,
           where: Sequence[tuple[str, Any]] = ()) -> list[tuple[Any, ...]]:
    """Rows of a verified partition, projected on `columns`, filtered by `column = value` pairs (a `Fetch`)."""
    part = partition(ctx, relation, day)
    try:
        pick = [part.columns.index(c) for c in columns]
        tests = [(part.columns.index(c), v) for c, v in where]
    except ValueError:
        raise RouterError(f"staged partition {relation} @ {day} has no column among {list(columns)} / "
                          f"{[c for c, _ in where]} (it has {list(part.columns)})") from None
    return [tuple(row[i] for i in pick) for row in part.rows if all(row[i] == v for i, v in tests)]


def _users(ctx: ReadContext, relation: str, q: Request, day: Day) -> list[Row]:
    # dim_user has one row per version; hire and offboard days are the user's (the cost center on it is
    # another class's fact and is not read here).
    rows = select(ctx, relation, ("user_id", "hired_on", "offboarded_on"), day)
    out: dict[str, UserRow] = {}
    for uid, hired, off in rows:
        out[uid] = UserRow(uid, as_day_required(hired), seen_on(as_day(off), day))
    return list(out.values())


def _cost_centers(ctx: ReadContext, relation: str, q: Request, day: Day) -> list[Row]:
    rows = select(ctx, relation, ("cost_center_id", "business_unit"), day)
    return [CostCenterRow(cc, bu) for cc, bu in sorted(set(rows))]


def _shared(fn: Callable[..., list[Row]]) -> Callable[[ReadContext, str, Request, Day], list[Row]]:
    return lambda ctx, relation, q, day: fn(ctx, select, relation, q, day)


VIEWS: dict[str, Callable[[ReadContext, str, Request, Day], list[Row]]] = {
    "users": _users,
    "memberships": _shared(sql.memberships),
    "cost_centers": _cost_centers,
    "holdings": _shared(sql.holdings),
    "prices": _shared(sql.prices),
    "vendors": _shared(sql.vendors),
}


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    reader = VIEWS.get(request.view)
    if reader is None:
        raise RouterError(f"the staged caches have no view {request.view}")
    part = partition(ctx, route.relation, route.day)
    rows = reader(ctx, route.relation, request, route.day)
    return Found(rows, f"{schema_name(ctx.world_id, LAYER)}.{route.relation}", 1, part.day, part.content_hash)
