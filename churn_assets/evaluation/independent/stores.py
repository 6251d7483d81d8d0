"""Store parity by another path: what each store built by the fold should hold on a day, by SQL over the truth
schema (`sql/stores.sql` over the class states of `sql/states.sql`), compared with what the store holds.

The operational store, the SaaS API's answers, the contract documents and the RAG corpus are all projections
made by `world/fold.py`; their own parity checks compare them with the fold again, so a fold bug would pass
both. These comparisons share nothing with the fold but the comparison helpers of the stores themselves
(`fabric.operational.diff_collections`, `contracts.parity.check_parity`: they compare, they compute nothing);
every expected value is computed here, from `<world>_truth.events`.

`StoreTruth(conn, world_id, day)` runs the store queries; `operational_problems`, `saas_problems`,
`document_problems` and `rag_problems` return readable differences (empty: parity). The asset checks of
`orchestration/assets/` call them.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from churn_assets.evaluation.independent.gold import plain_value, run_with_columns, truth_events
from churn_assets.evaluation.independent.library import day_placeholder, library
from churn_assets.fabric.mongo import read_collections, read_meta
from churn_assets.fabric.operational import COLLECTIONS, diff_collections
from churn_assets.fabric.postgres import schema_name
from churn_assets.fabric.saas_client import SaasNotFound
from churn_assets.world.events import ENTITY_CLASSES
from contracts.model import ContractFacts, ProductRef, TermFacts
from contracts.parity import check_parity

if TYPE_CHECKING:
    import psycopg

    from churn_assets.fabric.saas_client import SaasClient
    from contracts.model import ContractFacts
    from contracts.store import StoredDay

Row = dict[str, Any]
Day = dt.date


class StoreTruth:
    """The store queries of one world on one day: every class served as of that day."""

    def __init__(self, conn: psycopg.Connection[Any], world_id: str, day: Day | str) -> None:
        self.conn, self.world_id = conn, world_id
        self.day = day if isinstance(day, dt.date) else dt.date.fromisoformat(day)
        self._events, self.head_hash = truth_events(conn, world_id)

    def rows(self, name: str, *, window_days: int | None = None) -> list[Row]:
        from psycopg import sql

        fragment = library().stores[name]
        values: dict[str, Any] = {day_placeholder(c): self.day for c in ENTITY_CLASSES}
        values["anchor"] = self.day
        if window_days is not None:
            values["first"] = self.day - dt.timedelta(days=window_days - 1)  # the window ends on the day
        query = sql.SQL(library().compose(fragment)).format(
            events=self._events, **{k: sql.Literal(v) for k, v in values.items()})
        columns, rows = run_with_columns(self.conn, query, f"store query {name} of {self.day}", self.world_id)
        return [{c: plain_value(v) for c, v in zip(columns, r, strict=True)} for r in rows]


def diff_records(what: str, expected: Mapping[str, Mapping[str, Any]], stored: Mapping[str, Mapping[str, Any]],
                 *, fields: Iterable[str] | None = None) -> list[str]:
    """Readable differences between records keyed by id: missing, unexpected, and field by field."""
    out = [f"{what}: {k} is missing" for k in sorted(expected.keys() - stored.keys())]
    out += [f"{what}: {k} should not exist" for k in sorted(stored.keys() - expected.keys())]
    for k in sorted(expected.keys() & stored.keys()):
        want, got = expected[k], stored[k]
        for f in fields if fields is not None else sorted(want):
            if not _same(want.get(f), got.get(f)):
                out.append(f"{what}: {k} {f} is {got.get(f)!r}, the truth says {want.get(f)!r}")
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) < 1e-9
    return bool(a == b)


# ---------------------------------------------------------------------------------------------------
# the operational store (one Mongo database per day)
# ---------------------------------------------------------------------------------------------------


def operational_documents(truth: StoreTruth, window_days: int) -> dict[str, list[Row]]:
    """Collection -> documents the day's operational database should hold (fabric/operational.py's schema)."""
    users = [{"_id": u["user_id"], "user_id": u["user_id"], "status": "active" if u["active"] else "offboarded",
              "active": u["active"], "hired_on": u["hired_on"], "offboarded_on": u["offboarded_on"],
              "offboard_reason": u["offboard_reason"], "cost_center_id": u["cost_center_id"]}
             for u in truth.rows("user_facts")]
    license_rows = truth.rows("license_facts")
    licenses = [{"_id": r["license_id"], "license_id": r["license_id"], "product_id": r["product_id"],
                 "vendor_id": r["vendor_id"], "contract_id": r["contract_id"], "purchased_on": r["purchased_on"],
                 "unit_price_usd": float(r["unit_price"]), "holder_user_id": r["holder"],
                 "status": "assigned" if r["holder"] is not None else "unassigned"} for r in license_rows]
    assignments = [{"_id": r["license_id"], "license_id": r["license_id"], "user_id": r["holder"],
                    "product_id": r["product_id"], "assigned_on": r["since"], "holder_active": r["holder_active"]}
                   for r in license_rows if r["holder"] is not None]
    entitlements = [{"_id": f"{r['user_id']}:{r['product_id']}", "user_id": r["user_id"],
                     "product_id": r["product_id"], "license_ids": list(r["license_ids"]), "since": r["since"]}
                    for r in truth.rows("entitlement_facts")]
    tickets = [{"_id": t["ticket_id"], **t} for t in truth.rows("ticket_facts")]
    start = (truth.day - dt.timedelta(days=window_days - 1)).isoformat()
    utilization = [{"_id": r["license_id"], "license_id": r["license_id"], "product_id": r["product_id"],
                    "holder_user_id": r["holder"], "window_days": window_days, "window_start": start,
                    "window_end": truth.day.isoformat(), "active_days": r["active_days"], "sessions": r["sessions"],
                    "session_minutes": r["minutes"], "api_calls": r["api_calls"], "last_used_on": r["last_used_on"]}
                   for r in truth.rows("license_usage", window_days=window_days)]
    out = {"users": users, "licenses": licenses, "assignments": assignments, "entitlements": entitlements,
           "tickets": tickets, "utilization": utilization}
    for docs in out.values():
        docs.sort(key=lambda d: d["_id"])
    return out


def operational_problems(db: Any, truth: StoreTruth, *, window_days: int, limit: int = 50) -> list[str]:
    """Every difference between the day's Mongo database and the truth schema (empty: parity)."""
    problems = []
    meta = read_meta(db) or {}
    if meta.get("ledger_head_hash") != truth.head_hash:
        problems.append(f"_meta: built from ledger head {meta.get('ledger_head_hash')!r}, the truth schema holds "
                        f"{truth.head_hash!r}")
    expected = operational_documents(truth, window_days)
    return problems + diff_collections(expected, read_collections(db, COLLECTIONS), limit=limit)


# ---------------------------------------------------------------------------------------------------
# the SaaS API (its answers as of the day)
# ---------------------------------------------------------------------------------------------------


def sample_users(users: Sequence[Row], n: int) -> list[str]:
    """`n` users spread evenly over the ids, the first and the latest hired included (deterministic)."""
    ids = [u["user_id"] for u in users]
    if len(ids) <= n:
        return ids
    last = len(ids) - 1
    return list(dict.fromkeys(ids[round(i * last / (n - 1))] for i in range(n)))


def saas_expected_utilization(truth: StoreTruth, window_days: int) -> dict[str, Row]:
    """Product -> the answer of `/products/{product}/utilization` (saas_mock/app.py's `Utilization`)."""
    per_license: dict[str, list[Row]] = {}
    for r in truth.rows("license_usage", window_days=window_days):
        per_license.setdefault(r["product_id"], []).append(r)
    start = (truth.day - dt.timedelta(days=window_days - 1)).isoformat()
    out = {}
    for p in truth.rows("product_usage", window_days=window_days):
        seats = sorted(per_license.get(p["product_id"], []), key=lambda r: r["license_id"])
        assigned = [r for r in seats if r["holder_active"]]
        active = [r for r in assigned if r["active_days"] > 0]
        out[p["product_id"]] = {
            "product_id": p["product_id"], "window_days": window_days, "window_start": start,
            "window_end": truth.day.isoformat(), "seats": len(seats), "assigned_seats": len(assigned),
            "unassigned_seats": sum(1 for r in seats if r["holder"] is None), "active_seats": len(active),
            "idle_seats": len(assigned) - len(active),
            "utilization_rate": round(len(active) / len(assigned), 4) if assigned else 0.0,
            "active_users": p["active_users"], "sessions": p["sessions"], "session_minutes": p["minutes"],
            "api_calls": p["api_calls"],
            "licenses": {r["license_id"]: {
                "license_id": r["license_id"], "holder_user_id": r["holder"],
                "assigned_to_active_user": r["holder_active"], "active_days": r["active_days"],
                "sessions": r["sessions"], "session_minutes": r["minutes"], "api_calls": r["api_calls"],
                "last_used_on": r["last_used_on"]} for r in seats},
        }
    return out


def saas_problems(client: SaasClient, truth: StoreTruth, *, window_days: int = 30, users: int = 24,
                  workers: int = 8) -> list[str]:
    """The SaaS API's answers as of the day against the truth schema: the price list, every ticket, the
    utilization of every product, the entitlements of a sample of users, and a 404 for a user hired later."""
    world, day = truth.world_id, truth.day.isoformat()
    where = f"SaaS API of {world} as of {day}"
    problems: list[str] = []
    products = truth.rows("product_facts")
    user_rows = {u["user_id"]: u for u in truth.rows("user_facts")}
    asked = sample_users(list(user_rows.values()), users)
    later = truth.rows("next_hire")

    calls: dict[str, Callable[[], Any]] = {
        "prices": lambda: client.prices(world, as_of=day),
        "tickets": lambda: client.tickets(world, as_of=day),
        **{f"utilization {p['product_id']}": partial(client.utilization, world, p["product_id"], as_of=day,
                                                     window_days=window_days)
           for p in products},
        **{f"entitlements {u}": partial(client.entitlements, world, u, as_of=day) for u in asked},
    }
    def call(name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except SaasNotFound as e:  # the vendor does not know what the truth knows on the day
            problems.append(f"{where}, {name}: 404 ({e})")
            return None

    # In parallel: the API's latency is per request (50 ms by default), the rate limit allows a minute's burst.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(call, name, fn) for name, fn in calls.items()}
        answers = {name: f.result() for name, f in futures.items()}

    expected_prices = {p["product_id"]: {"product_id": p["product_id"], "name": p["name"], "vendor_id": p["vendor_id"],
                                         "license_model": p["license_model"], "list_price_usd": float(p["list_price"]),
                                         "currency": "USD", "price_valid_from": p["price_since"]} for p in products}
    problems += diff_records(f"{where}, /prices", expected_prices,
                             {p["product_id"]: p for p in answers["prices"] or []})
    problems += diff_records(f"{where}, /tickets", {t["ticket_id"]: t for t in truth.rows("ticket_facts")},
                             {t["ticket_id"]: t for t in answers["tickets"] or []})
    for pid, want in saas_expected_utilization(truth, window_days).items():
        got = answers[f"utilization {pid}"]
        if got is None:
            continue
        what = f"{where}, /products/{pid}/utilization"
        if got.get("served_day") != day:
            problems.append(f"{what}: served_day {got.get('served_day')!r}")
        problems += diff_records(what, {pid: {k: v for k, v in want.items() if k != "licenses"}}, {pid: got})
        problems += diff_records(f"{what} licenses", want["licenses"],
                                 {r["license_id"]: r for r in got.get("licenses", [])})
    held: dict[str, list[Row]] = {}
    for e in truth.rows("entitlement_lines"):
        held.setdefault(e["user_id"], []).append({k: e[k] for k in ("product_id", "product_name", "license_id",
                                                                    "since")})
    for user_id in asked:
        u, got = user_rows[user_id], answers[f"entitlements {user_id}"]
        if got is None:
            continue
        want = {"status": "active" if u["active"] else "offboarded", "cost_center_id": u["cost_center_id"],
                "hired_on": u["hired_on"], "offboarded_on": u["offboarded_on"], "served_day": day}
        what = f"{where}, /entitlements/{user_id}"
        problems += diff_records(what, {user_id: want}, {user_id: got})
        if got.get("entitlements") != held.get(user_id, []):
            problems.append(f"{what}: entitlements {got.get('entitlements')!r}, the truth says "
                            f"{held.get(user_id, [])!r}")
    for row in later:  # a user hired after the day is unknown to the vendor's view of that day
        try:
            client.entitlements(world, row["user_id"], as_of=day)
            problems.append(f"{where}, /entitlements/{row['user_id']}: answered for a user hired after {day}")
        except SaasNotFound as e:
            if e.missing != "user":  # an unknown tenant is not "this user is not hired yet"
                problems.append(f"{where}, /entitlements/{row['user_id']}: 404 ({e})")
    return problems


# ---------------------------------------------------------------------------------------------------
# the contract documents
# ---------------------------------------------------------------------------------------------------


def document_facts(truth: StoreTruth) -> list[ContractFacts]:
    """The facts every document of the day should state (contracts/model.py), from the truth schema."""
    def day(value: str | None) -> Day | None:
        return None if value is None else dt.date.fromisoformat(value)

    out = []
    for c in truth.rows("contract_facts"):
        terms = tuple(TermFacts(change, dt.date.fromisoformat(recorded), months, dt.date.fromisoformat(start),
                                dt.date.fromisoformat(end), None if value is None else float(value), seats)
                      for change, recorded, months, start, end, value, seats in c["terms"])
        out.append(ContractFacts(
            contract_id=c["contract_id"], vendor_id=c["vendor_id"], vendor_name=c["vendor_name"],
            vendor_tier=c["vendor_tier"], products=tuple(ProductRef(p, n) for p, n in c["products"]),
            signed_on=dt.date.fromisoformat(c["signed_on"]), auto_renew=c["auto_renew"],
            renewal_notice_days=c["notice_days"], terms=terms, expired_on=day(c["expired_on"]), status=c["status"]))
    return out


def document_problems(stored: StoredDay, truth: StoreTruth) -> list[str]:
    """The facts parsed back from the day's Markdown documents against the truth schema, and the files
    against their manifest."""
    return [str(p) for p in check_parity(stored, document_facts(truth), truth.day)]


# ---------------------------------------------------------------------------------------------------
# the RAG corpus (fact records built on the day)
# ---------------------------------------------------------------------------------------------------

_D = r"(\d{4}-\d{2}-\d{2})"
_USD = r"USD ([\d,]+\.\d{2})"
_USER_ACTIVE = re.compile(rf"^User (\S+): active, hired {_D}\. "
                          rf"(?:Cost center (\S+)\b.* since {_D}\.|No cost center\.)$")
_USER_GONE = re.compile(rf"^User (\S+): offboarded {_D}(?: \(([^)]*)\))?, hired {_D}\."
                        r"(?: Last cost center (\S+)\b.*)?$")
_LICENSE = re.compile(rf"^License (\S+): (\S+)\b.*?, bought {_D} at {_USD} per seat per month"
                      rf"(?: under contract (\S+?))?\. (?:Assigned to user (\S+) since {_D}\.|Unassigned since .*|"
                      r"Never assigned\.)$")
_PRODUCT = re.compile(rf"^Product (\S+): .*?(?:vendor (vnd_\d+)\b.*)?List price {_USD} per seat per month since "
                      rf"{_D}(?:, previously {_USD})?\.$")
_VENDOR = re.compile(rf"^Vendor (\S+): (.+), (strategic|preferred|standard) tier, registered {_D}\.")
_COST_CENTER = re.compile(r"^Cost center (\S+): (.*?)(?:, business unit (.+))?\.$")
_TICKET = re.compile(rf"^Ticket (\S+): (\w+) priority, opened {_D} by user (\S+) about product (\S+?)\b.*\. "
                     rf"Status ([a-z ]+) since {_D}\.$")
_WINDOW = re.compile(r"last (\d+) days (no use|(?:(\d+) sessions, )?(\d+) minutes, (\d+) API calls)")
_LAST_USED = re.compile(rf"; last used {_D}\.$")


def _money(text: str | None) -> float | None:
    return None if text is None else float(text.replace(",", ""))


# The corpus' tables in `<world>_staging` (grounding/rag_corpus.py writes them; record texts live in the
# embeddings table by content hash). Named here rather than imported: the check reads the store as stored.
CORPUS_RECORDS, CORPUS_BUILDS, EMBEDDINGS = "rag_corpus_records", "rag_corpus_builds", "embeddings"


def _stored_records(conn: psycopg.Connection[Any], world_id: str, day: Day) -> dict[str, tuple[str, str, str]] | None:
    """record id -> (kind, entity id, text) of the corpus built on `day`; None when there is no build."""
    from psycopg import sql

    schema = schema_name(world_id, "staging")
    builds = sql.Identifier(schema, CORPUS_BUILDS)
    found = conn.execute("SELECT to_regclass(%s)", (builds.as_string(conn),)).fetchone()
    if found is None or found[0] is None or conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE day = %s").format(builds), (day,)).fetchone() is None:
        return None
    rows = conn.execute(sql.SQL(
        "SELECT DISTINCT ON (r.record_id) r.record_id, r.kind, r.entity_id, e.content FROM {} r "
        "JOIN {} e ON e.content_hash = r.content_hash WHERE r.day = %s ORDER BY r.record_id").format(
        sql.Identifier(schema, CORPUS_RECORDS), sql.Identifier(schema, EMBEDDINGS)), (day,)).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def _parsed(pattern: re.Pattern[str], text: str) -> tuple[str | None, ...] | None:
    m = pattern.match(text)
    return None if m is None else m.groups()


def rag_problems(conn: psycopg.Connection[Any], truth: StoreTruth, *, limit: int = 200) -> list[str]:
    """The RAG corpus built on the day against the truth schema: the records of each kind are exactly the
    entities the truth knows on the day, and the facts each record states (status, dates, cost center, holder,
    prices, names, tiers, ticket status, usage per window) are the truth's."""
    day = truth.day
    where = f"RAG corpus of {truth.world_id} built {day}"
    stored = _stored_records(conn, truth.world_id, day)
    if stored is None:
        return [f"{where}: no build (materialize rag_index for that world and day)"]
    by_kind: dict[str, dict[str, str]] = {}
    chunk_contracts: set[str] = set()
    for record_id, (kind, entity_id, text) in stored.items():
        if kind == "contract_chunk":
            chunk_contracts.add(entity_id)
        else:
            by_kind.setdefault(kind, {})[record_id] = text
    problems: list[str] = []

    def facts(kind: str, expected: Mapping[str, Row], pattern: re.Pattern[str],
              read: Callable[[tuple[str | None, ...]], Row]) -> None:
        want = {f"{kind}:{k}": v for k, v in expected.items()}
        got = {}
        for record_id, text in by_kind.get(kind, {}).items():
            groups = _parsed(pattern, text)
            if groups is None:  # said once; its fields are not compared
                problems.append(f"{where}: record {record_id} does not read as a {kind} record: {text!r}")
                got[record_id] = want.get(record_id, {})
            else:
                got[record_id] = read(groups)
        problems.extend(diff_records(f"{where}, record", want, got))

    users = {u["user_id"]: u for u in truth.rows("user_facts")}
    user_expected = {uid: {"status": "active" if u["active"] else "offboarded", "hired_on": u["hired_on"],
                           "offboarded_on": u["offboarded_on"], "cost_center_id": u["cost_center_id"],
                           **({"cost_center_since": u["cost_center_since"]} if u["active"] else {})}
                     for uid, u in users.items()}
    user_got: dict[str, Row] = {}
    for record_id, text in by_kind.get("user", {}).items():
        if (g := _parsed(_USER_ACTIVE, text)) is not None:
            user_got[record_id] = {"status": "active", "hired_on": g[1], "offboarded_on": None,
                                   "cost_center_id": g[2], "cost_center_since": g[3]}
        elif (g := _parsed(_USER_GONE, text)) is not None:
            user_got[record_id] = {"status": "offboarded", "hired_on": g[3], "offboarded_on": g[1],
                                   "cost_center_id": g[4]}
        else:
            problems.append(f"{where}: record {record_id} does not read as a user record: {text!r}")
            user_got[record_id] = user_expected.get(record_id.removeprefix("user:"), {})
    problems += diff_records(f"{where}, record", {f"user:{k}": v for k, v in user_expected.items()}, user_got)

    facts("license", {r["license_id"]: {
        "product_id": r["product_id"], "purchased_on": r["purchased_on"], "unit_price_usd": float(r["unit_price"]),
        "contract_id": r["contract_id"], "holder": r["holder"], "since": r["since"]}
        for r in truth.rows("license_facts")},
        _LICENSE, lambda g: {"product_id": g[1], "purchased_on": g[2], "unit_price_usd": _money(g[3]),
                             "contract_id": g[4], "holder": g[5], "since": g[6]})
    facts("product", {p["product_id"]: {
        "vendor_id": p["vendor_id"], "list_price_usd": float(p["list_price"]), "price_since": p["price_since"],
        "previous_price_usd": None if p["previous_price"] is None else float(p["previous_price"])}
        for p in truth.rows("product_facts")},
        _PRODUCT, lambda g: {"vendor_id": g[1], "list_price_usd": _money(g[2]), "price_since": g[3],
                             "previous_price_usd": _money(g[4])})
    facts("vendor", {v["vendor_id"]: {"name": v["name"], "tier": v["tier"], "registered_on": v["registered_on"]}
                     for v in truth.rows("vendor_facts")},
          _VENDOR, lambda g: {"name": g[1], "tier": g[2], "registered_on": g[3]})
    facts("cost_center", {c["cost_center_id"]: {"business_unit": c["business_unit"]}
                          for c in truth.rows("cost_center_facts")},
          _COST_CENTER, lambda g: {"business_unit": g[2]})
    facts("ticket", {t["ticket_id"]: {
        "priority": t["priority"], "opened_on": t["opened_on"], "user_id": t["user_id"], "product_id": t["product_id"],
        "status": t["status"].replace("_", " "), "updated_on": t["updated_on"]} for t in truth.rows("ticket_facts")},
        _TICKET, lambda g: {"priority": g[1], "opened_on": g[2], "user_id": g[3], "product_id": g[4],
                            "status": g[5], "updated_on": g[6]})

    usage_expected = {}
    for r in truth.rows("pair_usage"):
        row: Row = {"last_used_on": r["last_used_on"]}
        for w in (7, 30, 90):
            used = r[f"records_{w}"] > 0
            row[f"minutes_{w}"] = r[f"minutes_{w}"] if used else None
            row[f"api_calls_{w}"] = r[f"api_calls_{w}"] if used else None
            row[f"sessions_{w}"] = r[f"sessions_{w}"] if used else None
        usage_expected[f"{r['user_id']}:{r['product_id']}"] = row
    usage_got: dict[str, Row] = {}
    for record_id, text in by_kind.get("consumption", {}).items():
        last = _LAST_USED.search(text)
        row = {"last_used_on": last.group(1) if last else None}
        for w, phrase, sessions, minutes, calls in _WINDOW.findall(text):
            no_use = phrase == "no use"
            row[f"minutes_{w}"] = None if no_use else int(minutes)
            row[f"api_calls_{w}"] = None if no_use else int(calls)
            row[f"sessions_{w}"] = None if no_use or not sessions else int(sessions)
        usage_got[record_id] = row
    problems += diff_records(f"{where}, record", {f"consumption:{k}": v for k, v in usage_expected.items()},
                             usage_got)

    contracts = {c["contract_id"] for c in truth.rows("contract_facts")}
    problems += [f"{where}: no chunk of contract {c}" for c in sorted(contracts - chunk_contracts)]
    problems += [f"{where}: chunks of contract {c}, which the truth does not know on the day"
                 for c in sorted(chunk_contracts - contracts)]
    return problems[:limit] if limit else problems
