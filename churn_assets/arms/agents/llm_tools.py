"""The tools the LLM agent's model sees, and what it reads back: the `retrieve` and `search_records` tool
specifications (the JSON loop's action schema is built in `agents/json_actions.py` from the same view names),
the parsing of a model's `retrieve` arguments into a `grounding.rows.Request`, and the JSON of rows and records
it is shown (with the as-of day of the data they came from).

Its own module because these are the agent's interface to the data, separate from how a loop drives the model
(`agents/llm.py`); the budget planner and the tests read the same specs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

from churn_assets.arms.extraction import RECORD_CLASSES
from churn_assets.canonical import canonical_json
from churn_assets.grounding.rows import VIEW_CLASS, VIEWS, Request, StructuredTools
from churn_assets.tasks.templates import ID_PATTERN
from churn_assets.world.calendar import Day

VIEW_DOCS: dict[str, str] = {
    "users": "users: user_id, hired_on, offboarded_on (null: active)",
    "memberships": "a user's cost-center intervals: user_id, cost_center_id, valid_from, valid_to",
    "cost_centers": "cost centers: cost_center_id, business_unit",
    "licenses": "license purchases: license_id, product_id, purchased_on, contract_id, unit_price_usd "
                "(filters: product, contract)",
    "holdings": "who held which license when: license_id, product_id, user_id, valid_from, valid_to, ended_by "
                "(reassigned, offboarded, reclaimed_idle; null while held) (filter: product)",
    "products": "products: product_id, vendor_id, listed_on",
    "prices": "monthly list price per seat, in intervals: product_id, list_price_usd, valid_from, valid_to "
              "(filter: product)",
    "vendors": "vendor name and tier, in intervals: vendor_id, name, tier, valid_from, valid_to (filter: vendor)",
    "contracts": "contracts: contract_id, vendor_id, renewal_notice_days, terms (recorded_on, effective_on, "
                 "expires_on = last day, annual_value_usd, committed_seats; the last term is the latest) "
                 "(filter: contract)",
    "consumption": "consumption events: day, user_id, product_id, license_id, session_minutes, api_calls "
                   "(first and last days required, both inclusive)",
    "usage": "per-license use over the trailing window_days days ending today: license_id, product_id, "
             "window_days, active_days, api_calls (window_days required; products: optional list)",
    "tickets": "support tickets: ticket_id, user_id, product_id, priority, opened_on, status today",
}

RETRIEVE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "retrieve",
        "description": "Read the rows of one view of the data, as served to you. Views: "
                       + "; ".join(f"{v}: {VIEW_DOCS[v]}" for v in VIEWS) + ".",
        "parameters": {
            "type": "object",
            "properties": {
                "view": {"type": "string", "enum": list(VIEWS)},
                "product": {"type": "string", "description": "a product id (licenses, holdings, prices)"},
                "contract": {"type": "string", "description": "a contract id (licenses, contracts)"},
                "vendor": {"type": "string", "description": "a vendor id (vendors)"},
                "first": {"type": "string", "description": "consumption: first day, YYYY-MM-DD"},
                "last": {"type": "string", "description": "consumption: last day, YYYY-MM-DD"},
                "window_days": {"type": "integer", "description": "usage: the trailing window in days"},
                "products": {"type": "array", "items": {"type": "string"},
                             "description": "usage: product ids to cover"},
            },
            "required": ["view"],
        },
    },
}


def search_tool(by_kind: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "query": {"type": "string", "description": "what to look for; name the ids you need"},
        "k": {"type": "integer", "description": "how many records (at most the arm's limit)"},
    }
    if by_kind:
        properties["kinds"] = {"type": "array", "items": {"type": "string", "enum": list(RECORD_CLASSES)},
                               "description": "record kinds to search (default: every kind)"}
    return {"type": "function", "function": {
        "name": "search_records",
        "description": "The k fact records (short texts) most similar to the query, from the store this arm "
                       "searches. Only the records returned are known to you.",
        "parameters": {"type": "object", "properties": properties, "required": ["query"]}}}


class ToolArgumentError(ValueError):
    """A tool call the model made with arguments the tool cannot take (told to the model, not traced)."""

    @classmethod
    def refused(cls, e: Exception) -> ToolArgumentError:
        """A source's 4xx for the model's own arguments (`SaasRequestError`: window_days=2024 above the API's
        maximum, as SmolLM2 asks): the model's error, told to it; the run goes on."""
        return cls(f"the source refused this request: {e}")


_RETRIEVE_ARGS = ("view", "product", "contract", "vendor", "first", "last", "window_days", "products")


def request_of(args: Mapping[str, Any]) -> Request:
    """The `Request` a model's `retrieve` arguments ask for."""
    unknown = sorted(set(args) - set(_RETRIEVE_ARGS))
    if unknown:
        raise ToolArgumentError(f"unknown arguments {unknown}; retrieve takes {', '.join(_RETRIEVE_ARGS)}")

    def text(name: str) -> str | None:
        v = args.get(name)
        return (str(v).strip() or None) if v is not None else None

    def day(name: str) -> Day | None:
        v = text(name)
        try:
            return dt.date.fromisoformat(v) if v else None
        except ValueError:
            raise ToolArgumentError(f"{name}={v!r} is not a day YYYY-MM-DD") from None

    window = args.get("window_days")
    products = args.get("products")
    try:
        window_days = int(window) if window is not None else None
    except (TypeError, ValueError):
        raise ToolArgumentError(f"window_days={window!r} is not a whole number") from None
    if products is not None and (not isinstance(products, list | tuple) or not all(isinstance(p, str)
                                                                                  for p in products)):
        raise ToolArgumentError("products must be a list of product ids")
    # ids as the data writes them: anything else (a URL, seen with SmolLM2) would reach a store's query or the SaaS
    # API's path, and come back as a 404 that fails the run instead of a line to the model
    for name, value in [*((n, text(n)) for n in ("product", "contract", "vendor")),
                        *(("products", p) for p in products or ())]:
        if value is not None and not re.fullmatch(ID_PATTERN, value):
            raise ToolArgumentError(f"{name}={value!r} is not an id (ids look like prd_0001, ctr_0012, vnd_003)")
    try:
        return Request(str(args.get("view") or ""), product=text("product"), contract=text("contract"),
                       vendor=text("vendor"), first=day("first"), last=day("last"), window_days=window_days,
                       products=tuple(products) if products is not None else None)
    except ValueError as e:
        raise ToolArgumentError(str(e)) from None


def _plain(value: Any) -> Any:
    if isinstance(value, dt.date):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def rows_json(request: Request, rows: Sequence[Any] | None, limit: int, data_as_of: Day | None = None) -> str:
    """What the model reads back from one `retrieve`: columns and rows (at most `limit` of them), and the as-of day
    of the data they came from (the read's data time, from its trace: the refresh day of a staged copy, T live)."""
    if rows is None:
        return canonical_json({"view": request.view, "served": False,
                               "error": f"this arm does not serve {request.entity_class} (view {request.view})"})
    shown = list(rows[:limit])
    columns = [f.name for f in dataclasses.fields(shown[0])] if shown else []
    out: dict[str, Any] = {"view": request.view, "entity_class": VIEW_CLASS[request.view], "columns": columns,
                           "rows": [[_plain(getattr(r, c)) for c in columns] for r in shown],
                           "total_rows": len(rows)}
    if data_as_of is not None:
        out["data_as_of"] = data_as_of.isoformat()
    if len(rows) > limit:
        out["truncated"] = f"only the first {limit} of {len(rows)} rows are shown: narrow the request with filters"
    return canonical_json(out)


def read_day(tools: StructuredTools, before: int, entity_class: str) -> Day | None:
    """The data time of `entity_class` in the traces the tools recorded since `before` (None: not traced)."""
    traces = getattr(tools, "traces", None)
    if not isinstance(traces, list):
        return None
    days = {entry.data_times[entity_class] for entry in traces[before:]
            if entity_class in getattr(entry, "data_times", {})}
    return min(days) if days else None


def record_json(hit: Any) -> dict[str, Any]:
    """One search hit as the model reads it; with the as-of day of the corpus it came from when the hit has one."""
    out: dict[str, Any] = {"kind": hit.kind, "entity_id": hit.entity_id, "text": hit.text}
    day = getattr(hit, "day", None)
    if isinstance(day, dt.date):
        out["data_as_of"] = day.isoformat()
    return out
