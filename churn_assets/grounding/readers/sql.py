"""Reading Postgres as an arm: one relation as of a day, through the read-only arm role.

`select` reads rows of a `<world>_analytics` as-of view (`as_of_day = day`), with `column = value` filters and
an optional inclusive day range. Identifiers are
quoted with `psycopg.sql.Identifier` and values bound as parameters: no SQL text is built from a request.
`check_relation` refuses anything else first (the role refuses it too).

The row mappers below read the history views whose columns a staged copy and its as-of view share
(memberships, holdings, prices, vendors): the staged reader and the warehouse reader both use them, each with
its own `Fetch` (the staged reader's serves verified partition rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from churn_assets.fabric.postgres import ident, schema_name
from churn_assets.grounding.readers.base import ReadContext, as_day, as_day_required
from churn_assets.grounding.routes import RouteRefused, RouterError, check_relation
from churn_assets.grounding.rows import HoldingRow, MembershipRow, PriceRow, Request, Row, VendorRow, seen_on
from churn_assets.world.calendar import Day

if TYPE_CHECKING:
    import psycopg

# Arms read `_analytics` as-of views here; staged partitions are read whole and verified by `readers/staged.py`.
LAYERS = ("analytics",)


def select(ctx: ReadContext, layer: str, relation: str, columns: Sequence[str], day: Day, *,
           where: Sequence[tuple[str, Any]] = (), between: tuple[str, Day, Day] | None = None
           ) -> list[tuple[Any, ...]]:
    """Rows of one as-of view as of `day` (`as_of_day = day`). `where` adds `column = value` filters; `between`
    = (column, first, last) an inclusive range."""
    from psycopg import sql

    if layer not in LAYERS:
        raise RouteRefused(f"refused: layer {layer!r} (arms read {' and '.join(LAYERS)} only)")
    schema = schema_name(ctx.world_id, layer)
    check_relation(ctx.world_id, schema, relation)
    conditions = [sql.SQL("{} = %s").format(ident("as_of_day"))]
    values: list[Any] = [day]
    for column, value in where:
        conditions.append(sql.SQL("{} = %s").format(ident(column)))
        values.append(value)
    if between is not None:
        column, first, last = between
        conditions.append(sql.SQL("{} BETWEEN %s AND %s").format(ident(column)))
        values += [first, last]
    query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
        sql.SQL(", ").join(ident(c) for c in columns), ident(schema, relation), sql.SQL(" AND ").join(conditions))
    try:
        return pg(ctx).execute(query, values).fetchall()
    except Exception as e:
        if type(e).__name__ == "InsufficientPrivilege":
            raise RouteRefused(f"refused by the database: {schema}.{relation} ({e})") from None
        raise RouterError(f"reading {schema}.{relation} as of {day}: {type(e).__name__}: {e}") from None


def pg(ctx: ReadContext) -> psycopg.Connection[Any]:
    if ctx.sources.pg is None:
        raise RouterError("this router has no warehouse connection")
    return ctx.sources.pg


class Fetch(Protocol):
    """Rows of one relation as of a day, projected on `columns`, filtered by `column = value` pairs."""

    def __call__(self, ctx: ReadContext, relation: str, columns: Sequence[str], day: Day,
                 where: Sequence[tuple[str, Any]]) -> list[tuple[Any, ...]]: ...


def fetch_view(ctx: ReadContext, relation: str, columns: Sequence[str], day: Day,
               where: Sequence[tuple[str, Any]]) -> list[tuple[Any, ...]]:
    """`Fetch` over the analytics as-of views."""
    return select(ctx, "analytics", relation, columns, day, where=where)


def memberships(ctx: ReadContext, fetch: Fetch, relation: str, q: Request, day: Day) -> list[Row]:
    rows = fetch(ctx, relation, ("user_id", "cost_center_id", "valid_from", "valid_to"), day, ())
    return [MembershipRow(u, cc, as_day_required(a), seen_on(as_day(b), day)) for u, cc, a, b in rows]


def holdings(ctx: ReadContext, fetch: Fetch, relation: str, q: Request, day: Day) -> list[Row]:
    where = [("product_id", q.product)] if q.product is not None else []
    rows = fetch(ctx, relation, ("license_id", "product_id", "user_id", "valid_from", "valid_to", "ended_by"), day,
                 where)
    out: list[Row] = []
    for lid, pid, uid, a, b, ended in rows:
        end = seen_on(as_day(b), day)
        out.append(HoldingRow(lid, pid, uid, as_day_required(a), end, ended if end is not None else None))
    return out


def prices(ctx: ReadContext, fetch: Fetch, relation: str, q: Request, day: Day) -> list[Row]:
    where = [("product_id", q.product)] if q.product is not None else []
    rows = fetch(ctx, relation, ("product_id", "list_price_usd", "valid_from", "valid_to"), day, where)
    return [PriceRow(pid, float(p), as_day_required(a), seen_on(as_day(b), day)) for pid, p, a, b in rows]


def vendors(ctx: ReadContext, fetch: Fetch, relation: str, q: Request, day: Day) -> list[Row]:
    where = [("vendor_id", q.vendor)] if q.vendor is not None else []
    rows = fetch(ctx, relation, ("vendor_id", "vendor_name", "vendor_tier", "valid_from", "valid_to"), day, where)
    return [VendorRow(v, n, t, as_day_required(a), seen_on(as_day(b), day)) for v, n, t, a, b in rows]
