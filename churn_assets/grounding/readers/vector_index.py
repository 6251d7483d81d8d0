"""The vector-index reader (store `vector_index`): contract terms from the `vector_index` partition of the
route's day, the chunks of each contract's summary and term history (Schedule B) looked up by contract id (a
metadata filter on the index; the similarity search serves the RAG arms), then read back as tables. Parsed
contracts are kept in the router's cache per (day, contract filter): a retrieval asks for the same day often."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import churn_assets.grounding.readers.sql as sql
from churn_assets.fabric.postgres import ident, schema_name
from churn_assets.grounding.readers.base import Found, ReadContext
from churn_assets.grounding.routes import Route, RouterError, check_relation
from churn_assets.grounding.rows import ContractRow, Request, TermRow

INDEX_TABLES = ("vector_index_chunks", "embeddings", "vector_index_builds")


def read(ctx: ReadContext, request: Request, route: Route) -> Found:
    from psycopg import sql as psql

    key = ("vector_index", ctx.world_id, route.day, request.contract)
    schema = schema_name(ctx.world_id, "staging")
    table = f"{schema}.vector_index_chunks"
    if key in ctx.cache:
        return Found(list(ctx.cache[key]), table, 1)
    conn = sql.pg(ctx)
    for relation in INDEX_TABLES:
        check_relation(ctx.world_id, schema, relation)
    build = conn.execute(psql.SQL("SELECT model FROM {} WHERE day = %s").format(
        ident(schema, "vector_index_builds")), (route.day,)).fetchone()
    if build is None:
        raise RouterError(f"vector_index of world {ctx.world_id} has no build for {route.day} (the scenario "
                          "materializer builds the served day)")
    found = conn.execute(psql.SQL(
        "SELECT m.contract_id, m.chunk_no, m.section, e.content FROM {} m JOIN {} e "
        "ON e.content_hash = m.content_hash AND e.model = %s "
        "WHERE m.day = %s AND m.section = ANY(%s) AND (%s::text IS NULL OR m.contract_id = %s) "
        "ORDER BY m.contract_id, m.chunk_no").format(ident(schema, "vector_index_chunks"),
                                                     ident(schema, "embeddings")),
        (build[0], route.day, list(CONTRACT_SECTIONS), request.contract, request.contract)).fetchall()
    by_contract: dict[str, list[tuple[str, str]]] = {}
    for cid, _no, section, content in found:
        by_contract.setdefault(cid, []).append((section, content))
    rows = [contract_from_chunks(cid, chunks) for cid, chunks in sorted(by_contract.items())]
    ctx.cache[key] = rows
    return Found(list(rows), table, 1)


SUMMARY_SECTION = "Contract summary"
HISTORY_SECTION = "Schedule B: Term history"
CONTRACT_SECTIONS = (SUMMARY_SECTION, HISTORY_SECTION)


def contract_from_chunks(contract_id: str, chunks: Sequence[tuple[str, str]]) -> ContractRow:
    """A contract's row from its summary and term-history chunks (sections as `chunks.py` names them; a
    long section comes as several pieces, each repeating the table header)."""
    from contracts.parse import NOT_STATED, parse_summary, split_row

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
