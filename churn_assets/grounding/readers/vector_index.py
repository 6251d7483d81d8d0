"""The vector-index reader (store `vector_index`): contract terms from the `vector_index` partition of the
route's day, the chunks of each contract's summary and term history (Schedule B) looked up by contract id (a
metadata filter on the index; the similarity search serves the RAG arms), then read back as tables. Parsed
contracts are kept in the router's cache per (day, contract filter): a retrieval asks for the same day often.

What a read observes: the `day` each chunk row carries, and each chunk's text, whose SHA-256 must be the
chunk's `content_hash` (the index is content-addressed: a text that does not hash to its key was changed after
it was stored). The read's hash is the hash of the chunk hashes read."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import churn_assets.grounding.readers.sql as sql
from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.fabric.postgres import ident, schema_name
from churn_assets.grounding.chunks import content_hash
from churn_assets.grounding.readers.base import Found, ReadContext
from churn_assets.grounding.routes import Route, RouterError, check_relation
from churn_assets.grounding.rows import ContractRow, Request, TermRow
from churn_assets.grounding.traces import DataIntegrityError
from contracts.parse import NOT_STATED, parse_summary, split_row

INDEX_TABLES = ("vector_index_chunks", "embeddings", "vector_index_builds")


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    from psycopg import sql as psql

    key = ("vector_index", ctx.world_id, route.day, request.contract)
    schema = schema_name(ctx.world_id, "staging")
    table = f"{schema}.vector_index_chunks"
    if key in ctx.cache:
        rows, observed, digest = ctx.cache[key]
        return Found(list(rows), table, 1, observed, digest)
    conn = sql.pg(ctx)
    for relation in INDEX_TABLES:
        check_relation(ctx.world_id, schema, relation)
    build = conn.execute(psql.SQL("SELECT model FROM {} WHERE day = %s").format(
        ident(schema, "vector_index_builds")), (route.day,)).fetchone()
    if build is None:
        raise RouterError(f"vector_index of world {ctx.world_id} has no build for {route.day} (the scenario "
                          "materializer builds the served day)")
    found = conn.execute(psql.SQL(
        "SELECT m.contract_id, m.chunk_no, m.section, e.content, m.day, m.content_hash FROM {} m JOIN {} e "
        "ON e.content_hash = m.content_hash AND e.model = %s "
        "WHERE m.day = %s AND m.section = ANY(%s) AND (%s::text IS NULL OR m.contract_id = %s) "
        "ORDER BY m.contract_id, m.chunk_no").format(ident(schema, "vector_index_chunks"),
                                                     ident(schema, "embeddings")),
        (build[0], route.day, list(CONTRACT_SECTIONS), request.contract, request.contract)).fetchall()
    by_contract: dict[str, list[tuple[str, str]]] = {}
    days: set[dt.date] = set()
    hashes: list[str] = []
    for cid, no, section, content, day, recorded in found:
        if content_hash(content) != recorded:
            raise DataIntegrityError(f"{table} @ {route.day}: chunk {cid}#{no} does not hash to its content hash "
                                     f"{str(recorded)[:12]}: the index was changed after it was stored")
        days.add(day)
        hashes.append(recorded)
        by_contract.setdefault(cid, []).append((section, content))
    if days - {route.day}:
        raise DataIntegrityError(f"{table}: the chunks read for {route.day} carry the days "
                                 f"{', '.join(sorted(map(str, days)))}")
    rows = [contract_from_chunks(cid, chunks) for cid, chunks in sorted(by_contract.items())]
    observed = next(iter(days), route.day)  # no chunk (no such contract): the build of the day answered
    digest = sha256_hex(canonical_json(hashes))
    ctx.cache[key] = (rows, observed, digest)
    return Found(list(rows), table, 1, observed, digest)


SUMMARY_SECTION = "Contract summary"
HISTORY_SECTION = "Schedule B: Term history"
CONTRACT_SECTIONS = (SUMMARY_SECTION, HISTORY_SECTION)


def contract_from_chunks(contract_id: str, chunks: Sequence[tuple[str, str]]) -> ContractRow:
    """A contract's row from its summary and term-history chunks (sections as `chunks.py` names them; a
    long section comes as several pieces, each repeating the table header)."""
    summary: dict[str, str] = {}
    terms: dict[int, TermRow] = {}
    for section, text in chunks:
        if section == SUMMARY_SECTION:
            summary.update(parse_summary(text))
            continue
        for line in text.splitlines():
            if not line.strip().startswith("|"):
                continue
            cells = split_row(line)
            if len(cells) != 8 or not cells[0].isdigit():
                continue  # the header and separator rows
            terms[int(cells[0])] = TermRow(
                recorded_on=dt.date.fromisoformat(cells[2]), effective_on=dt.date.fromisoformat(cells[3]),
                expires_on=dt.date.fromisoformat(cells[4]),
                annual_value_usd=None if cells[6] == NOT_STATED else float(cells[6].replace(",", "")),
                committed_seats=None if cells[7] == NOT_STATED else int(cells[7]))
    notice = summary.get("Renewal notice", NOT_STATED)
    vendor = summary.get("Vendor ID", NOT_STATED)
    return ContractRow(contract_id, None if vendor == NOT_STATED else vendor,
                       None if notice == NOT_STATED else int(notice.removesuffix(" days")),
                       tuple(terms[n] for n in sorted(terms)))
