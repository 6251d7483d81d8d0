"""The staged-caches reader (store `staging`): a class's `<world>_staging.<table>` partition of its served
refresh day. A partition nobody materialized is an error, never an empty answer."""

from __future__ import annotations

from collections.abc import Callable

import churn_assets.grounding.readers.sql as sql
from churn_assets.fabric.postgres import ident, schema_name
from churn_assets.grounding.readers.base import Found, ReadContext, as_day, as_day_required
from churn_assets.grounding.routes import Route, RouterError
from churn_assets.grounding.rows import CostCenterRow, Request, Row, UserRow, seen_on
from churn_assets.world.calendar import Day

LAYER = "staging"


def require_partition(ctx: ReadContext, table: str, day: Day) -> None:
    """A staged read of a day nobody materialized is an error, not an empty answer."""
    from psycopg import sql as psql

    schema = schema_name(ctx.world_id, LAYER)
    try:
        row = sql.pg(ctx).execute(psql.SQL("SELECT 1 FROM {} WHERE staged_table = %s AND refresh_day = %s").format(
            ident(schema, "staged_partitions")), (table, day)).fetchone()
    except RouterError:
        raise
    except Exception as e:
        raise RouterError(f"cannot check staged partition {schema}.{table} @ {day}: "
                          f"{type(e).__name__}: {e}") from None
    if row is None:
        raise RouterError(f"staged partition {schema}.{table} @ {day} was never materialized (the scenario "
                          "materializer builds it)")


def _users(ctx: ReadContext, relation: str, q: Request, day: Day) -> list[Row]:
    # dim_user has one row per version; hire and offboard days are the user's (the cost center on it is
    # another class's fact and is not read here).
    rows = sql.select(ctx, LAYER, relation, ("user_id", "hired_on", "offboarded_on"), day)
    out: dict[str, UserRow] = {}
    for uid, hired, off in rows:
        out[uid] = UserRow(uid, as_day_required(hired), seen_on(as_day(off), day))
    return list(out.values())


def _cost_centers(ctx: ReadContext, relation: str, q: Request, day: Day) -> list[Row]:
    rows = sql.select(ctx, LAYER, relation, ("cost_center_id", "business_unit"), day)
    return [CostCenterRow(cc, bu) for cc, bu in sorted(set(rows))]


def _shared(fn: Callable[..., list[Row]]) -> Callable[[ReadContext, str, Request, Day], list[Row]]:
    return lambda ctx, relation, q, day: fn(ctx, LAYER, relation, q, day)


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
    require_partition(ctx, route.relation, route.day)
    rows = reader(ctx, route.relation, request, route.day)
    return Found(rows, f"{schema_name(ctx.world_id, LAYER)}.{route.relation}", 1)
