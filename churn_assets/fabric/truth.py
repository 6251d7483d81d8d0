"""The truth layer: a world's ledger, event for event, in `<world>_truth` (SQL access to the ledger).

Readers (docs/rules.md, "Arm isolation"): the gold resolver, checks, and the SaaS mock. Arms never read it;
the read-only arm role has no privilege on it (`fabric/roles.py`).

- `events`: one row per ledger record, its fields as columns (`payload` as jsonb). `read_truth_records`
  turns the rows back into the ledger's own record dicts, in ledger order, so the fold runs on them.
- `ledger`: one row, the manifest (world id, format, count, head hash, days, world config) and the
  load key. A load whose head hash (and count) the schema already holds is skipped: the load is
  idempotent by head hash, and a ledger that differs replaces the old content in one transaction.

`verify_truth` re-hashes every stored event and follows the chain, so a row changed in the database is
found (the asset check `warehouse_truth_matches_ledger` reports it by seq, entity and day).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from churn_assets.canonical import canonical_json
from churn_assets.fabric.postgres import (
    Column,
    LoadResult,
    TableData,
    TableSpec,
    WarehouseError,
    ident,
    read_load_key,
    replace_tables,
    schema_name,
)
from churn_assets.world.ledger import GENESIS_HASH, LoadedLedger

if TYPE_CHECKING:
    import psycopg

META_TABLE = "ledger"
TRUTH_VERSION = 1

EVENTS = TableSpec(
    "events",
    (Column("seq", "bigint", False), Column("at", "date", False), Column("kind", "text", False),
     Column("entity_type", "text", False), Column("entity_id", "text", False), Column("payload", "jsonb", False),
     Column("recorded_at", "text"), Column("prev_hash", "text"), Column("hash", "text")),
    "The world's ledger, one row per event, in seq order (format-1 ledgers have no recorded_at or hashes).",
    primary_key=("seq",),
    indexes=(("kind", "at"), ("entity_id",), ("at",)),
)
LEDGER = TableSpec(
    META_TABLE,
    (Column("world_id", "text", False), Column("format_version", "integer", False),
     Column("event_count", "bigint", False), Column("head_hash", "text"), Column("first_day", "date"),
     Column("last_day", "date"), Column("world_config", "jsonb"), Column("world_config_hash", "text"),
     Column("load_key", "text", False)),
    "One row: the ledger's manifest as loaded, and the load key (truth version, count, head hash).",
)
TRUTH_TABLES: dict[str, TableSpec] = {EVENTS.name: EVENTS, LEDGER.name: LEDGER}

_V2_FIELDS = ("seq", "at", "kind", "entity_type", "entity_id", "payload", "recorded_at", "prev_hash", "hash")


def truth_load_key(loaded: LoadedLedger) -> str:
    return f"v{TRUTH_VERSION}:{loaded.format_version}:{loaded.count}:{loaded.head_hash}"


def truth_tables(world_id: str, loaded: LoadedLedger) -> list[TableData]:
    """The rows of `events` and `ledger` for a loaded ledger (pure)."""
    dumps = canonical_json
    events = [
        (r["seq"], r["at"], r["kind"], r["entity_type"], r["entity_id"], dumps(r["payload"]),
         r.get("recorded_at"), r.get("prev_hash"), r.get("hash"))
        for r in loaded.records
    ]
    manifest = loaded.manifest
    meta = (world_id, loaded.format_version, loaded.count, loaded.head_hash, loaded.first_day, loaded.last_day,
            dumps(manifest.world_config) if manifest and manifest.world_config is not None else None,
            manifest.world_config_hash if manifest else None, truth_load_key(loaded))
    return [TableData(EVENTS, events), TableData(LEDGER, [meta])]


def load_truth(conn: psycopg.Connection[Any], world_id: str, loaded: LoadedLedger, *, force: bool = False,
               on_table: Callable[[str, int], None] | None = None) -> LoadResult:
    """COPY the ledger into `<world>_truth`; skipped when the schema holds this head hash already."""
    if loaded.manifest is not None and loaded.manifest.world_id not in (None, world_id):
        raise WarehouseError(f"the ledger at {loaded.path} belongs to world {loaded.manifest.world_id}, "
                             f"not {world_id}")
    return replace_tables(conn, world_id=world_id, schema=schema_name(world_id, "truth"),
                          tables=truth_tables(world_id, loaded), meta_table=META_TABLE,
                          load_key=truth_load_key(loaded), force=force, on_table=on_table)


@dataclass(frozen=True)
class TruthHead:
    world_id: str
    format_version: int
    event_count: int
    head_hash: str | None
    first_day: str | None
    last_day: str | None


def truth_head(conn: psycopg.Connection[Any], world_id: str) -> TruthHead | None:
    """The manifest row of a world's truth schema, or None when it was never loaded."""
    schema = schema_name(world_id, "truth")
    if read_load_key(conn, schema, META_TABLE) is None:
        return None
    from psycopg import sql

    row = conn.execute(sql.SQL(
        "SELECT world_id, format_version, event_count, head_hash, first_day::text, last_day::text FROM {}"
    ).format(ident(schema, META_TABLE))).fetchone()
    return None if row is None else TruthHead(*row)


def read_truth_records(conn: psycopg.Connection[Any], world_id: str, *, through: str | None = None
                       ) -> list[dict[str, Any]]:
    """The ledger records of a world, in ledger order, as `load_ledger` returns them (optionally only the
    events with `at <= through`). Raises `WarehouseError` when the truth layer was never loaded."""
    head = truth_head(conn, world_id)
    if head is None:
        raise WarehouseError(f"world {world_id} has no truth layer ({schema_name(world_id, 'truth')}); "
                             f"run `churnbench project --world {world_id}`")
    from psycopg import sql

    fields = _V2_FIELDS if head.format_version >= 2 else _V2_FIELDS[:6]
    query = sql.SQL("SELECT seq, at::text, kind, entity_type, entity_id, payload, recorded_at, prev_hash, hash "
                    "FROM {} {} ORDER BY seq").format(
        ident(schema_name(world_id, "truth"), EVENTS.name),
        sql.SQL("WHERE at <= %s") if through else sql.SQL(""))
    rows = conn.execute(query, (through,) if through else ()).fetchall()
    return [dict(zip(fields, row, strict=False)) for row in rows]


@dataclass(frozen=True)
class TruthProblem:
    seq: int | None
    entity_id: str | None
    day: str | None
    problem: str

    def __str__(self) -> str:
        where = f"seq {self.seq} ({self.entity_id} on {self.day})" if self.seq is not None else "ledger"
        return f"{where}: {self.problem}"


def verify_truth(conn: psycopg.Connection[Any], world_id: str, loaded: LoadedLedger,
                 limit: int = 20) -> list[TruthProblem]:
    """Compare the truth layer with the ledger file: count, head, and every event re-hashed from its columns
    (format 2) or compared field by field (format 1). At most `limit` problems are returned."""
    head = truth_head(conn, world_id)
    if head is None:
        return [TruthProblem(None, None, None, "the truth layer was never loaded")]
    problems: list[TruthProblem] = []
    if head.event_count != loaded.count or head.head_hash != loaded.head_hash:
        problems.append(TruthProblem(None, None, None, f"manifest row says {head.event_count} events, head "
                                     f"{head.head_hash}; the ledger file has {loaded.count}, head {loaded.head_hash}"))
    stored = read_truth_records(conn, world_id)
    if len(stored) != loaded.count:
        problems.append(TruthProblem(None, None, None, f"{len(stored)} event rows for {loaded.count} ledger events"))
    prev = GENESIS_HASH
    for rec, original in zip(stored, loaded.records, strict=False):
        problem = None
        if head.format_version >= 2:
            body = {k: v for k, v in rec.items() if k != "hash"}
            digest = hashlib.sha256(canonical_json(body).encode()).hexdigest()
            if rec["prev_hash"] != prev:
                problem = "prev_hash does not continue the chain"
            elif digest != rec["hash"]:
                problem = "row content does not hash to its stored hash (changed in the database)"
            elif rec["hash"] != original.get("hash"):
                problem = "hash differs from the ledger file's"
            prev = rec["hash"]
        elif rec != {k: original.get(k) for k in rec}:
            problem = "row differs from the ledger file's event"
        if problem is not None:
            problems.append(TruthProblem(rec["seq"], rec["entity_id"], rec["at"], f"{rec['kind']}: {problem}"))
            if len(problems) >= limit:
                break
    return problems
