"""Content hashes of what the warehouse's as-of views read: recorded at the dbt build, checked by evaluations.

An as-of view of `<world>_analytics` stores nothing: it applies the day asked to the relations under it (the
marts of `<world>_analytics`, `dim_date`, and through dbt's staging views the tables of `<world>_raw`). What can be
hashed is that closure, and every view's definition in it (docs/decisions.md 240; it supersedes decision 82's
exception for the warehouse):

- `closure(conn, world, views)`: every relation the given as-of views read, transitively, as Postgres' own
  dependency catalog records it (`pg_depend` over the views' rewrite rules): what the database really runs, not
  what a manifest says it should.
- a table's hash is the content hash of its rows (`postgres.content_hash_sql`, the staged partitions' hash); a
  view's the MD5 of its definition (`pg_get_viewdef`), its row count 0;
- `record_content(conn, world, views)`: after a dbt build, the hash of every relation of the closure into
  `<world>_analytics.warehouse_content` (relation, kind, rows, content_hash, key_id, mac), replacing what was there.
  Each row is sealed: `mac` is an HMAC of the world and the row under the state folder's seal key (`seal_key.py`,
  issue 46), a file the database never holds, so whoever can write the database but not read the state folder
  cannot re-record an edited table's hash (the forgery that let a run complete on edited data);
  `forget_content` removes the record before a build starts, so a build that fails leaves none;
- `verify_content(conn, world, views)`: the same hashes recomputed now and compared with the record; a relation
  whose content differs raises `DataIntegrityError` naming it, its rows and both hashes (a missing record is a
  `WarehouseContentError` naming the fix; a row whose seal does not verify under the key, a `DataIntegrityError`
  naming it; a row sealed under another key, "key changed"). It returns, per view, the hash of its closure's
  recorded hashes: the
  `observed_hash` of a warehouse read (`grounding/readers/warehouse.py`), which `verify-results` compares with the
  warehouse as it is then.
- `WarehouseCheck`: an evaluation's check (`runner.ContentCheck`): the reads' hashes come from the record at once;
  the relations are verified against it in a thread beside the answers (the start check, off the run's critical
  path) and once more when every task is answered; a failure of either fails the run and drops its checkpoint.

What it proves: the relations an arm's views read hold what the dbt build left, when the evaluation starts and
when it ends. What it does not: that the dbt build itself was right (its tests, the parity checks against the
fold and `verify-results --independent` look at that), nor anything between two checks that was undone before
the second.

Reads as the owner (the warehouse URL), never as an arm: the arm role cannot read the marts or `_raw`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.errors import DataIntegrityError, UserFacingError
from churn_assets.fabric.postgres import connection, content_hash_sql, ident, relation_exists, schema_name
from churn_assets.seal_key import KeyChanged, SealKey, current_key

if TYPE_CHECKING:
    import psycopg

CONTENT_TABLE = "warehouse_content"  # in `<world>_analytics`, written by the dbt asset after each build
CONTENT_SEAL_DOMAIN = "warehouse-content"  # the MAC's domain: no seal of another kind passes as a row's
TABLE = "table"
VIEW = "view"


class WarehouseContentError(UserFacingError):
    """The warehouse of a world has no recorded content hashes (built before they were recorded, or a build that
    did not finish)."""


@dataclass(frozen=True)
class RelationHash:
    relation: str  # `<schema>.<name>`
    kind: str  # TABLE or VIEW
    rows: int
    content_hash: str

    def sealed_parts(self, world_id: str) -> tuple[str, ...]:
        """What a row's MAC is over (with `CONTENT_SEAL_DOMAIN`): the world, so no world's row passes as another's."""
        return world_id, self.relation, self.kind, str(self.rows), self.content_hash


@dataclass(frozen=True)
class SealedRow:
    """A row of the record as stored: its hash, and the key id and MAC it was sealed with (None: not sealed, an
    older churnbench's record)."""

    hashed: RelationHash
    key_id: str | None
    mac: str | None


@dataclass(frozen=True)
class Closure:
    """What each as-of view reads: view -> the qualified relations of its closure (itself included), and the
    kind of each relation."""

    reads: dict[str, tuple[str, ...]]
    kinds: dict[str, str]

    @property
    def relations(self) -> list[str]:
        return sorted(self.kinds)


_CLOSURE_SQL = """
WITH RECURSIVE deps(root, oid) AS (
    SELECT c.relname::text, c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %s AND c.relname = ANY(%s)
  UNION
    SELECT deps.root, d.refobjid FROM deps
    JOIN pg_rewrite r ON r.ev_class = deps.oid
    JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                     AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> deps.oid
)
SELECT DISTINCT deps.root, n.nspname::text, c.relname::text, c.relkind::text
FROM deps JOIN pg_class c ON c.oid = deps.oid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'v', 'm', 'p')
"""


def closure(conn: psycopg.Connection[Any], world_id: str, views: Collection[str]) -> Closure:
    """Every relation the world's `views` (as-of view names in `<world>_analytics`) read, transitively."""
    schema = schema_name(world_id, "analytics")
    rows = conn.execute(_CLOSURE_SQL, (schema, sorted(views))).fetchall()
    reads: dict[str, set[str]] = {}
    kinds: dict[str, str] = {}
    for root, nsp, name, kind in rows:
        qualified = f"{nsp}.{name}"
        reads.setdefault(root, set()).add(qualified)
        kinds[qualified] = VIEW if kind == "v" else TABLE
    missing = sorted(set(views) - reads.keys())
    if missing:
        raise WarehouseContentError(f"world {world_id}: {schema} has no view {', '.join(missing)}: its dbt build "
                                    "is missing or incomplete (materialize `analytics_dbt` for the world)")
    return Closure({v: tuple(sorted(r)) for v, r in sorted(reads.items())}, kinds)


def hash_relation(conn: psycopg.Connection[Any], relation: str, kind: str) -> RelationHash:
    """The content hash of one relation as it is now."""
    from psycopg import sql

    schema, name = relation.split(".", 1)
    if kind == VIEW:
        row = conn.execute("SELECT pg_get_viewdef(to_regclass(%s), true)",
                           (ident(schema, name).as_string(conn),)).fetchone()
        definition = str(row[0]) if row else ""
        return RelationHash(relation, kind, 0, hashlib.md5(definition.encode("utf-8")).hexdigest())
    row = conn.execute(content_hash_sql(sql.SQL("SELECT * FROM {}").format(ident(schema, name)))).fetchone()
    assert row is not None
    return RelationHash(relation, kind, int(row[0]), str(row[1]))


def current_hashes(conn: psycopg.Connection[Any], world_id: str, views: Collection[str]
                   ) -> tuple[Closure, dict[str, RelationHash]]:
    found = closure(conn, world_id, views)
    return found, {r: hash_relation(conn, r, found.kinds[r]) for r in found.relations}


def record_content(conn: psycopg.Connection[Any], world_id: str, views: Collection[str],
                   key: SealKey | None = None) -> list[RelationHash]:
    """Hash every relation the views read and record the hashes, each row sealed with `key` (default: the state
    folder's), replacing the world's record (an older record's table, without seals, is made again); commits."""
    from psycopg import sql

    key = key or current_key()
    table = ident(schema_name(world_id, "analytics"), CONTENT_TABLE)
    _, hashes = current_hashes(conn, world_id, views)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    conn.execute(sql.SQL("CREATE TABLE {} (relation text PRIMARY KEY, kind text NOT NULL, row_count bigint NOT NULL, "
                         "content_hash text NOT NULL, key_id text NOT NULL, mac text NOT NULL)").format(table))
    with conn.cursor() as cur:
        cur.executemany(sql.SQL("INSERT INTO {} (relation, kind, row_count, content_hash, key_id, mac) "
                                "VALUES (%s, %s, %s, %s, %s, %s)").format(table),
                        [(h.relation, h.kind, h.rows, h.content_hash, key.key_id,
                          key.mac(CONTENT_SEAL_DOMAIN, *h.sealed_parts(world_id))) for h in hashes.values()])
    conn.commit()
    return list(hashes.values())


def forget_content(conn: psycopg.Connection[Any], world_id: str) -> None:
    """Remove the world's record (a build is about to replace what it describes); commits."""
    from psycopg import sql

    schema = schema_name(world_id, "analytics")
    if relation_exists(conn, schema, CONTENT_TABLE):
        conn.execute(sql.SQL("DELETE FROM {}").format(ident(schema, CONTENT_TABLE)))
    conn.commit()


def stored_content(conn: psycopg.Connection[Any], world_id: str) -> dict[str, SealedRow]:
    """The world's record as stored, seals unchecked ({} when none is recorded): for the migration that seals an
    older record, and for `recorded_content`, which checks them."""
    from psycopg import sql

    schema = schema_name(world_id, "analytics")
    if not relation_exists(conn, schema, CONTENT_TABLE):
        return {}
    table = ident(schema, CONTENT_TABLE)
    sealed = conn.execute("SELECT count(*) FROM information_schema.columns WHERE table_schema = %s AND "
                          "table_name = %s AND column_name = 'mac'", (schema, CONTENT_TABLE)).fetchone()
    columns = "key_id, mac" if sealed and sealed[0] else "NULL, NULL"  # an older churnbench's table has neither
    rows = conn.execute(sql.SQL("SELECT relation, kind, row_count, content_hash, {} FROM {}")
                        .format(sql.SQL(columns), table)).fetchall()
    return {r[0]: SealedRow(RelationHash(r[0], r[1], int(r[2]), r[3]), r[4], r[5]) for r in rows}


def recorded_content(conn: psycopg.Connection[Any], world_id: str,
                     key: SealKey | None = None) -> dict[str, RelationHash]:
    """The world's recorded hashes by relation ({} when none are recorded), each row's seal checked under `key`
    (default: the state folder's). A row sealed under another key raises `KeyChanged`; an unsealed row (an older
    churnbench's record) `WarehouseContentError`; a seal that does not verify `DataIntegrityError`."""
    stored = stored_content(conn, world_id)
    if not stored:
        return {}
    key = key or current_key()
    schema = schema_name(world_id, "analytics")
    for row in stored.values():
        if row.mac is None:
            raise WarehouseContentError(
                f"world {world_id}: {schema}.{CONTENT_TABLE} is not sealed (an older churnbench recorded it): run "
                "`churnbench migrate`, which seals it if the warehouse still matches it")
        if row.key_id != key.key_id:
            raise KeyChanged(
                f"world {world_id}: {schema}.{CONTENT_TABLE} was sealed under another key (key changed: "
                f"{row.key_id}, this state folder's is {key.key_id}): rebuild the warehouse under this key "
                f"(materialize `analytics_dbt` for the world), or restore the key it was made with")
        if not key.verifies(row.mac, CONTENT_SEAL_DOMAIN, *row.hashed.sealed_parts(world_id)):
            raise DataIntegrityError(
                f"world {world_id}: the record of {row.hashed.relation} in {schema}.{CONTENT_TABLE} does not "
                "verify under this state folder's seal key: it was written through the database, not by a dbt "
                f"build of this state folder (rebuild it: materialize `analytics_dbt` for the world)")
    return {name: row.hashed for name, row in stored.items()}


def view_hashes(found: Closure, hashes: Mapping[str, RelationHash]) -> dict[str, str]:
    """Per view, the hash of its closure: SHA-256 of the relations it reads with their rows and hashes."""
    return {view: sha256_hex(canonical_json({r: [hashes[r].rows, hashes[r].content_hash] for r in reads}))
            for view, reads in found.reads.items()}


def verify_content(conn: psycopg.Connection[Any], world_id: str, views: Collection[str],
                   key: SealKey | None = None) -> dict[str, str]:
    """Recompute the hashes of everything the views read and compare them with the build's record; returns the
    per-view hashes (`view_hashes`). Raises `DataIntegrityError` naming every relation that changed."""
    recorded = recorded_content(conn, world_id, key)
    if not recorded:
        raise WarehouseContentError(
            f"world {world_id}: the warehouse ({schema_name(world_id, 'analytics')}) has no recorded content "
            "hashes (built by an older churnbench, or its build did not finish): rebuild it (`churnbench run` and "
            f"`churnbench project --world {world_id}` do; or materialize `analytics_dbt` for the world)")
    found, now = current_hashes(conn, world_id, views)
    changed = [describe_change(now[r], recorded.get(r)) for r in found.relations
               if recorded.get(r) is None or (recorded[r].rows, recorded[r].content_hash) != (now[r].rows,
                                                                                             now[r].content_hash)]
    if changed:
        raise DataIntegrityError(f"world {world_id}: the warehouse is not what its dbt build left: "
                                 + "; ".join(changed) + " (rebuild it: materialize `analytics_dbt` for the world, "
                                 "or `churnbench project`)")
    return view_hashes(found, now)


def reseal_content(conn: psycopg.Connection[Any], world_id: str, views: Collection[str], old: SealKey,
                   new: SealKey) -> tuple[bool, str | None]:
    """A key rotation's step: the world's record, sealed under `old` and still matching the warehouse, recorded
    again under `new`. (True, None) when it was; (False, None) when the world has no record or it is under `new`
    already; (False, what is wrong) otherwise, the record left as it is. Commits."""
    stored = stored_content(conn, world_id)
    if not stored or all(r.key_id == new.key_id for r in stored.values()):
        conn.rollback()
        return False, None
    try:
        verify_content(conn, world_id, views, old)
    except UserFacingError as e:  # DataIntegrityError, KeyChanged, WarehouseContentError: named, never resealed
        conn.rollback()
        return False, str(e)
    record_content(conn, world_id, views, new)
    return True, None


def describe_change(now: RelationHash, recorded: RelationHash | None) -> str:
    if recorded is None:
        return f"{now.kind} {now.relation} is read by the as-of views but the build recorded no hash for it"
    if now.kind == VIEW:
        return (f"view {now.relation}: its definition hashes to {now.content_hash[:12]}, the build recorded "
                f"{recorded.content_hash[:12]}")
    return (f"table {now.relation}: its {now.rows} rows hash to {now.content_hash[:12]}, the build recorded "
            f"{recorded.rows} rows hashing to {recorded.content_hash[:12]}")


def recorded_views(url: str, world_id: str, views: Collection[str], key: SealKey | None = None) -> dict[str, str]:
    """Per view, the hash of its closure as the dbt build recorded it (`view_hashes` of the record): what a read's
    trace carries while `verify_content` checks, beside the answers, that the relations are still what was
    recorded. Raises `WarehouseContentError` when a relation the views read has no record."""
    with connection(url) as conn:
        try:
            recorded = recorded_content(conn, world_id, key)
            found = closure(conn, world_id, views)
        finally:
            conn.rollback()
    unrecorded = [r for r in found.relations if r not in recorded]
    if unrecorded:
        raise WarehouseContentError(
            f"world {world_id}: the warehouse ({schema_name(world_id, 'analytics')}) has no recorded content hash "
            f"for {', '.join(unrecorded[:3])}{' ...' if len(unrecorded) > 3 else ''} (built by an older churnbench, "
            f"or its build did not finish): rebuild it (`churnbench run` and `churnbench project --world "
            f"{world_id}` do; or materialize `analytics_dbt` for the world)")
    return view_hashes(found, recorded)


def verified_views(url: str, world_id: str, views: Collection[str], key: SealKey | None = None) -> dict[str, str]:
    """`verify_content` on a connection of its own (the owner's: the warehouse URL)."""
    with connection(url) as conn:
        try:
            return verify_content(conn, world_id, views, key)
        finally:
            conn.rollback()


class WarehouseCheck:
    """`evaluation.runner.ContentCheck` for the warehouse an evaluation reads (decision 252). `hashes` (per view,
    from the build's record) is what the reads' traces carry; the start check verifies the relations against the
    record in a thread while the arm answers, `finish` waits for it and verifies once more."""

    def __init__(self, url: str, world_id: str, views: Collection[str], key: SealKey | None = None) -> None:
        self.url, self.world_id, self.views, self.key = url, world_id, frozenset(views), key or current_key()
        self.hashes = recorded_views(url, world_id, self.views, self.key)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="churnbench-warehouse-check")
        self._start = self._pool.submit(verified_views, url, world_id, self.views, self.key)

    def poll(self) -> None:
        """Raise what the start check found, if it has finished and found something."""
        if self._start.done():
            self._same(self._start.result(), "when the arm started")

    def finish(self) -> None:
        self._same(self._start.result(), "when the arm started")
        self._same(verified_views(self.url, self.world_id, self.views, self.key), "once every task was answered")

    def close(self) -> None:
        """Stop waiting for the start check (a run that failed or was cancelled does not wait for it)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _same(self, found: Mapping[str, str], when: str) -> None:
        changed = sorted(v for v in self.views if found.get(v) != self.hashes.get(v))
        if changed:
            raise DataIntegrityError(f"world {self.world_id}: the warehouse was rebuilt while the arm answered (what "
                                     f"{', '.join(changed)} read{'s' if len(changed) == 1 else ''} differs, {when}, "
                                     "from the record the reads' traces carry): no answer of this attempt is kept; "
                                     "run it again")
