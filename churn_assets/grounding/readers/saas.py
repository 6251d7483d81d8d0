"""The SaaS-API reader (store `saas`): utilization and tickets of the tenant as of the route's day (T),
through the resilient client (retries and Retry-After are the client's; an exhausted retry is a
`TransportError`, scored as a transport failure, never as a wrong answer). A 404 is "no usage" only when
the API says the product is missing; an unknown tenant raises `SaasNotFound` and fails the run.

What a read observes: every answer's `served_day` (the day of the vendor's view it was built from) and its
`content_hash` (the SHA-256 of its records' canonical JSON), recomputed here over the records received. All
pages and products of one read must agree on the day; the read's hash is the hash of the per-answer hashes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.fabric.saas_client import SaasNotFound
from churn_assets.grounding.readers.base import Found, ReadContext, as_day_required
from churn_assets.grounding.routes import Route, RouterError
from churn_assets.grounding.rows import Request, Row, TicketRow, UsageRow
from churn_assets.grounding.traces import DataIntegrityError


class _Observed:
    """The days and hashes of the answers of one read, each checked against its records."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.days: set[dt.date] = set()
        self.hashes: list[str] = []

    def check(self, body: dict[str, Any], records: Any) -> None:
        try:
            day, recorded = dt.date.fromisoformat(str(body["served_day"])), str(body["content_hash"])
        except (KeyError, ValueError):
            raise DataIntegrityError(f"{self.what}: the answer names no served_day / content_hash (an older "
                                     "SaaS API?)") from None
        digest = sha256_hex(canonical_json(records))
        if digest != recorded:
            raise DataIntegrityError(f"{self.what}: the records received hash to {digest[:12]}, the SaaS API "
                                     f"says it sent {recorded[:12]}")
        self.days.add(day)
        self.hashes.append(recorded)

    def day(self, asked: dt.date) -> dt.date:
        if len(self.days) > 1:
            raise DataIntegrityError(f"{self.what}: answers of one read came from views of different days "
                                     f"({', '.join(sorted(map(str, self.days)))})")
        return next(iter(self.days), asked)  # no answer at all (no product asked): nothing was served

    def digest(self) -> str:
        return sha256_hex(canonical_json(self.hashes)) if self.hashes else ""


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    client = ctx.sources.saas
    if client is None:
        raise RouterError("this router has no SaaS client")
    as_of = route.day.isoformat()
    before = client.stats
    rows: list[Row] = []
    if request.view == "usage":
        if request.window_days is None:
            raise RouterError("a usage read needs window_days")
        endpoint = f"GET /v1/tenants/{ctx.world_id}/products/{{product}}/utilization"
        seen = _Observed(endpoint)
        products = request.products if request.products is not None else (
            (request.product,) if request.product is not None else ())
        for product in products:
            try:
                body = client.utilization(ctx.world_id, product, as_of=as_of, window_days=request.window_days)
            except SaasNotFound as e:
                if e.missing != "product":  # an unknown tenant (or a wrong URL) is an error, never "no usage"
                    raise
                continue  # a product the vendor does not know today has no usage
            seen.check(body, body["licenses"])
            rows.extend(UsageRow(lic["license_id"], product, request.window_days, int(lic["active_days"]),
                                 int(lic["api_calls"])) for lic in body["licenses"])
    elif request.view == "tickets":
        endpoint = f"GET /v1/tenants/{ctx.world_id}/tickets"
        seen = _Observed(endpoint)
        page: int | None = 1
        while page is not None:
            body = client.tickets_page(ctx.world_id, as_of=as_of, product=request.product, page=page)
            seen.check(body, body["items"])
            rows.extend(TicketRow(t["ticket_id"], t["user_id"], t["product_id"], t["priority"],
                                  as_day_required(t["opened_on"]), t["status"]) for t in body["items"])
            page = body["next_page"]
    else:
        raise RouterError(f"the SaaS API has no view {request.view}")
    calls = (client.stats - before).calls
    return Found(rows, endpoint, max(1, calls), seen.day(route.day), seen.digest())
