"""The SaaS-API reader (store `saas`): utilization and tickets of the tenant as of the route's day (T),
through the resilient client (retries and Retry-After are the client's; an exhausted retry is a
`TransportError`, scored as a transport failure, never as a wrong answer)."""

from __future__ import annotations

from churn_assets.grounding.readers.base import Found, ReadContext, as_day_required
from churn_assets.grounding.routes import Route, RouterError
from churn_assets.grounding.rows import Request, Row, TicketRow, UsageRow


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    from churn_assets.fabric.saas_client import SaasNotFound

    client = ctx.sources.saas
    if client is None:
        raise RouterError("this router has no SaaS client")
    as_of = route.day.isoformat()
    before = client.stats
    rows: list[Row] = []
    if request.view == "usage":
        if request.window_days is None:
            raise RouterError("a usage read needs window_days")
        products = request.products if request.products is not None else (
            (request.product,) if request.product is not None else ())
        for product in products:
            try:
                body = client.utilization(ctx.world_id, product, as_of=as_of, window_days=request.window_days)
            except SaasNotFound:
                continue  # a product the vendor does not know today has no usage
            rows.extend(UsageRow(lic["license_id"], product, request.window_days, int(lic["active_days"]),
                                 int(lic["api_calls"])) for lic in body["licenses"])
        endpoint = f"GET /v1/tenants/{ctx.world_id}/products/{{product}}/utilization"
    elif request.view == "tickets":
        for t in client.tickets(ctx.world_id, as_of=as_of, product=request.product):
            rows.append(TicketRow(t["ticket_id"], t["user_id"], t["product_id"], t["priority"],
                                  as_day_required(t["opened_on"]), t["status"]))
        endpoint = f"GET /v1/tenants/{ctx.world_id}/tickets"
    else:
        raise RouterError(f"the SaaS API has no view {request.view}")
    calls = (client.stats - before).calls
    return Found(rows, endpoint, max(1, calls))
