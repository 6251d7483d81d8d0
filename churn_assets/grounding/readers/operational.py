"""The operational-store reader (store `operational`): the Mongo database of the route's day, complete (its
`_meta` written last), for current users and licenses.

What a read observes: the day in the database's `_meta` document, and the content hash of the collection
read, recomputed here over every document read (`fabric.mongo.collection_hash`) and checked against the hash
`_meta` recorded when the database was written. A collection is read whole once per router and filtered in
memory, so the documents served are the documents checked.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from churn_assets.fabric.mongo import collection_hash, read_meta, require_complete
from churn_assets.grounding.readers.base import Found, ReadContext, as_day, as_day_required
from churn_assets.grounding.routes import Route, RouterError
from churn_assets.grounding.rows import LicenseRow, Request, Row, UserRow, seen_on
from churn_assets.grounding.traces import DataIntegrityError
from churn_assets.world.calendar import Day

COLLECTION_OF_VIEW = {"users": "users", "licenses": "licenses"}


@dataclass(frozen=True)
class Collection:
    database: str
    name: str
    day: Day  # from `_meta`
    docs: tuple[dict[str, Any], ...]
    content_hash: str


def collection(ctx: ReadContext, day: Day, name: str) -> Collection:
    key = ("operational", ctx.world_id, day, name)
    cached = ctx.cache.get(key)
    if cached is None:
        cached = ctx.cache[key] = _read_collection(ctx, day, name)
    return cached


def _read_collection(ctx: ReadContext, day: Day, name: str) -> Collection:
    if ctx.sources.mongo is None:
        raise RouterError("this router has no operational store connection")
    db = require_complete(ctx.sources.mongo, ctx.world_id, day)
    meta = read_meta(db) or {}
    where = f"{db.name}.{name}"
    recorded = (meta.get("content_hashes") or {}).get(name)
    if recorded is None:
        raise DataIntegrityError(f"{where}: its `_meta` records no content hash (written by an older churnbench); "
                                 "rebuild it (materialize operational_store for that day)")
    try:
        observed = dt.date.fromisoformat(str(meta.get("day")))
    except ValueError:
        raise DataIntegrityError(f"{where}: its `_meta` names no day") from None
    docs = tuple(db[name].find({}))
    digest = collection_hash(docs)
    if digest != recorded:
        raise DataIntegrityError(f"{where}: its {len(docs)} documents hash to {digest[:12]}, not to the "
                                 f"{str(recorded)[:12]} recorded when the database was written; rebuild it")
    return Collection(db.name, name, observed, docs, digest)


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    name = COLLECTION_OF_VIEW.get(request.view)
    if name is None:
        raise RouterError(f"the operational store has no view {request.view}")
    coll = collection(ctx, route.day, name)
    day = coll.day
    if request.view == "users":
        rows: list[Row] = [UserRow(d["user_id"], as_day_required(d["hired_on"]),
                                   seen_on(as_day(d.get("offboarded_on")), day)) for d in coll.docs]
    else:
        wanted = {k: v for k, v in (("product_id", request.product), ("contract_id", request.contract))
                  if v is not None}
        rows = [LicenseRow(d["license_id"], d["product_id"], as_day_required(d["purchased_on"]), d.get("contract_id"),
                           float(d["unit_price_usd"])) for d in coll.docs
                if all(d.get(k) == v for k, v in wanted.items())]
    return Found(rows, f"{coll.database}.{route.relation}", 1, day, coll.content_hash)
