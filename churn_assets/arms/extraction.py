"""The extraction rule: how the deterministic agent gets an answer out of retrieved fact records.

Arms that only retrieve fact records (the RAG corpus: `grounding_no_source_routing` and `classic_rag`)
give the agent the top-k records most similar to the question, nothing else. The
rule below is fixed and the same for every such arm, so that what separates them is what they retrieve:

1. **Retrieve** the `K` records (`K = 10`) of the corpus most similar to the question text, among the
   record kinds that state the template's facts (`SPECS[template].kinds`; `classic_rag` searches every
   kind: one store of everything); records naming the entity ids the question names rank first
   (`rag_corpus.search_corpus`).
2. **Read** every retrieved record into facts (`read_record`: the record texts of `grounding/rag_corpus.py`
   and the contract chunks' tables). Nothing else is known: a record that was not retrieved does not exist.
3. **Answer**, by the template's *mode*:
   - `lookup` (a question naming one entity and asking one of its facts): the fact as stated by the
     highest-ranked retrieved record of that entity that states it; "unknown" when none does;
   - otherwise the answer is an **aggregate over the retrieved records**, by answer type:
     `integer`: how many retrieved records satisfy the question's condition; `money`: the sum of their
     amounts; `fraction`: satisfying records over eligible records; `entity`: the entity with the largest
     summed amount; `entity_list`: the entities of the satisfying records.
   A template whose facts no record states answers "unknown".

So a point lookup comes out right whenever its record is retrieved, and an aggregate over more records
than `K` comes out wrong, as it would for a model reading the same context. Windows ("in the last N
days") end at today (T); states derived from dates (who is active, a contract's status) are derived at
today from the dates the records state, never read from a status line.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from churn_assets.tasks.answers import Value, last_day, round_half_up, top_of
from churn_assets.world.calendar import Day, whole_months
from contracts.parse import NOT_STATED, parse_summary, split_row

K = 10  # records retrieved per question

# Record kinds of the RAG corpus (grounding/rag_corpus.py) and the entity classes whose facts each states
# (a trace attributes the corpus's data time to these classes).
RECORD_CLASSES: dict[str, tuple[str, ...]] = {
    "user": ("user_status", "cost_center_membership"),
    "license": ("assignments",),
    "product": ("prices",),
    "vendor": ("vendor_dims",),
    "cost_center": ("cost_center_membership",),
    "ticket": ("tickets",),
    "contract_chunk": ("contract_terms",),
    "consumption": ("consumption", "utilization"),
}


class RetrievedRecord(Protocol):
    kind: str
    entity_id: str
    text: str


class RecordSearch(Protocol):
    def __call__(self, query: str, kinds: Sequence[str] | None, k: int) -> Sequence[RetrievedRecord]: ...


# ---------------------------------------------------------------------------------------------------
# reading records (the serialisers' sentences, read back)
# ---------------------------------------------------------------------------------------------------

_DAY = r"(\d{4}-\d{2}-\d{2})"
_USD = r"USD ([\d,]+\.\d{2})"


def _day(text: str | None) -> Day | None:
    return None if text is None else dt.date.fromisoformat(text)


def _usd(text: str | None) -> float | None:
    return None if text is None else float(text.replace(",", ""))


@dataclass
class Facts:
    """What one retrieved record states (fields left None when it does not say)."""

    kind: str
    entity_id: str
    values: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values.get(key)


_USER_ACTIVE = re.compile(rf"^User (\S+): active, hired {_DAY}\.")
_USER_OFF = re.compile(rf"^User (\S+): offboarded {_DAY}(?: \([^)]*\))?, hired {_DAY}\.")
_CC_IN_TEXT = re.compile(r"[Cc]ost center (cc_\d+)(?: \(([^)]*)\))?")
_LICENSE = re.compile(rf"^License (\S+): (\S+)(?: \(.*?\))?, bought {_DAY} at {_USD} per seat per month"
                      r"(?: under contract (\S+?))?\.")
_HELD = re.compile(rf"Assigned to user (\S+) since {_DAY}\.")
_UNHELD = re.compile(rf"Unassigned since (?:{_DAY}|an unknown day) \(last holder (\S+?)(?:, ([^)]*))?\)\.")
_PRODUCT = re.compile(rf"^Product (\S+): .*List price {_USD} per seat per month since {_DAY}(?:, previously {_USD})?\.")
_PRODUCT_VENDOR = re.compile(r", vendor (vnd_\d+)")
_VENDOR = re.compile(rf"^Vendor (\S+): (.*), (\w+) tier, registered {_DAY}\.")
_COST_CENTER = re.compile(r"^Cost center (\S+): (.*?)(?:, business unit (.*))?\.$")
_TICKET = re.compile(rf"^Ticket (\S+): (\w+) priority, opened {_DAY} by user (\S+) about product (\S+?)"
                     rf"(?: \(.*\))?\. Status (open|in progress|resolved) since {_DAY}\.")
_USAGE = re.compile(rf"^Usage of product (\S+?)(?: \(.*?\))? by user (\S+): (.*); last used {_DAY}\.$")
_USAGE_WINDOW = re.compile(r"last (\d+) days (no use|(?:(\d+) sessions, )?(\d+) minutes, (\d+) API calls)")


def read_record(kind: str, entity_id: str, text: str) -> Facts:
    """The facts a record states (an unreadable record states nothing)."""
    f = Facts(kind, entity_id)
    v = f.values
    if kind == "user":
        m = _USER_ACTIVE.match(text)
        if m:
            v.update(active=True, hired_on=_day(m[2]), offboarded_on=None)
        elif (m := _USER_OFF.match(text)) is not None:
            v.update(active=False, offboarded_on=_day(m[2]), hired_on=_day(m[3]))
        if (cc := _CC_IN_TEXT.search(text)) is not None:
            v["cost_center"] = cc[1]
            unit = re.search(r"business unit (.*)$", cc[2] or "")
            v["business_unit"] = unit[1] if unit else None
    elif kind == "license":
        if (m := _LICENSE.match(text)) is not None:
            v.update(product=m[2], purchased_on=_day(m[3]), unit_price=_usd(m[4]), contract=m[5])
        if (m := _HELD.search(text)) is not None:
            v.update(holder=m[1], held_since=_day(m[2]))
        elif (m := _UNHELD.search(text)) is not None:
            v.update(holder=None, unassigned_since=_day(m[1]), last_holder=m[2], ended_by=m[3])
        elif "Never assigned" in text:
            v.update(holder=None)
    elif kind == "product":
        if (m := _PRODUCT.match(text)) is not None:
            v.update(price=_usd(m[2]), price_since=_day(m[3]), previous_price=_usd(m[4]))
        vendor = _PRODUCT_VENDOR.search(text)
        v["vendor"] = vendor[1] if vendor else None
    elif kind == "vendor":
        if (m := _VENDOR.match(text)) is not None:
            v.update(name=m[2], tier=m[3])
    elif kind == "cost_center":
        if (m := _COST_CENTER.match(text)) is not None:
            v.update(business_unit=m[3])
    elif kind == "ticket":
        if (m := _TICKET.match(text)) is not None:
            v.update(priority=m[2], opened_on=_day(m[3]), user=m[4], product=m[5], status=m[6].replace(" ", "_"))
    elif kind == "consumption":
        if (m := _USAGE.match(text)) is not None:
            windows = {}
            for w in _USAGE_WINDOW.finditer(m[3]):
                windows[int(w[1])] = (0, 0) if w[2] == "no use" else (int(w[4]), int(w[5]))
            v.update(product=m[1], user=m[2], windows=windows, last_used=_day(m[4]))
    elif kind == "contract_chunk":
        v.update(_contract_chunk(text))
    return f


_PROSE: dict[str, re.Pattern[str]] = {
    "annual_value": re.compile(rf"The annual fee for the current term is {_USD}"),
    "committed_seats": re.compile(r"commits to (\d+) seats for the current term"),
    "current_term": re.compile(rf"The current term of \d+ months took effect on {_DAY} and expires at the end "
                               rf"of {_DAY}"),
    "notice_deadline": re.compile(rf"\(for the current term, (?:on or before|by) {_DAY}\)"),
    "vendor": re.compile(r'made between (.*?) \(the "Vendor"(?:, vendor record (\S+?))?\)'),
}
_RENEWAL = re.compile(rf"Renewal recorded on {_DAY}: a term of \d+ months from {_DAY} to {_DAY}")


def _contract_chunk(text: str) -> dict[str, Any]:
    """A contract chunk's facts: its summary rows, its Schedule B rows, and what its clauses state."""
    out: dict[str, Any] = {}
    summary = parse_summary(text)
    if summary:
        out["summary"] = summary
    terms = {}
    for line in text.splitlines():
        if line.strip().startswith("|"):
            cells = split_row(line)
            if len(cells) == 8 and cells[0].isdigit():
                terms[int(cells[0])] = {
                    "effective_on": _day(cells[3]), "expires_on": _day(cells[4]),
                    "annual_value": None if cells[6] == NOT_STATED else float(cells[6].replace(",", "")),
                    "committed_seats": None if cells[7] == NOT_STATED else int(cells[7])}
    if terms:
        out["terms"] = terms
    prose: dict[str, Any] = {}
    if (m := _PROSE["annual_value"].search(text)) is not None:
        prose["annual_value"] = _usd(m[1])
    if (m := _PROSE["committed_seats"].search(text)) is not None:
        prose["committed_seats"] = int(m[1])
    if (m := _PROSE["current_term"].search(text)) is not None:
        prose.update(effective_on=_day(m[1]), expires_on=_day(m[2]))
    if (m := _PROSE["notice_deadline"].search(text)) is not None:
        prose["notice_deadline"] = _day(m[1])
    if (m := _PROSE["vendor"].search(text)) is not None:
        prose.update(vendor_name=m[1], vendor_id=m[2])
    renewals = [{"effective_on": _day(m[2]), "expires_on": _day(m[3])} for m in _RENEWAL.finditer(text)]
    if renewals:
        prose["renewals"] = renewals
    if prose:
        out["prose"] = prose
    return out


# ---------------------------------------------------------------------------------------------------
# what was retrieved, indexed
# ---------------------------------------------------------------------------------------------------


@dataclass
class Retrieved:
    """The records of one retrieval, read, in rank order; joins look only at these."""

    facts: list[Facts]
    today: Day

    def of(self, kind: str) -> list[Facts]:
        return [f for f in self.facts if f.kind == kind]

    def first(self, kind: str, entity_id: str) -> Facts | None:
        return next((f for f in self.facts if f.kind == kind and f.entity_id == entity_id), None)

    def user(self, user_id: str | None) -> Facts | None:
        return None if user_id is None else self.first("user", user_id)

    def holder_active(self, lic: Facts) -> bool:
        """A license with a holder whose retrieved record is not offboarded (a holder without a retrieved
        record is taken as active: nothing retrieved says otherwise)."""
        if lic["holder"] is None:
            return False
        u = self.user(lic["holder"])
        return u is None or u["active"] is not False

    def price(self, lic: Facts) -> float | None:
        """The license's list price from its product's retrieved record, else its purchase price."""
        p = self.first("product", lic["product"]) if lic["product"] else None
        price: float | None = p["price"] if p is not None and p["price"] is not None else lic["unit_price"]
        return price

    def cost_center(self, user_id: str | None) -> str | None:
        u = self.user(user_id)
        return None if u is None or u["active"] is False else u["cost_center"]

    def contract(self, contract_id: str) -> dict[str, Any] | None:
        """A contract's summary and term rows merged from its retrieved chunks (None if none retrieved)."""
        chunks = [f for f in self.facts if f.kind == "contract_chunk" and f.entity_id == contract_id]
        if not chunks:
            return None
        summary: dict[str, str] = {}
        terms: dict[int, dict[str, Any]] = {}
        prose: dict[str, Any] = {}
        for c in chunks:
            summary.update(c["summary"] or {})
            terms.update(c["terms"] or {})
            prose.update(c["prose"] or {})
        return {"summary": summary, "terms": [terms[n] for n in sorted(terms)], "prose": prose}

    def contracts(self) -> dict[str, dict[str, Any]]:
        out = {}
        for cid in dict.fromkeys(f.entity_id for f in self.of("contract_chunk")):
            c = self.contract(cid)
            if c is not None:
                out[cid] = c
        return out


def _window(today: Day, days: int) -> tuple[Day, Day]:
    return today - dt.timedelta(days=int(days) - 1), today


def _in(day: Day | None, today: Day, days: int) -> bool:
    first, last = _window(today, days)
    return day is not None and first <= day <= last


def _used_in(r: Retrieved, lic: Facts, days: int) -> bool:
    """The holder used the license's product inside the window, per a retrieved usage record."""
    first, _ = _window(r.today, days)
    return any(u["user"] == lic["holder"] and u["product"] == lic["product"] and u["last_used"] is not None
               and u["last_used"] >= first for u in r.of("consumption"))


def _usage_window(u: Facts, days: int) -> tuple[int, int] | None:
    return (u["windows"] or {}).get(int(days))


# -- contract facts (terms as stated; status and months at today from the dates) -----------------------


def _latest(c: Mapping[str, Any]) -> dict[str, Any]:
    """The latest term as the retrieved chunks state it: Schedule B's last row, else the summary table,
    else the clauses."""
    stated: list[dict[str, Any]] = c["terms"]
    if stated:
        return stated[-1]
    s, prose = c["summary"], c["prose"]
    out: dict[str, Any] = {}
    if "Effective on" in s and "Expires on" in s:
        out.update(effective_on=_day(s["Effective on"]), expires_on=_day(s["Expires on"]))
    elif "expires_on" in prose:
        out.update(effective_on=prose["effective_on"], expires_on=prose["expires_on"])
    if s.get("Annual value", "").startswith("USD "):
        out["annual_value"] = _usd(s["Annual value"].removeprefix("USD "))
    elif "annual_value" in prose:
        out["annual_value"] = prose["annual_value"]
    if s.get("Committed seats", "").isdigit():
        out["committed_seats"] = int(s["Committed seats"])
    elif "committed_seats" in prose:
        out["committed_seats"] = prose["committed_seats"]
    return out


def _terms(c: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every term the chunks state: Schedule B, else the current term and the renewals the clauses list."""
    stated: list[dict[str, Any]] = c["terms"]
    if stated:
        return stated
    latest = _latest(c)
    terms = list(c["prose"].get("renewals", []))
    if latest.get("expires_on") and not any(t["expires_on"] == latest["expires_on"] for t in terms):
        terms.append(latest)
    return terms


def _status(c: Mapping[str, Any], today: Day) -> str | None:
    terms = _terms(c)
    if not terms:
        return None
    if any(t["effective_on"] <= today <= t["expires_on"] for t in terms):
        return "active"
    return "expired" if today > max(t["expires_on"] for t in terms) else "pending"



def _notice(c: Mapping[str, Any]) -> Value:
    notice = c["summary"].get("Renewal notice", "")
    latest = _latest(c)
    if notice.endswith(" days") and "expires_on" in latest:
        expires_on: Day = latest["expires_on"]
        return (expires_on - dt.timedelta(days=int(notice.removesuffix(" days")))).isoformat()
    deadline: Day | None = c["prose"].get("notice_deadline")
    return None if deadline is None else deadline.isoformat()


def _vendor_name(c: Mapping[str, Any]) -> Value:
    name: str | None = c["summary"].get("Vendor") or c["prose"].get("vendor_name")
    return name


# ---------------------------------------------------------------------------------------------------
# specs: per template, the record kinds and how its facts are read (the mode follows the answer type)
# ---------------------------------------------------------------------------------------------------

Params = Mapping[str, Any]


@dataclass(frozen=True)
class Spec:
    """`kinds`: record kinds searched. `mode`: lookup | count | sum | ratio | top | list | unknown.
    `entity`: the parameter naming the looked-up entity. `lookup(retrieved, params)`: the fact (lookup).
    `each(retrieved, record, params)`: for a count/list, whether the record satisfies the condition (list:
    the entity it contributes, or None); for a sum/top, its amount (sum) or (entity, amount) (top), None
    when it does not count; for a ratio, None (not eligible), False or True (satisfies)."""

    kinds: tuple[str, ...]
    mode: str
    entity: str | None = None
    lookup: Callable[[Retrieved, Params], Value] | None = None
    each: Callable[[Retrieved, Facts, Params], Any] | None = None
    of_kind: str | None = None  # the records aggregated (default: the first of `kinds`)


def _lookup(kinds: tuple[str, ...], entity: str, fn: Callable[[Retrieved, Params], Value]) -> Spec:
    return Spec(kinds, "lookup", entity, lookup=fn)


def _agg(mode: str, kinds: tuple[str, ...], fn: Callable[[Retrieved, Facts, Params], Any],
         of_kind: str | None = None) -> Spec:
    return Spec(kinds, mode, each=fn, of_kind=of_kind)


def _unknown(*kinds: str) -> Spec:
    """Records of these kinds are retrieved, but none states the fact asked (a change between two days)."""
    return Spec(kinds, "unknown")


def _vendor_fact(field_name: str) -> Callable[[Retrieved, Params], Value]:
    def read(r: Retrieved, p: Params) -> Value:
        v = r.first("vendor", p["vendor"])
        return None if v is None else v[field_name]
    return read


def _contract_fact(fn: Callable[[Retrieved, Mapping[str, Any], Params], Value]) -> Callable[[Retrieved, Params], Value]:
    def read(r: Retrieved, p: Params) -> Value:
        c = r.contract(p["contract"])
        return None if c is None else fn(r, c, p)
    return read


def _seat_gap(r: Retrieved, c: Mapping[str, Any], p: Params) -> Value:
    seats: int | None = _latest(c).get("committed_seats")
    if seats is None:
        return None
    held = sum(1 for lic in r.of("license") if lic["contract"] == p["contract"] and r.holder_active(lic))
    return seats - held


def _last_day(c: Mapping[str, Any]) -> Day | None:
    return last_day(t["expires_on"] for t in _terms(c))


def _spend_cc(r: Retrieved, lic: Facts) -> str | None:
    return r.cost_center(lic["holder"]) if r.holder_active(lic) else None


def _unit_of(r: Retrieved, cc: str) -> str | None:
    units = [u["business_unit"] for u in r.of("user") if u["cost_center"] == cc and u["business_unit"]]
    center = r.first("cost_center", cc)
    return center["business_unit"] if center is not None else (units[0] if units else None)


def _list_price(r: Retrieved, product: str) -> float | None:
    f = r.first("product", product)
    price: float | None = None if f is None else f["price"]
    return price


def _idle(r: Retrieved, lic: Facts, p: Params) -> bool:
    return r.holder_active(lic) and not _used_in(r, lic, p["days"])


_LICENSE_JOIN = ("license", "user", "product")

SPECS: dict[str, Spec] = {
    "t1_list_price": _lookup(("product",), "product",
                             lambda r, p: _list_price(r, p["product"])),
    "t1_price_changes": _agg("count", ("product",), lambda r, f, p: f["previous_price"] is not None
                             and _in(f["price_since"], r.today, p["days"])),
    "t1_purchases": _agg("count", ("license",), lambda r, f, p: _in(f["purchased_on"], r.today, p["days"])),
    "t1_reclamations": _agg("count", ("license",), lambda r, f, p: f["ended_by"] == "reclaimed idle"
                            and _in(f["unassigned_since"], r.today, p["days"])),
    "t1_freed_by_offboarding": _agg("count", ("license",), lambda r, f, p: f["ended_by"] == "offboarded"
                                    and _in(f["unassigned_since"], r.today, p["days"])),
    "t1_unassigned_licenses": _agg("count", ("license",), lambda r, f, p: "holder" in f.values and f["holder"] is None),
    "t1_offboardings": _agg("count", ("user",), lambda r, f, p: _in(f["offboarded_on"], r.today, p["days"])),
    "t1_hires": _agg("count", ("user",), lambda r, f, p: _in(f["hired_on"], r.today, p["days"])),
    "t1_open_tickets_product": _agg("count", ("ticket",), lambda r, f, p: f["product"] == p["product"]
                                    and f["status"] in ("open", "in_progress")),
    "t1_open_tickets_priority": _agg("count", ("ticket",), lambda r, f, p: f["priority"] == p["priority"]
                                     and f["status"] in ("open", "in_progress")),
    "t1_tickets_opened": _agg("count", ("ticket",), lambda r, f, p: _in(f["opened_on"], r.today, p["days"])),
    "t1_vendor_name": _lookup(("vendor",), "vendor", _vendor_fact("name")),
    "t1_vendor_tier": _lookup(("vendor",), "vendor", _vendor_fact("tier")),
    # The records state who holds a license since when, not past reassignments: the current holding
    # starting inside the window is what a reader can count.
    "t1_reassignments_product": _agg("count", ("license",), lambda r, f, p: f["product"] == p["product"]
                                     and _in(f["held_since"], r.today, p["days"])),
    "t1_held_licenses_change": _unknown("license"),
    "t1_api_calls_product": _agg("sum", ("consumption",), lambda r, f, p: (w := _usage_window(f, p["days"]))
                                 and f["product"] == p["product"] and w[1]),
    "t1_distinct_users_product": _agg("count", ("consumption",), lambda r, f, p: f["product"] == p["product"]
                                      and _in(f["last_used"], r.today, p["days"])),
    "t1_session_minutes_product": _agg("sum", ("consumption",), lambda r, f, p: (w := _usage_window(f, p["days"]))
                                       and f["product"] == p["product"] and w[0]),
    "t1_top_product_minutes": _agg("top", ("consumption",), lambda r, f, p: (w := _usage_window(f, p["days"]))
                                   and (f["product"], w[0])),
    "t2_cost_center_spend": _agg("sum", _LICENSE_JOIN, lambda r, f, p: _spend_cc(r, f) == p["cost_center"]
                                 and r.price(f), of_kind="license"),
    "t2_total_spend": _agg("sum", _LICENSE_JOIN, lambda r, f, p: r.price(f), of_kind="license"),
    "t2_vendor_spend": _agg("sum", _LICENSE_JOIN, lambda r, f, p: (pr := r.first("product", f["product"] or ""))
                            is not None and pr["vendor"] == p["vendor"] and r.price(f), of_kind="license"),
    "t2_top_cost_center": _agg("top", _LICENSE_JOIN, lambda r, f, p: (cc := _spend_cc(r, f)) and (cc, r.price(f)),
                               of_kind="license"),
    "t2_top_cost_center_in_unit": _agg("top", (*_LICENSE_JOIN, "cost_center"), lambda r, f, p:
                                       (cc := _spend_cc(r, f)) and _unit_of(r, cc) == p["business_unit"]
                                       and (cc, r.price(f)), of_kind="license"),
    "t2_cost_centers_above": _agg("list", _LICENSE_JOIN, lambda r, f, p: _spend_cc(r, f), of_kind="license"),
    "t2_spend_change_cost_center": _unknown(*_LICENSE_JOIN),
    "t2_unallocated_spend": _agg("sum", _LICENSE_JOIN, lambda r, f, p: "holder" in f.values
                                 and _spend_cc(r, f) is None and r.price(f), of_kind="license"),
    "t2_idle_licenses_cost_center": _agg("count", ("license", "user", "consumption"), lambda r, f, p:
                                         _spend_cc(r, f) == p["cost_center"] and _idle(r, f, p), of_kind="license"),
    "t2_idle_license_cost": _agg("sum", ("license", "consumption", "product"), lambda r, f, p:
                                 _idle(r, f, p) and r.price(f), of_kind="license"),
    "t2_unused_licenses_product": _agg("count", ("license", "consumption"), lambda r, f, p:
                                       f["product"] == p["product"] and _idle(r, f, p), of_kind="license"),
    "t2_zero_api_licenses_product": _agg("count", ("license", "consumption"), lambda r, f, p:
                                         f["product"] == p["product"] and r.holder_active(f) and not any(
                                             u["user"] == f["holder"] and u["product"] == f["product"]
                                             and (_usage_window(u, p["days"]) or (0, 0))[1] > 0
                                             for u in r.of("consumption")), of_kind="license"),
    "t2_active_users_cost_center": _agg("count", ("user",), lambda r, f, p: f["active"] is True
                                        and f["cost_center"] == p["cost_center"]),
    "t2_active_users_change_cost_center": _unknown("user"),
    "t2_tickets_opened_cost_center": _agg("count", ("ticket", "user"), lambda r, f, p:
                                          _in(f["opened_on"], r.today, p["days"])
                                          and r.cost_center(f["user"]) == p["cost_center"], of_kind="ticket"),
    "t2_tickets_opened_vendor": _agg("count", ("ticket", "product"), lambda r, f, p:
                                     _in(f["opened_on"], r.today, p["days"])
                                     and (pr := r.first("product", f["product"] or "")) is not None
                                     and pr["vendor"] == p["vendor"], of_kind="ticket"),
    "t2_seat_utilization": _agg("ratio", ("license", "consumption"), lambda r, f, p:
                                None if f["product"] != p["product"] or not r.holder_active(f)
                                else _used_in(r, f, p["days"]), of_kind="license"),
    "t2_license_holders_product": _agg("count", ("license", "user"), lambda r, f, p:
                                       f["product"] == p["product"] and r.holder_active(f), of_kind="license"),
    "t3_contract_annual_value": _lookup(("contract_chunk",), "contract",
                                        _contract_fact(lambda r, c, p: _latest(c).get("annual_value"))),
    "t3_vendor_contract_value": Spec(("contract_chunk",), "sum", each=None),  # over contracts: see _contract_sum
    "t3_committed_seat_gap": _lookup(("contract_chunk", "license", "user"), "contract", _contract_fact(_seat_gap)),
    "t3_notice_deadline": _lookup(("contract_chunk",), "contract", _contract_fact(lambda r, c, p: _notice(c))),
    "t3_committed_seats": _lookup(("contract_chunk",), "contract",
                                  _contract_fact(lambda r, c, p: _latest(c).get("committed_seats"))),
    "t3_contract_status": _lookup(("contract_chunk",), "contract", _contract_fact(lambda r, c, p: _status(c, r.today))),
    "t3_months_remaining": _lookup(("contract_chunk",), "contract", _contract_fact(
        lambda r, c, p: None if (d := _last_day(c)) is None else whole_months(r.today, d))),
    "t3_contract_vendor_name": _lookup(("contract_chunk",), "contract",
                                       _contract_fact(lambda r, c, p: _vendor_name(c))),
    "t3_contracts_expiring": Spec(("contract_chunk",), "list"),  # over contracts: see _contract_list
    "t3_contracts_by_vendor_tier": Spec(("contract_chunk",), "list"),
}


def _contract_sum(r: Retrieved, p: Params) -> float:
    return sum(_latest(c).get("annual_value") or 0.0 for c in r.contracts().values()
               if (c["summary"].get("Vendor ID") or c["prose"].get("vendor_id")) == p["vendor"]
               and _status(c, r.today) == "active")


def _contract_list(template_id: str, r: Retrieved, p: Params) -> list[str]:
    out = []
    for cid, c in r.contracts().items():
        if _status(c, r.today) != "active":
            continue
        if template_id == "t3_contracts_expiring":
            last = _last_day(c)
            if last is not None and last <= r.today + dt.timedelta(days=int(p["days"])):
                out.append(cid)
        elif c["summary"].get("Vendor tier") == p["tier"]:
            out.append(cid)
    return sorted(out)


# ---------------------------------------------------------------------------------------------------
# the rule
# ---------------------------------------------------------------------------------------------------


def extract(template_id: str, answer_kind: str, params: Params, today: Day,
            records: Iterable[RetrievedRecord]) -> Value:
    """The answer the fixed rule reads from `records` (in rank order) for one question."""
    spec = SPECS[template_id]
    r = Retrieved([read_record(x.kind, x.entity_id, x.text) for x in records], today)
    if spec.mode == "unknown":
        return None
    if spec.mode == "lookup":
        assert spec.lookup is not None
        value = spec.lookup(r, params)
        return None if value is False else value
    if template_id == "t3_vendor_contract_value":
        return round_half_up(_contract_sum(r, params), 2)
    if template_id in ("t3_contracts_expiring", "t3_contracts_by_vendor_tier"):
        return _contract_list(template_id, r, params)
    assert spec.each is not None
    pool = r.of(spec.of_kind or spec.kinds[0])
    results = [spec.each(r, f, params) for f in pool]
    if spec.mode == "count":
        return sum(1 for x in results if x)
    if spec.mode == "sum":
        total = sum(float(x) for x in results if x not in (None, False))
        return round_half_up(total, 2) if answer_kind == "money" else int(total)
    if spec.mode == "ratio":
        eligible = [x for x in results if x is not None]
        return round_half_up(sum(1 for x in eligible if x) / len(eligible), 2) if eligible else None
    if spec.mode == "top":
        amounts: dict[str, float] = {}
        for x in results:
            if x:
                amounts[x[0]] = amounts.get(x[0], 0.0) + float(x[1] or 0.0)
        return top_of(amounts)
    if spec.mode == "list":
        if template_id == "t2_cost_centers_above":
            sums: dict[str, float] = {}
            for f in pool:
                cc = _spend_cc(r, f)
                if cc:
                    sums[cc] = sums.get(cc, 0.0) + float(r.price(f) or 0.0)
            return sorted(cc for cc, v in sums.items() if v > params["threshold"])
        return sorted({str(x) for x in results if x})
    raise AssertionError(spec.mode)


def search_kinds(template_id: str) -> tuple[str, ...]:
    return SPECS[template_id].kinds
