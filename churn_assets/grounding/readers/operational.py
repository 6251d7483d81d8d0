"""The operational-store reader (store `operational`): the Mongo database of the route's day, complete
(its `_meta` written last), for current users and licenses."""

from __future__ import annotations

from typing import Any

from churn_assets.grounding.readers.base import Found, ReadContext, as_day, as_day_required
from churn_assets.grounding.routes import Route, RouterError
from churn_assets.grounding.rows import LicenseRow, Request, Row, UserRow, seen_on


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    from churn_assets.fabric.mongo import require_complete

    if ctx.sources.mongo is None:
        raise RouterError("this router has no operational store connection")
    db = require_complete(ctx.sources.mongo, ctx.world_id, route.day)
    day = route.day
    if request.view == "users":
        docs = db["users"].find({}, {"user_id": 1, "hired_on": 1, "offboarded_on": 1})
        rows: list[Row] = [UserRow(d["user_id"], as_day_required(d["hired_on"]),
                                   seen_on(as_day(d.get("offboarded_on")), day)) for d in docs]
    elif request.view == "licenses":
        query: dict[str, Any] = {}
        if request.product is not None:
            query["product_id"] = request.product
        if request.contract is not None:
            query["contract_id"] = request.contract
        docs = db["licenses"].find(query, {"license_id": 1, "product_id": 1, "purchased_on": 1,
                                           "contract_id": 1, "unit_price_usd": 1})
        rows = [LicenseRow(d["license_id"], d["product_id"], as_day_required(d["purchased_on"]),
                           d.get("contract_id"), float(d["unit_price_usd"])) for d in docs]
    else:
        raise RouterError(f"the operational store has no view {request.view}")
    return Found(rows, f"{db.name}.{route.relation}", 1)
