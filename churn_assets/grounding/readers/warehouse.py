"""The warehouse reader (store `warehouse`): the dbt as-of views of `<world>_analytics` at the route's day
(T for a live read; a staged class's served day for the facts its staged copy lacks, `routes.STAGED_GAPS`).

An as-of view stores nothing as of a day: it applies the day asked (`as_of_day = day`) to the tables under it,
so the day a read observes is the day its query applied. What it reads is checked by content: before the
evaluation answers (and again after), every relation the views read is hashed and compared with what the dbt
build recorded (`fabric/warehouse_content.py`), and the per-view hash of that verified content is what a read's
trace carries as `observed_hash`. A router whose sources carry no verified hashes refuses warehouse reads.
"""

from __future__ import annotations

from collections.abc import Callable

import churn_assets.grounding.readers.sql as sql
from churn_assets.fabric.postgres import schema_name
from churn_assets.grounding.readers.base import Found, ReadContext, as_day_required
from churn_assets.grounding.routes import Route, RouterError
from churn_assets.grounding.rows import ConsumptionRow, CostCenterRow, LicenseRow, ProductRow, Request, Row
from churn_assets.world.calendar import Day

LAYER = "analytics"


def _cost_centers(ctx: ReadContext, relation: str, q: Request, day: Day) -> list[Row]:
    rows = sql.select(ctx, LAYER, relation, ("cost_center_id", "business_unit"), day)
    return [CostCenterRow(cc, bu) for cc, bu in rows]


def _licenses(ctx: ReadContext, relation: str, q: Request, day: Day) -> list[Row]:
    where = [(c, v) for c, v in (("product_id", q.product), ("contract_id", q.contract)) if v is not None]
    rows = sql.select(ctx, LAYER, relation, ("license_id", "product_id", "purchased_on", "contract_id",
                                             "unit_price_usd"), day, where=where)
    return [LicenseRow(lid, pid, as_day_required(p), cid, float(price)) for lid, pid, p, cid, price in rows]


def _products(ctx: ReadContext, relation: str, q: Request, day: Day) -> list[Row]:
    rows = sql.select(ctx, LAYER, relation, ("product_id", "vendor_id", "listed_on"), day)
    return [ProductRow(pid, vid, as_day_required(listed)) for pid, vid, listed in rows]


def _consumption(ctx: ReadContext, relation: str, q: Request, day: Day) -> list[Row]:
    if q.first is None or q.last is None:
        raise RouterError("a consumption read needs first and last days")
    where = [("product_id", q.product)] if q.product is not None else []
    rows = sql.select(ctx, LAYER, relation, ("consumed_on", "user_id", "product_id", "license_id",
                                             "session_minutes", "api_calls"), day, where=where,
                      between=("consumed_on", q.first, q.last))
    return [ConsumptionRow(as_day_required(d), u, p, lic, int(m), int(a)) for d, u, p, lic, m, a in rows]


def _shared(fn: Callable[..., list[Row]]) -> Callable[[ReadContext, str, Request, Day], list[Row]]:
    return lambda ctx, relation, q, day: fn(ctx, sql.fetch_view, relation, q, day)


VIEWS: dict[str, Callable[[ReadContext, str, Request, Day], list[Row]]] = {
    "memberships": _shared(sql.memberships),
    "cost_centers": _cost_centers,
    "holdings": _shared(sql.holdings),
    "licenses": _licenses,
    "products": _products,
    "prices": _shared(sql.prices),
    "vendors": _shared(sql.vendors),
    "consumption": _consumption,
}


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    reader = VIEWS.get(request.view)
    if reader is None:
        raise RouterError(f"the warehouse has no as-of view for {request.view}")
    verified = ctx.sources.warehouse_content
    if verified is None or route.relation not in verified:
        raise RouterError(f"{schema_name(ctx.world_id, LAYER)}.{route.relation}: a warehouse read needs the "
                          "content of what the view reads verified first (fabric.warehouse_content.verified_views)")
    rows = reader(ctx, route.relation, request, route.day)
    return Found(rows, f"{schema_name(ctx.world_id, LAYER)}.{route.relation}", 1, route.day, verified[route.relation])


