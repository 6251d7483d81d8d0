"""The operational store's content: the world's current state as of a day, as plain documents.

Pure: `project_operational(state, day)` turns a fold state (`churn_assets.world.fold.fold_ledger(records,
day)`) into one list of documents per collection. `fabric/mongo.py` writes them into the day's database
`<world>_<yyyymmdd>`; the asset and its parity check (`assets/operational.py`) call both.

Documents use string ids (`_id` is the entity id), ISO day strings, plain ints, floats, bools and lists of
strings only: no ObjectId, no Decimal128, no datetime and no nesting deeper than a list. That is what the
MongoDB-protocol server here (nx-27017) handles correctly, and the same documents load unchanged into a
real MongoDB 7 (`CHURNBENCH_MONGODB_URI`).

Collections (every one "as of `day`", i.e. after all events with `at <= day`):

- `users`: every user hired on or before the day; `status` active/offboarded, the cost center on the day.
- `licenses`: every license purchased on or before the day, with its holder on the day (if any).
- `assignments`: one document per license held on the day (the current holding), whatever the holder's
  status; `holder_active` says whether the holder is an active user (docs/rules.md, "Spend": a license held by an
  offboarded user counts in nobody's spend).
- `entitlements`: what active users may use: one document per (active user, product) over the licenses
  the user holds on the day (`fold.assigned_licenses`).
- `tickets`: every ticket opened on or before the day, with its status on the day.
- `utilization`: one document per license that exists on the day: consumption on that license over the
  trailing window of `window_days` days ending on the day (`window_start..day`, both inclusive).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from churn_assets.world.calendar import as_day
from churn_assets.world.fold import active_users, assigned_licenses, license_holders, tickets_as_of
from churn_assets.world.state import ConsumptionRecord, WorldState

Document = dict[str, Any]

# Bumped whenever the documents change shape: a stored partition with another version is rewritten.
OPERATIONAL_SCHEMA_VERSION = 2  # 2: `_meta` records each collection's content hash
DEFAULT_WINDOW_DAYS = 30

COLLECTIONS: tuple[str, ...] = ("users", "licenses", "assignments", "entitlements", "tickets", "utilization")

# Secondary indexes per collection (`_id` is always indexed). Each entry is one index's fields, ascending:
# the lookups the arms and the checks make (a user's licenses, a product's seats, open tickets by product).
INDEXES: dict[str, tuple[tuple[str, ...], ...]] = {
    "users": (("status",), ("cost_center_id",)),
    "licenses": (("product_id",), ("holder_user_id",), ("status",)),
    "assignments": (("user_id",), ("product_id",)),
    "entitlements": (("user_id",), ("product_id",)),
    "tickets": (("status",), ("product_id", "status"), ("user_id",)),
    "utilization": (("product_id",), ("holder_user_id",)),
}


def _iso(day: dt.date | None) -> str | None:
    return None if day is None else day.isoformat()


def window_bounds(day: dt.date | str, window_days: int) -> tuple[dt.date, dt.date]:
    """The trailing window of `window_days` days that ends on `day`, both ends inclusive."""
    if window_days < 1:
        raise ValueError(f"window_days must be at least 1, not {window_days}")
    end = as_day(day)
    return end - dt.timedelta(days=window_days - 1), end


def project_operational(state: WorldState, day: dt.date | str, *,
                        window_days: int = DEFAULT_WINDOW_DAYS) -> dict[str, list[Document]]:
    """Collection -> documents (sorted by `_id`) of the operational store as of `day`.

    `state` must hold every class at least as of `day` (a `fold_ledger(records, day)` state); facts later
    than `day` in it are ignored, so a state folded further still projects `day` correctly.
    """
    d = as_day(day)
    out = {
        "users": _users(state, d),
        "licenses": _licenses(state, d),
        "assignments": _assignments(state, d),
        "entitlements": _entitlements(state, d),
        "tickets": _tickets(state, d),
        "utilization": _utilization(state, d, window_days),
    }
    for docs in out.values():
        docs.sort(key=lambda doc: doc["_id"])
    return out


def _users(state: WorldState, d: dt.date) -> list[Document]:
    membership = state.cost_center_membership
    docs = []
    for user in state.user_status.users.values():
        if user.hired_on > d:
            continue
        offboarded = user.offboarded_on if user.offboarded_on is not None and user.offboarded_on <= d else None
        docs.append({
            "_id": user.user_id,
            "user_id": user.user_id,
            "status": "active" if offboarded is None else "offboarded",
            "active": offboarded is None,
            "hired_on": _iso(user.hired_on),
            "offboarded_on": _iso(offboarded),
            "offboard_reason": user.offboard_reason if offboarded is not None else None,
            # Membership intervals stay open after an offboarding: the last cost center is kept.
            "cost_center_id": membership.cost_center_on(user.user_id, d),
        })
    return docs


def _licenses(state: WorldState, d: dt.date) -> list[Document]:
    products = state.prices.products
    docs = []
    for lic in state.assignments.licenses.values():
        if lic.purchased_on > d:
            continue
        holder = lic.holder_on(d)
        product = products.get(lic.product_id)
        docs.append({
            "_id": lic.license_id,
            "license_id": lic.license_id,
            "product_id": lic.product_id,
            "vendor_id": product.vendor_id if product is not None else None,
            "contract_id": lic.contract_id,
            "purchased_on": _iso(lic.purchased_on),
            "unit_price_usd": float(lic.unit_price_usd),
            "holder_user_id": holder,
            "status": "assigned" if holder is not None else "unassigned",
        })
    return docs


def _holding_since(state: WorldState, license_id: str, d: dt.date) -> dt.date | None:
    for h in reversed(state.assignments.licenses[license_id].holdings):
        if h.valid_from <= d and (h.valid_to is None or d < h.valid_to):
            return h.valid_from
    return None


def _assignments(state: WorldState, d: dt.date) -> list[Document]:
    active = active_users(state, d)
    licenses = state.assignments.licenses
    return [{
        "_id": license_id,
        "license_id": license_id,
        "user_id": user_id,
        "product_id": licenses[license_id].product_id,
        "assigned_on": _iso(_holding_since(state, license_id, d)),
        "holder_active": user_id in active,
    } for license_id, user_id in license_holders(state, d).items()]


def _entitlements(state: WorldState, d: dt.date) -> list[Document]:
    licenses = state.assignments.licenses
    grouped: dict[tuple[str, str], list[str]] = {}
    for license_id, user_id in assigned_licenses(state, d).items():
        grouped.setdefault((user_id, licenses[license_id].product_id), []).append(license_id)
    docs = []
    for (user_id, product_id), license_ids in grouped.items():
        since = min(_holding_since(state, lid, d) or d for lid in license_ids)
        docs.append({
            "_id": f"{user_id}:{product_id}",
            "user_id": user_id,
            "product_id": product_id,
            "license_ids": sorted(license_ids),
            "since": _iso(since),
        })
    return docs


def _tickets(state: WorldState, d: dt.date) -> list[Document]:
    return [{"_id": t["ticket_id"], **t} for t in tickets_as_of(state, d)]


def usage_in_window(records: Iterable[ConsumptionRecord], start: dt.date, end: dt.date) -> Document:
    """Sums over consumption records with `start <= day <= end`: days used, sessions, minutes, API calls."""
    days: set[dt.date] = set()
    sessions = minutes = api_calls = 0
    for r in records:
        if start <= r.day <= end:
            days.add(r.day)
            sessions += r.sessions or 0  # format-1 records carry no session count
            minutes += r.session_minutes
            api_calls += r.api_calls
    return {"active_days": len(days), "sessions": sessions, "session_minutes": minutes, "api_calls": api_calls}


def _last_used(records: list[ConsumptionRecord], d: dt.date) -> dt.date | None:
    for r in reversed(records):  # ledger order: days ascend
        if r.day <= d:
            return r.day
    return None


def _utilization(state: WorldState, d: dt.date, window_days: int) -> list[Document]:
    start, end = window_bounds(d, window_days)
    by_license: Mapping[str, list[ConsumptionRecord]] = state.utilization.by_license
    docs = []
    for lic in state.assignments.licenses.values():
        if lic.purchased_on > d:
            continue
        records = by_license.get(lic.license_id, [])
        docs.append({
            "_id": lic.license_id,
            "license_id": lic.license_id,
            "product_id": lic.product_id,
            "holder_user_id": lic.holder_on(d),
            "window_days": window_days,
            "window_start": _iso(start),
            "window_end": _iso(end),
            **usage_in_window(records, start, end),
            "last_used_on": _iso(_last_used(records, d)),
        })
    return docs


def document_counts(collections: Mapping[str, list[Document]]) -> dict[str, int]:
    return {name: len(collections.get(name, [])) for name in COLLECTIONS}


# ---------------------------------------------------------------------------------------------------
# Parity: the stored documents against the projection of the fold
# ---------------------------------------------------------------------------------------------------


def diff_collections(expected: Mapping[str, list[Document]], actual: Mapping[str, list[Document]],
                     *, limit: int = 20) -> list[str]:
    """Readable differences (collection, document id, field, expected vs stored), at most `limit`.

    An empty list means the stored collections equal the expected ones document for document.
    """
    problems: list[str] = []

    def add(text: str) -> bool:
        problems.append(text)
        return len(problems) >= limit

    for name in COLLECTIONS:
        want = {doc["_id"]: doc for doc in expected.get(name, [])}
        have = {doc["_id"]: doc for doc in actual.get(name, [])}
        for missing in sorted(want.keys() - have.keys()):
            if add(f"{name}: document {missing} is missing"):
                return problems
        for extra in sorted(have.keys() - want.keys()):
            if add(f"{name}: document {extra} should not exist"):
                return problems
        for doc_id in sorted(want.keys() & have.keys()):
            w, h = want[doc_id], have[doc_id]
            for key in sorted(w.keys() | h.keys()):
                if key not in h:
                    stop = add(f"{name}: document {doc_id} lacks field {key} (expected {w[key]!r})")
                elif key not in w:
                    stop = add(f"{name}: document {doc_id} has unexpected field {key}={h[key]!r}")
                elif not _same(w[key], h[key]):
                    stop = add(f"{name}: document {doc_id} field {key} is {h[key]!r}, expected {w[key]!r}")
                else:
                    continue
                if stop:
                    return problems
    return problems


def _same(a: Any, b: Any) -> bool:
    # bool is an int in Python: True == 1 would hide a server that stores booleans as numbers.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
