"""The SaaS API: a multi-tenant FastAPI app serving each tenant (world) as of the day asked for.

Endpoints (all `GET`, all under `/v1/tenants/{world}`, all with a required `as_of` day):

- `/entitlements/{user}`: the user's status and the products their licenses entitle them to;
- `/tickets`: tickets opened by the day with their status on it; filters `status`, `product`;
  paginated (`page`, `page_size`; `next_page` is null on the last page);
- `/products/{product}/utilization?window_days=`: seat and consumption figures over the trailing window
  (definition in `saas_mock/projection.py`);
- `/prices`: the price list (list price per seat and month, USD) on the day.

Every `/v1` request needs an API key in the `X-API-Key` header (401 otherwise), issued for the tenant asked
for (403 otherwise: keys are scoped to tenants, `saas_mock/config.py`); each key has a plan
(`saas_mock/config.py`): over its rate the answer is 429 with `Retry-After` (whole seconds); every
authenticated answer is delayed by the plan's latency. `/health` needs no key; `/openapi.json` and
`/docs` describe the API. Answers carry `X-SaaS-Profile` (the key's plan) and `X-RateLimit-Remaining`.

Every answer carries `served_day` (the day of the vendor's view it was built from) and `content_hash` (the
SHA-256 of its records' canonical JSON), so a client can check what it was served against what it received.

As-of days outside the tenant's calendar are refused (422): the vendor does not know the future, and a
world has no state before its first day.

A 404 says what is missing in a machine-readable field, `missing`: `tenant` (no such world), `user` or
`product` (the tenant does not know it as of the day). A client tells "this product has no usage" from
"this tenant does not exist" by that field, never by the message.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, Field

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.state import WORLD_ID_RE
from saas_mock.config import KEY_HEADER, ApiKey, Plan, match_key
from saas_mock.limits import RateLimiter
from saas_mock.projection import ProjectionCache, SourceUnavailable, TenantNotFound, TenantView

API_VERSION = "1.0.0"
MAX_PAGE_SIZE = 500
MAX_WINDOW_DAYS = 366

_api_key_header = APIKeyHeader(name=KEY_HEADER, auto_error=False,
                               description="API key issued to the caller; its plan sets rate limit and latency.")


# ---------------------------------------------------------------------------------------------------
# Response models (they make the OpenAPI schema)
# ---------------------------------------------------------------------------------------------------


SERVED_DAY_DOC = "the day the data of this answer is as of (the vendor's own view of the tenant)"
CONTENT_HASH_DOC = ("SHA-256 of the canonical JSON (sorted keys, no spaces) of this answer's records "
                    "(`entitlements`, `items` or `licenses`): a client checks it against what it received")


def observed(view: TenantView, records: Any) -> dict[str, Any]:
    """The fields every answer carries so that a client can tell what it was served: the day of the view
    the records come from, and the hash of the records themselves."""
    return {"served_day": view.day, "content_hash": sha256_hex(canonical_json(records))}


class ErrorBody(BaseModel):
    detail: str


NotFoundKind = Literal["tenant", "user", "product"]


class NotFoundBody(BaseModel):
    detail: str
    missing: NotFoundKind = Field(description="what does not exist: the tenant (world), or the user or product "
                                              "as of the day")


class NotFound(Exception):
    """A 404 whose body names what is missing (`NotFoundBody`)."""

    def __init__(self, missing: NotFoundKind, detail: str) -> None:
        super().__init__(detail)
        self.missing = missing
        self.detail = detail


class Entitlement(BaseModel):
    product_id: str
    product_name: str | None
    license_id: str
    since: dt.date


class Entitlements(BaseModel):
    world: str
    as_of: dt.date
    served_day: dt.date = Field(description=SERVED_DAY_DOC)
    content_hash: str = Field(description=CONTENT_HASH_DOC)
    user_id: str
    status: Literal["active", "offboarded"]
    cost_center_id: str | None
    hired_on: dt.date
    offboarded_on: dt.date | None
    entitlements: list[Entitlement]


class TicketOut(BaseModel):
    ticket_id: str
    user_id: str
    product_id: str
    priority: str
    status: Literal["open", "in_progress", "resolved"]
    opened_on: dt.date
    updated_on: dt.date
    resolved_on: dt.date | None


class TicketPage(BaseModel):
    world: str
    as_of: dt.date
    served_day: dt.date = Field(description=SERVED_DAY_DOC)
    content_hash: str = Field(description=CONTENT_HASH_DOC)
    total: int = Field(description="tickets matching the filters, over all pages")
    page: int
    page_size: int
    next_page: int | None
    items: list[TicketOut]


class LicenseUsage(BaseModel):
    license_id: str
    holder_user_id: str | None
    assigned_to_active_user: bool
    active_days: int
    sessions: int
    session_minutes: int
    api_calls: int
    last_used_on: dt.date | None


class Utilization(BaseModel):
    world: str
    as_of: dt.date
    served_day: dt.date = Field(description=SERVED_DAY_DOC)
    content_hash: str = Field(description=CONTENT_HASH_DOC)
    product_id: str
    window_days: int
    window_start: dt.date
    window_end: dt.date
    seats: int
    assigned_seats: int
    unassigned_seats: int
    active_seats: int
    idle_seats: int
    utilization_rate: float
    active_users: int
    sessions: int
    session_minutes: int
    api_calls: int
    licenses: list[LicenseUsage]


class Price(BaseModel):
    product_id: str
    name: str | None
    vendor_id: str | None
    license_model: str | None
    list_price_usd: float
    currency: str
    price_valid_from: dt.date


class PriceList(BaseModel):
    world: str
    as_of: dt.date
    served_day: dt.date = Field(description=SERVED_DAY_DOC)
    content_hash: str = Field(description=CONTENT_HASH_DOC)
    items: list[Price]


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or unknown API key"},
    403: {"model": ErrorBody, "description": "the key is not issued for this tenant"},
    404: {"model": NotFoundBody, "description": "unknown tenant, user or product (`missing` says which)"},
    422: {"description": "invalid parameters, or `as_of` outside the tenant's calendar"},
    429: {"model": ErrorBody, "description": "over the key's rate limit; retry after `Retry-After` seconds"},
    503: {"model": ErrorBody, "description": "the vendor's database does not answer"},
}

WorldParam = Annotated[str, Path(description="tenant (world) id, e.g. default-s42-3f9a1c", max_length=64)]
AsOfParam = Annotated[dt.date, Query(description="the day the answer is as of (ISO date)")]


# ---------------------------------------------------------------------------------------------------
# The app
# ---------------------------------------------------------------------------------------------------


class ApiState:
    """What the request handlers share: keys, limiter and the projection cache."""

    def __init__(self, keys: Sequence[ApiKey], cache: ProjectionCache, limiter: RateLimiter | None = None) -> None:
        self.keys = list(keys)
        self.cache = cache
        self.limiter = limiter or RateLimiter()


def create_app(keys: Sequence[ApiKey], cache: ProjectionCache, *, limiter: RateLimiter | None = None) -> FastAPI:
    """The API over `cache`, accepting `keys` (each with its plan)."""
    if not keys:
        raise ValueError("the SaaS API needs at least one API key")
    api_state = ApiState(keys, cache, limiter)
    app = FastAPI(
        title="churnbench SaaS API",
        version=API_VERSION,
        description="Multi-tenant SaaS vendor API (entitlements, tickets, utilization, prices) serving each "
                    "tenant as of the requested day. API key in `X-API-Key`; per-key rate limit (429 + "
                    "Retry-After) and latency by plan.",
    )
    app.state.api = api_state

    async def authorize(request: Request, response: Response, world: WorldParam,
                        api_key: Annotated[str | None, Depends(_api_key_header)]) -> Plan:
        match = match_key(api_state.keys, api_key)
        if match is None:
            raise HTTPException(401, "missing or unknown API key (send it in the X-API-Key header)",
                                headers={"WWW-Authenticate": "ApiKey"})
        key = match.key
        plan = key.plan
        decision = api_state.limiter.check(match.bucket, plan)
        if plan.latency_ms > 0:
            # The round trip costs the same whether the answer is data or a refusal.
            await asyncio.sleep(plan.latency_ms / 1000.0)
        headers = {"X-SaaS-Profile": plan.profile}
        if plan.limited:
            headers["X-RateLimit-Limit"] = f"{plan.rate_per_minute:g}"
            headers["X-RateLimit-Remaining"] = str(decision.remaining)
        if not decision.allowed:
            raise HTTPException(429, f"rate limit of {plan.rate_per_minute:g} requests per minute exceeded "
                                f"for key {key.key_id}",
                                headers={**headers, "Retry-After": decision.retry_after_header})
        if not match.allows(world):
            # After the latency and the limiter: a refusal costs a caller what an answer does.
            raise HTTPException(403, f"key {key.key_id} is not issued for tenant {world}", headers=headers)
        response.headers.update(headers)
        return plan

    router = APIRouter(prefix="/v1/tenants/{world}", dependencies=[Depends(authorize)], responses=_ERRORS)

    async def view_of(world: str, as_of: dt.date) -> TenantView:
        if not WORLD_ID_RE.match(world):
            raise NotFound("tenant", f"no tenant {world!r} (tenant ids look like default-s42-3f9a1c)")
        cache = api_state.cache
        view = cache.peek(world, as_of)
        if view is None:
            try:
                head = await run_in_threadpool(cache.head, world)
                if not head.first_day <= as_of <= head.last_day:
                    raise HTTPException(422, f"as_of {as_of} is outside tenant {world}'s calendar "
                                        f"{head.first_day}..{head.last_day}")
                view = await run_in_threadpool(cache.get, world, as_of)
            except TenantNotFound:
                raise NotFound("tenant", f"no tenant {world}") from None
            except SourceUnavailable as e:
                raise HTTPException(503, str(e)) from None
        return view

    @router.get("/entitlements/{user}", response_model=Entitlements, summary="A user's entitlements")
    async def entitlements(world: WorldParam, user: Annotated[str, Path(max_length=64)],
                           as_of: AsOfParam) -> dict[str, Any]:
        view = await view_of(world, as_of)
        found = view.user(user)
        if found is None:
            raise NotFound("user", f"tenant {world} has no user {user} as of {as_of}")
        records = view.entitlements.get(user, [])
        return {"world": world, "as_of": as_of, "user_id": user, "status": found["status"],
                "cost_center_id": found["cost_center_id"], "hired_on": found["hired_on"],
                "offboarded_on": found["offboarded_on"], "entitlements": records, **observed(view, records)}

    @router.get("/tickets", response_model=TicketPage, summary="Support tickets (filtered, paginated)")
    async def tickets(
        world: WorldParam,
        as_of: AsOfParam,
        status: Annotated[Literal["open", "in_progress", "resolved"] | None,
                          Query(description="only tickets with this status on the day")] = None,
        product: Annotated[str | None, Query(max_length=64, description="only tickets about this product")] = None,
        page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
        page_size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 100,
    ) -> dict[str, Any]:
        view = await view_of(world, as_of)
        matching = view.filter_tickets(status, product)
        first = (page - 1) * page_size
        items = matching[first:first + page_size]
        more = first + page_size < len(matching)
        return {"world": world, "as_of": as_of, "total": len(matching), "page": page, "page_size": page_size,
                "next_page": page + 1 if more else None, "items": items, **observed(view, items)}

    @router.get("/products/{product}/utilization", response_model=Utilization,
                summary="A product's seat utilization over a trailing window")
    async def utilization(
        world: WorldParam,
        product: Annotated[str, Path(max_length=64)],
        as_of: AsOfParam,
        window_days: Annotated[int, Query(ge=1, le=MAX_WINDOW_DAYS,
                                          description="window length in days, ending on as_of")] = 30,
    ) -> dict[str, Any]:
        view = await view_of(world, as_of)
        found = view.utilization(product, window_days)
        if found is None:
            raise NotFound("product", f"tenant {world} has no product {product} as of {as_of}")
        return {"world": world, "as_of": as_of, **found, **observed(view, found["licenses"])}

    @router.get("/prices", response_model=PriceList, summary="The price list on the day")
    async def prices(world: WorldParam, as_of: AsOfParam) -> dict[str, Any]:
        view = await view_of(world, as_of)
        return {"world": world, "as_of": as_of, "items": view.prices, **observed(view, view.prices)}

    app.include_router(router)

    @app.get("/health", summary="Liveness (no key needed)", tags=["meta"])
    async def health() -> dict[str, str]:
        return {"status": "ok", "version": API_VERSION}

    @app.exception_handler(NotFound)
    async def not_found(_request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(NotFoundBody(detail=exc.detail, missing=exc.missing).model_dump(), status_code=404)

    @app.exception_handler(UnicodeError)
    async def bad_encoding(_request: Request, exc: UnicodeError) -> JSONResponse:
        return JSONResponse({"detail": f"undecodable request: {exc}"}, status_code=400)

    return app
