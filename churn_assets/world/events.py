"""Event kinds of the ledger and their typed payload schemas: the single module that defines them.

Every event kind names its `entity_type`, the entity classes whose facts it changes (docs/rules.md,
"Which class owns which fact"), and a payload schema. A schema field has a type and, for floats, the
precision the writer rounds to before hashing, so canonical JSON is stable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The entity classes (docs/rules.md, "Entity classes"). Names are fixed; tiers live in the registry.
ENTITY_CLASSES: tuple[str, ...] = (
    "assignments",
    "user_status",
    "prices",
    "cost_center_membership",
    "contract_terms",
    "vendor_dims",
    "consumption",
    "utilization",
    "tickets",
)

# The id prefix of each entity type (`vnd_003`, `prd_0001`, ...): the simulator mints ids with it, and the LLM
# agent's grammar types an id argument by it (a `product` argument takes only the `prd_` ids the question names).
ID_PREFIXES: dict[str, str] = {
    "vendor": "vnd", "cost_center": "cc", "product": "prd", "contract": "ctr", "user": "usr", "license": "lic",
    "ticket": "tkt",
}


@dataclass(frozen=True)
class Field:
    """One payload field: `type` is str, int, float, bool, date or list[str]; floats carry `precision`."""

    type: str
    precision: int | None = None
    nullable: bool = False
    choices: tuple[str, ...] | None = None
    required: bool = True


@dataclass(frozen=True)
class EventKind:
    name: str
    entity_type: str
    classes: tuple[str, ...]  # entity classes whose facts this kind changes
    fields: dict[str, Field]


def _money() -> Field:
    return Field("float", precision=2)


VENDOR_TIERS = ("strategic", "preferred", "standard")
LICENSE_MODELS = ("per_seat", "subscription", "concurrent")
TICKET_PRIORITIES = ("low", "medium", "high", "critical")
TICKET_STATUSES = ("open", "in_progress", "resolved")

_KINDS: tuple[EventKind, ...] = (
    # --- reference data (day 0, plus rare vendor drift) ---
    EventKind("vendor_registered", "vendor", ("vendor_dims",), {
        "name": Field("str"),
        "tier": Field("str", choices=VENDOR_TIERS),
        "activity_weight": Field("float", precision=4),
    }),
    EventKind("vendor_changed", "vendor", ("vendor_dims",), {
        "change": Field("str", choices=("renamed", "tier_changed")),
        "name": Field("str"),
        "tier": Field("str", choices=VENDOR_TIERS),
        "previous_name": Field("str"),
        "previous_tier": Field("str", choices=VENDOR_TIERS),
    }),
    EventKind("cost_center_created", "cost_center", ("cost_center_membership",), {
        "name": Field("str"),
        "business_unit": Field("str"),
        "activity_weight": Field("float", precision=4),
    }),
    EventKind("product_listed", "product", ("prices",), {
        "name": Field("str"),
        "vendor_id": Field("str"),
        "license_model": Field("str", choices=LICENSE_MODELS),
        "api_access": Field("bool"),
        "list_price_usd": _money(),
        "activity_weight": Field("float", precision=4),
    }),
    EventKind("price_changed", "product", ("prices",), {
        "list_price_usd": _money(),
        "previous_list_price_usd": _money(),
        "reason": Field("str"),
    }),
    # --- people ---
    EventKind("user_hired", "user", ("user_status", "cost_center_membership"), {
        "cost_center_id": Field("str"),
        "activity_weight": Field("float", precision=4),
    }),
    EventKind("user_offboarded", "user", ("user_status",), {
        "reason": Field("str", choices=("voluntary", "involuntary")),
    }),
    EventKind("user_moved_cost_center", "user", ("cost_center_membership",), {
        "from_cost_center_id": Field("str"),
        "to_cost_center_id": Field("str"),
    }),
    # --- licenses ---
    EventKind("license_purchased", "license", ("assignments",), {
        "product_id": Field("str"),
        "contract_id": Field("str", nullable=True),
        "unit_price_usd": _money(),
        "activity_weight": Field("float", precision=4),
    }),
    EventKind("license_assigned", "license", ("assignments",), {
        "user_id": Field("str"),
        "product_id": Field("str"),
    }),
    EventKind("license_unassigned", "license", ("assignments",), {
        "user_id": Field("str"),
        "product_id": Field("str"),
        "reason": Field("str", choices=("offboarded", "reclaimed_idle")),
    }),
    EventKind("license_reassigned", "license", ("assignments",), {
        "from_user_id": Field("str"),
        "to_user_id": Field("str"),
        "product_id": Field("str"),
    }),
    # --- contracts ---
    EventKind("contract_signed", "contract", ("contract_terms",), {
        "vendor_id": Field("str"),
        "term_months": Field("int"),
        "signed_on": Field("date"),
        "effective_on": Field("date"),
        "expires_on": Field("date"),
        "annual_value_usd": _money(),
        "committed_seats": Field("int"),
        "auto_renew": Field("bool"),
        "renewal_notice_days": Field("int"),
        "activity_weight": Field("float", precision=4),
    }),
    EventKind("contract_renewed", "contract", ("contract_terms",), {
        "term_months": Field("int"),
        "effective_on": Field("date"),
        "expires_on": Field("date"),
        "annual_value_usd": _money(),
        "committed_seats": Field("int"),
        "previous_expires_on": Field("date"),
    }),
    EventKind("contract_expired", "contract", ("contract_terms",), {
        "expired_on": Field("date"),
    }),
    # --- live classes ---
    EventKind("consumption_logged", "license", ("consumption",), {
        "user_id": Field("str"),
        "product_id": Field("str"),
        "sessions": Field("int"),
        "session_minutes": Field("int"),
        "api_calls": Field("int"),
    }),
    EventKind("ticket_opened", "ticket", ("tickets",), {
        "user_id": Field("str"),
        "product_id": Field("str"),
        "priority": Field("str", choices=TICKET_PRIORITIES),
        "status": Field("str", choices=("open",)),
    }),
    EventKind("ticket_status_changed", "ticket", ("tickets",), {
        "status": Field("str", choices=("in_progress",)),
        "previous_status": Field("str", choices=TICKET_STATUSES),
    }),
    EventKind("ticket_resolved", "ticket", ("tickets",), {
        "status": Field("str", choices=("resolved",)),
        "previous_status": Field("str", choices=TICKET_STATUSES),
    }),
)

EVENT_KINDS: dict[str, EventKind] = {k.name: k for k in _KINDS}

# Payload schemas of format-1 (ChurnBench v1) ledgers: their own fields, nothing added.
V1_EVENT_KINDS: dict[str, EventKind] = {k.name: k for k in (
    # v1 writes `reason` on initial prices and `prev_price` / `pct_change` on later changes.
    EventKind("price_changed", "product", ("prices",), {
        "unit_price_usd": Field("float"),
        "reason": Field("str", required=False),
        "prev_price": Field("float", required=False),
        "pct_change": Field("float", required=False),
    }),
    EventKind("contract_signed", "contract", ("contract_terms",), {
        "vendor_idx": Field("int"), "term_months": Field("int"),
    }),
    EventKind("contract_renewed", "contract", ("contract_terms",), {"term_months": Field("int")}),
    EventKind("user_hired", "user", ("user_status", "cost_center_membership"), {
        "cost_center_id": Field("str"),
    }),
    EventKind("user_offboarded", "user", ("user_status",), {}),
    EventKind("user_moved_cost_center", "user", ("cost_center_membership",), {
        "cost_center_id": Field("str"),
    }),
    EventKind("license_purchased", "license", ("assignments",), {
        "product_id": Field("str"), "seats": Field("int"), "unit_price_usd": Field("float"),
    }),
    EventKind("license_assigned", "license", ("assignments",), {
        "to": Field("str"), "product_id": Field("str"),
    }),
    EventKind("license_unassigned", "license", ("assignments",), {
        "prev_holder": Field("str"), "reason": Field("str"),
    }),
    EventKind("license_reassigned", "license", ("assignments",), {
        "from": Field("str"), "to": Field("str"),
    }),
    EventKind("consumption_logged", "user", ("consumption",), {
        "product_id": Field("str"), "session_minutes": Field("int"), "api_calls": Field("int"),
    }),
)}

SCHEMAS_BY_FORMAT: dict[int, dict[str, EventKind]] = {1: V1_EVENT_KINDS, 2: EVENT_KINDS}


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "date": (str,), "int": (int,), "bool": (bool,), "float": (float, int),
}


def payload_error(kind: EventKind, payload: Any) -> str | None:
    """Why `payload` violates `kind`'s schema, or None when it conforms."""
    if type(payload) is not dict:
        return f"payload of {kind.name} must be an object"
    fields = kind.fields
    # Fast path (the loader calls this once per event): exact keys and plain types pass without the
    # detailed checks below, which only run to explain a problem or to check choices and precision.
    if payload.keys() == fields.keys():
        for name, value in payload.items():
            spec = fields[name]
            if type(value) not in _PY_TYPES[spec.type] or spec.choices is not None \
                    or spec.type == "date" or (spec.precision is not None and type(value) is float):
                break
        else:
            return None
    if payload.keys() != fields.keys():
        missing = sorted(k for k, f in fields.items() if f.required and k not in payload)
        extra = sorted(payload.keys() - fields.keys())
        if missing or extra:
            return _fields_error(kind.name, missing, extra)
    for name, value in payload.items():
        spec = fields[name]
        problem = _value_error(spec, value)
        if problem:
            return f"payload field {kind.name}.{name}: {problem} (got {value!r})"
    return None


def _fields_error(kind_name: str, missing: list[str], extra: list[str]) -> str:
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing)}")
    if extra:
        parts.append(f"unexpected {', '.join(extra)}")
    return f"payload of {kind_name}: {'; '.join(parts)}"


def _value_error(spec: Field, value: Any) -> str | None:
    if value is None:
        return None if spec.nullable else "must not be null"
    t = spec.type
    if t == "str" or t == "date":
        if not isinstance(value, str):
            return f"must be a {t} string"
        if t == "date" and not _is_iso_day(value):
            return "must be an ISO day YYYY-MM-DD"
        if spec.choices is not None and value not in spec.choices:
            return f"must be one of {', '.join(spec.choices)}"
        return None
    if t == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
    if t == "bool":
        return None if isinstance(value, bool) else "must be true or false"
    if t == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number"
        if spec.precision is not None and round(value, spec.precision) != value:
            return f"has more than {spec.precision} decimals"
        return None
    raise ValueError(f"schema uses unknown field type {t!r}")  # a bug in this module, not bad input


def _is_iso_day(value: str) -> bool:
    return (
        len(value) == 10 and value[4] == "-" and value[7] == "-"
        and value[:4].isdigit() and value[5:7].isdigit() and value[8:].isdigit()
    )


def round_payload(kind: EventKind, payload: dict[str, Any]) -> dict[str, Any]:
    """Round float fields to their declared precision (done by the writer, before hashing)."""
    out = dict(payload)
    for name, spec in kind.fields.items():
        if spec.type == "float" and spec.precision is not None and out.get(name) is not None:
            out[name] = round(float(out[name]), spec.precision)
    return out
