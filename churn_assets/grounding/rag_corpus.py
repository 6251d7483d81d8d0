"""The RAG corpus: everything the classic-RAG arms may see as of a day, as short embedded fact records.

The corpus is the classic-RAG arms' own store, outside the registry; everything in it has data time =
its build day (docs/rules.md, "Registry coverage"). One record per:

- user (status, hire/offboard dates, cost center), license (product, purchase, contract, holder),
  product (vendor, licence model, list price), vendor (name, tier, changes), cost center (name,
  business unit), ticket (priority, user, product, status);
- contract chunk: the same chunks as the vector index (`chunks.py`), from the day's documents, so the
  corpus reads contract terms exactly where the documents state them;
- consumption, aggregated per user x product over trailing windows ending at the build day (7, 30 and
  90 days) with the last day of use; never raw events.

Records are facts, not answers: no record holds an aggregate over several entities (a cost center's
spend, a vendor's contract count). An arm that retrieves k records cannot sum more than k of them,
which is what separates point lookups from aggregates in the benchmark (docs/rules.md, "Arm correctness").

A record's text names no build day (the windows are "the last N days" of the build day), so a record
whose facts did not change keeps its text, its content hash and its embedding from an earlier day:
a day re-embeds only what changed (`vector_index.embed_missing`, over the embedding store shared with
the vector index). The serialisers are pure functions of a fold as of the day (`world.fold`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from churn_assets.fabric.postgres import ident, relation_exists
from churn_assets.grounding.chunks import Chunk, chunk_documents, content_hash, identifiers_in
from churn_assets.grounding.embeddings import Encoder
from churn_assets.grounding.traces import DataIntegrityError
from churn_assets.grounding.vector_index import (
    EMBEDDINGS_TABLE,
    RAG_BUILDS_TABLE,
    RAG_RECORDS_TABLE,
    RAG_TABLES,
    Progress,
    VectorIndexError,
    content_version,
    copy_rows,
    day_lock,
    embed_missing,
    ensure_tables,
    query_vector,
    register_vector,
    staging_schema,
)
from churn_assets.world.calendar import Day
from churn_assets.world.state import (
    ConsumptionRecord,
    CostCenter,
    License,
    Product,
    Ticket,
    UserRecord,
    Vendor,
    WorldState,
)

if TYPE_CHECKING:
    import psycopg


WINDOWS_DAYS: tuple[int, ...] = (7, 30, 90)
KINDS: tuple[str, ...] = ("user", "license", "product", "vendor", "cost_center", "ticket", "contract_chunk",
                          "consumption")
# The corpus' tables (`RAG_TABLES`) are defined with the rest of the vector store's (`vector_index.TABLE_DDL`):
# one store, one STORE_VERSION, one embeddings table.


@dataclass(frozen=True)
class RagRecord:
    """One fact record: `text` is what is embedded and shown; `refs` are the entity ids it names."""

    record_id: str  # unique within a day: `<kind>:<entity id>` (`consumption:<user>:<product>`, ...)
    kind: str
    entity_id: str
    text: str
    refs: tuple[str, ...]
    content_hash: str


def make_record(kind: str, entity_id: str, text: str, *, record_id: str | None = None,
                refs: Iterable[str] = ()) -> RagRecord:
    ids = tuple(dict.fromkeys([entity_id, *refs, *identifiers_in(text)]))
    return RagRecord(record_id or f"{kind}:{entity_id}", kind, entity_id, text, ids, content_hash(text))


# ---------------------------------------------------------------------------------------------------
# Serialisers (pure): one short sentence group per entity, no date that moves with the build day
# ---------------------------------------------------------------------------------------------------


def _usd(value: float | None) -> str:
    return "an unknown amount" if value is None else f"USD {value:,.2f}"


def _named(entity_id: str, name: str | None) -> str:
    return f"{entity_id} ({name})" if name else entity_id


def _cost_center_label(cc: CostCenter | None, cc_id: str) -> str:
    if cc is None:
        return cc_id
    details = ", ".join(p for p in (cc.name, f"business unit {cc.business_unit}" if cc.business_unit else "") if p)
    return f"{cc_id} ({details})" if details else cc_id


def user_text(user: UserRecord, state: WorldState) -> str:
    membership = state.cost_center_membership
    history = membership.memberships.get(user.user_id, [])
    if user.offboarded_on is None:
        head = f"User {user.user_id}: active, hired {user.hired_on.isoformat()}."
        if history:
            m = history[-1]
            cc = membership.cost_centers.get(m.cost_center_id)
            return f"{head} Cost center {_cost_center_label(cc, m.cost_center_id)} since {m.valid_from.isoformat()}."
        return f"{head} No cost center."
    reason = f" ({user.offboard_reason.replace('_', ' ')})" if user.offboard_reason else ""
    head = (f"User {user.user_id}: offboarded {user.offboarded_on.isoformat()}{reason}, "
            f"hired {user.hired_on.isoformat()}.")
    if history:
        m = history[-1]
        cc = membership.cost_centers.get(m.cost_center_id)
        return f"{head} Last cost center {_cost_center_label(cc, m.cost_center_id)}."
    return head


def license_text(lic: License, state: WorldState, day: Day) -> str:
    product = state.prices.products.get(lic.product_id)
    what = _named(lic.product_id, product.name if product else None)
    contract = f" under contract {lic.contract_id}" if lic.contract_id else ""
    head = (f"License {lic.license_id}: {what}, bought {lic.purchased_on.isoformat()} at "
            f"{_usd(lic.unit_price_usd)} per seat per month{contract}.")
    holder = lic.holder_on(day)
    if holder is not None:
        since = next(h.valid_from for h in reversed(lic.holdings) if h.user_id == holder and h.valid_to is None)
        return f"{head} Assigned to user {holder} since {since.isoformat()}."
    if lic.holdings:
        last = lic.holdings[-1]
        ended = f", {last.ended_by.replace('_', ' ')}" if last.ended_by else ""
        end = last.valid_to.isoformat() if last.valid_to else "an unknown day"
        return f"{head} Unassigned since {end} (last holder {last.user_id}{ended})."
    return f"{head} Never assigned."


def product_text(product: Product, state: WorldState) -> str:
    vendor = state.vendor_dims.vendors.get(product.vendor_id) if product.vendor_id else None
    parts = [f"Product {product.product_id}: {product.name or 'unnamed'}"]
    if product.vendor_id:
        parts.append(f"vendor {_named(product.vendor_id, vendor.name if vendor else None)}")
    if product.license_model:
        parts.append(f"{product.license_model.replace('_', ' ')} licence")
    if product.api_access is not None:
        parts.append(f"API access {'yes' if product.api_access else 'no'}")
    current = product.price_history[-1]
    price = f"List price {_usd(current.list_price_usd)} per seat per month since {current.valid_from.isoformat()}"
    if len(product.price_history) > 1:
        price += f", previously {_usd(product.price_history[-2].list_price_usd)}"
    return ", ".join(parts) + f". {price}."


def vendor_text(vendor: Vendor) -> str:
    first, current = vendor.history[0], vendor.history[-1]
    text = f"Vendor {vendor.vendor_id}: {current.name}, {current.tier} tier, registered {first.valid_from.isoformat()}."
    previous = first
    for version in vendor.history[1:]:
        if version.name != previous.name:
            text += f" Renamed from {previous.name} on {version.valid_from.isoformat()}."
        if version.tier != previous.tier:
            text += f" Tier changed from {previous.tier} to {version.tier} on {version.valid_from.isoformat()}."
        previous = version
    return text


def cost_center_text(cc: CostCenter) -> str:
    text = f"Cost center {cc.cost_center_id}: {cc.name or 'unnamed'}"
    if cc.business_unit:
        text += f", business unit {cc.business_unit}"
    return text + "."


def ticket_text(ticket: Ticket, state: WorldState, day: Day) -> str:
    product = state.prices.products.get(ticket.product_id)
    change = next(c for c in reversed(ticket.history) if c.day <= day)
    return (f"Ticket {ticket.ticket_id}: {ticket.priority} priority, opened {ticket.opened_on.isoformat()} by user "
            f"{ticket.user_id} about product {_named(ticket.product_id, product.name if product else None)}. "
            f"Status {change.status.replace('_', ' ')} since {change.day.isoformat()}.")


@dataclass
class _Usage:
    sessions: list[int | None] = field(default_factory=list)
    minutes: list[int] = field(default_factory=list)
    api_calls: list[int] = field(default_factory=list)

    def add(self, r: ConsumptionRecord) -> None:
        self.sessions.append(r.sessions)
        self.minutes.append(r.session_minutes)
        self.api_calls.append(r.api_calls)

    def describe(self) -> str:
        if not self.minutes:
            return "no use"
        parts = []
        if all(s is not None for s in self.sessions):
            parts.append(f"{sum(s or 0 for s in self.sessions)} sessions")
        parts.append(f"{sum(self.minutes)} minutes")
        parts.append(f"{sum(self.api_calls)} API calls")
        return ", ".join(parts)


def consumption_texts(state: WorldState, day: Day, windows: Sequence[int] = WINDOWS_DAYS
                      ) -> dict[tuple[str, str], str]:
    """(user, product) -> usage text over trailing windows ending at `day`, for every pair ever used."""
    widest = max(windows)
    last_used: dict[tuple[str, str], Day] = {}
    usage: dict[tuple[str, str], dict[int, _Usage]] = {}
    for r in state.consumption.records:
        if r.day > day:
            continue
        key = (r.user_id, r.product_id)
        if key not in last_used or r.day > last_used[key]:
            last_used[key] = r.day
        age = (day - r.day).days  # 0 on the build day itself
        if age >= widest:
            continue
        per_window = usage.setdefault(key, {})
        for w in windows:
            if age < w:
                per_window.setdefault(w, _Usage()).add(r)
    out = {}
    for key in sorted(last_used):
        user_id, product_id = key
        product = state.prices.products.get(product_id)
        per_window = usage.get(key, {})
        spans = "; ".join(f"last {w} days {per_window.get(w, _Usage()).describe()}" for w in windows)
        out[key] = (f"Usage of product {_named(product_id, product.name if product else None)} by user {user_id}: "
                    f"{spans}; last used {last_used[key].isoformat()}.")
    return out


def corpus_records(state: WorldState, day: Day, chunks: Sequence[Chunk]) -> list[RagRecord]:
    """Every record of the corpus as of `day`, from a fold as of `day` and that day's contract chunks.

    Refuses a state folded at any other day (or a vintage map): the corpus has one data time.
    """
    days = set(state.vintage.values())
    if days != {day}:
        shown = ", ".join(sorted(d.isoformat() for d in days)) or "none"
        raise ValueError(f"the RAG corpus of {day.isoformat()} needs a fold as of that day (got {shown})")
    out: list[RagRecord] = []
    for uid in sorted(state.user_status.users):
        out.append(make_record("user", uid, user_text(state.user_status.users[uid], state)))
    for lid in sorted(state.assignments.licenses):
        out.append(make_record("license", lid, license_text(state.assignments.licenses[lid], state, day)))
    for pid in sorted(state.prices.products):
        out.append(make_record("product", pid, product_text(state.prices.products[pid], state)))
    for vid in sorted(state.vendor_dims.vendors):
        out.append(make_record("vendor", vid, vendor_text(state.vendor_dims.vendors[vid])))
    for ccid in sorted(state.cost_center_membership.cost_centers):
        out.append(make_record("cost_center", ccid, cost_center_text(state.cost_center_membership.cost_centers[ccid])))
    for tid in sorted(state.tickets.tickets):
        out.append(make_record("ticket", tid, ticket_text(state.tickets.tickets[tid], state, day)))
    for c in chunks:
        if c.as_of != day:
            raise ValueError(f"chunk {c.contract_id}#{c.chunk_no} is as of {c.as_of}, not {day}")
        out.append(make_record("contract_chunk", c.contract_id, c.text, record_id=f"contract_chunk:{c.contract_id}:"
                               f"{c.chunk_no}", refs=[c.contract_id]))
    for (uid, pid), text in consumption_texts(state, day).items():
        out.append(make_record("consumption", f"{uid}:{pid}", text, refs=[uid, pid]))
    return out


# ---------------------------------------------------------------------------------------------------
# Building and reading a day
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusBuild:
    world_id: str
    day: Day
    model: str
    records: int
    unique_texts: int
    embedded: int
    encoder_calls: int
    kinds: dict[str, int]
    content_version: str  # SHA-256 over the model and every (record id, content hash) of the day
    source_version: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def reused(self) -> int:
        return self.unique_texts - self.embedded


def build_rag_corpus(conn: psycopg.Connection[Any], world_id: str, day: Day, state: WorldState,
                     documents: Mapping[str, str], encoder: Encoder, *,
                     source_version: str | None = None, progress: Progress | None = None) -> CorpusBuild:
    """Serialise the world as of `day` (`state`: a fold as of `day`; `documents`: {contract id: Markdown}
    of that day), embed the texts not embedded before, and replace the day's records. `progress`: see
    `vector_index.embed_missing`."""
    from psycopg import sql

    seconds: dict[str, float] = {}
    started = time.perf_counter()
    records = corpus_records(state, day, chunk_documents(documents, day))
    seconds["serialise"] = time.perf_counter() - started

    schema = ensure_tables(conn, world_id, RAG_TABLES)
    embedded = embed_missing(conn, schema, {r.content_hash: r.text for r in records}, encoder, progress=progress)
    seconds["embed"] = embedded.seconds

    started = time.perf_counter()
    kinds = dict(sorted(Counter(r.kind for r in records).items()))
    version = content_version(encoder.model_id, [(r.record_id, r.content_hash) for r in records])
    build = CorpusBuild(world_id, day, encoder.model_id, len(records), embedded.unique, embedded.embedded,
                        embedded.encoder_calls, kinds, version, source_version)
    with day_lock(conn, f"{schema} rag_corpus {day.isoformat()}"):
        conn.execute(sql.SQL("DELETE FROM {} WHERE day = %s").format(ident(schema, RAG_RECORDS_TABLE)), (day,))
        copy_rows(conn, schema, RAG_RECORDS_TABLE, ("day", "record_id", "kind", "entity_id", "refs", "content_hash"),
                  [(day, r.record_id, r.kind, r.entity_id, list(r.refs), r.content_hash) for r in records])
        conn.execute(sql.SQL(
            """
            INSERT INTO {}
                (day, model, records, unique_texts, embedded, encoder_calls, kinds, content_version,
                 source_version)
            VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s)
            ON CONFLICT (day) DO UPDATE SET model = EXCLUDED.model, records = EXCLUDED.records,
                unique_texts = EXCLUDED.unique_texts, embedded = EXCLUDED.embedded,
                encoder_calls = EXCLUDED.encoder_calls, kinds = EXCLUDED.kinds,
                content_version = EXCLUDED.content_version, source_version = EXCLUDED.source_version
            """).format(ident(schema, RAG_BUILDS_TABLE)),
            (day, build.model, build.records, build.unique_texts, build.embedded, build.encoder_calls,
             json.dumps(kinds), version, source_version))
    seconds["store"] = time.perf_counter() - started
    return dataclasses.replace(build, seconds=seconds)


def corpus_days(conn: psycopg.Connection[Any], world_id: str) -> list[Day]:
    """The days the RAG corpus of `world_id` has a complete build for."""
    from psycopg import sql

    schema = staging_schema(world_id)
    if not relation_exists(conn, schema, RAG_BUILDS_TABLE):
        return []
    query = sql.SQL("SELECT day FROM {} ORDER BY day").format(ident(schema, RAG_BUILDS_TABLE))
    return [r[0] for r in conn.execute(query)]


def corpus_build_of(conn: psycopg.Connection[Any], world_id: str, day: Day) -> CorpusBuild | None:
    from psycopg import sql

    schema = staging_schema(world_id)
    if not relation_exists(conn, schema, RAG_BUILDS_TABLE):
        return None
    row = conn.execute(sql.SQL(
        "SELECT model, records, unique_texts, embedded, encoder_calls, kinds, content_version, source_version "
        "FROM {} WHERE day = %s").format(ident(schema, RAG_BUILDS_TABLE)), (day,)).fetchone()
    if row is None:
        return None
    return CorpusBuild(world_id, day, *row)


@dataclass(frozen=True)
class RecordHit:
    day: Day  # the day the record row carries (its corpus build day: the data time of everything in it)
    record_id: str
    kind: str
    entity_id: str
    text: str
    refs: tuple[str, ...]
    score: float  # cosine similarity
    matched_ids: int  # how many of the ids the query names this record names
    content_hash: str = ""  # the record text's SHA-256, checked against the text when it was read


def search_corpus(conn: psycopg.Connection[Any], world_id: str, day: Day, query: str | Any, encoder: Encoder,
                  *, k: int = 10, kinds: Sequence[str] | None = None, match_identifiers: bool = True,
                  vector: Any = None) -> list[RecordHit]:
    """The `k` records of the corpus built on `day` most similar to `query`; only that day's records.

    With `match_identifiers`, records naming more of the entity ids the query names rank first (cosine
    ranks within each group); `kinds` restricts the record kinds searched. `vector`: the query's vector when
    the caller encoded it ahead with `encoder` (None: `query` is encoded now).
    """
    from psycopg import sql

    if k <= 0:
        return []
    build = corpus_build_of(conn, world_id, day)
    if build is None:
        days = corpus_days(conn, world_id)
        shown = ", ".join(d.isoformat() for d in days[-5:]) or "none"
        raise VectorIndexError(f"the RAG corpus of world {world_id} has no build for {day.isoformat()} "
                               f"(materialize rag_index for that world and day; latest built days: {shown})")
    if build.model != encoder.model_id:
        raise VectorIndexError(f"the RAG corpus of world {world_id} for {day.isoformat()} was built with "
                               f"{build.model}, not {encoder.model_id}")
    register_vector(conn)
    vector = query_vector(query if vector is None else vector, encoder)
    named = list(identifiers_in(query)) if (match_identifiers and isinstance(query, str)) else []
    schema = staging_schema(world_id)
    # `matched` counts the distinct named ids a record refers to. The array overlap test (`&&`) first: the
    # intersect is a subquery per record, a third of a search's time when run on every one of them.
    rows = conn.execute(sql.SQL(
        """
        SELECT r.record_id, r.kind, r.entity_id, e.content, r.refs, 1 - (e.embedding <=> %(q)s) AS score,
               CASE WHEN r.refs && %(named)s::text[] THEN cardinality(ARRAY(
                   SELECT unnest(r.refs) INTERSECT SELECT unnest(%(named)s::text[]))) ELSE 0 END AS matched,
               r.day, r.content_hash
        FROM {records} r
        JOIN {embeddings} e ON e.content_hash = r.content_hash AND e.model = %(model)s
        WHERE r.day = %(day)s AND (%(kinds)s::text[] IS NULL OR r.kind = ANY(%(kinds)s::text[]))
        ORDER BY matched DESC, e.embedding <=> %(q)s, r.record_id
        LIMIT %(k)s
        """).format(records=ident(schema, RAG_RECORDS_TABLE), embeddings=ident(schema, EMBEDDINGS_TABLE)),
        {"q": vector, "named": named, "model": encoder.model_id, "day": day,
         "kinds": list(kinds) if kinds is not None else None, "k": k},
    ).fetchall()
    hits = []
    for r in rows:
        if content_hash(r[3]) != r[8]:
            raise DataIntegrityError(f"RAG corpus of world {world_id} @ {day}: record {r[0]} does not hash to its "
                                     f"content hash {str(r[8])[:12]}: the corpus was changed after it was stored")
        hits.append(RecordHit(r[7], r[0], r[1], r[2], r[3], tuple(r[4]), float(r[5]), int(r[6]), r[8]))
    return hits
