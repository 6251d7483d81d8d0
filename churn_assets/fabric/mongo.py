"""Writing and reading the operational store: one MongoDB database per world and as-of day.

Names (docs/rules.md, "Per-world namespaces"): the database of world `w` as of day `d` is
`<w as identifier>_<yyyymmdd>`, e.g. `default_s42_3f9a1c_20240427`: the world id with `-` replaced by
`_`, as for the Postgres schemas (MongoDB shells need no quoting for it, and the mapping stays reversible
because world names never contain `-`). MongoDB limits database names to 63 bytes; longer ones are refused.

Completeness: there is no rename of a database in nx-27017 (nor in MongoDB), so a partition cannot be
written aside and swapped in. Instead `write_partition` drops the database, writes every collection and its
indexes, and writes the `_meta` document LAST. A database without `_meta`, or whose `_meta` names another
ledger head or document schema, is incomplete and is rewritten; readers call `require_complete` first.

Only plain pymongo calls that nx-27017 and MongoDB 7 both implement (insert_many, create_index, find,
count_documents, drop_database, list_database_names, and a transaction where the server offers one, with a
plain fallback for a standalone MongoDB): the same code runs against either. This module
takes a pymongo client as an argument; connecting is the services layer's job (`services.mongo_client`).
"""

from __future__ import annotations

import datetime as dt
import re
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.errors import UserFacingError
from churn_assets.faults import fault_point
from churn_assets.world.calendar import as_day

META_COLLECTION = "_meta"
META_ID = "partition"
MAX_DATABASE_NAME_BYTES = 63

_WORLD_ID_RE = re.compile(r"^[a-z][a-z0-9_]{0,30}-s\d+-[0-9a-f]{6}$")
_DATABASE_RE = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)_s(?P<seed>\d+)_(?P<hash>[0-9a-f]{6})_(?P<day>\d{8})$")


class OperationalStoreError(UserFacingError):
    """The operational store cannot be written or read; the message names the world, day and database."""


# ---------------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------------


def database_prefix(world_id: str) -> str:
    """`default-s42-3f9a1c` -> `default_s42_3f9a1c_` (every database of the world starts with it)."""
    if not _WORLD_ID_RE.match(world_id):
        raise OperationalStoreError(f"{world_id!r} is not a world id (expected <name>-s<seed>-<hash6>)")
    return world_id.replace("-", "_") + "_"


def database_name(world_id: str, day: dt.date | str) -> str:
    """The database holding `world_id` as of `day`, e.g. `default_s42_3f9a1c_20240427`."""
    name = database_prefix(world_id) + as_day(day).strftime("%Y%m%d")
    if len(name.encode()) > MAX_DATABASE_NAME_BYTES:
        raise OperationalStoreError(f"world id {world_id} is too long for a MongoDB database name ({name!r} "
                                    f"has more than {MAX_DATABASE_NAME_BYTES} bytes); use a shorter name or seed")
    return name


def parse_database_name(name: str) -> tuple[str, dt.date] | None:
    """`default_s42_3f9a1c_20240427` -> (`default-s42-3f9a1c`, 2024-04-27); None for other databases."""
    m = _DATABASE_RE.match(name)
    if m is None:
        return None
    try:
        day = dt.datetime.strptime(m["day"], "%Y%m%d").date()
    except ValueError:
        return None
    return f"{m['name']}-s{m['seed']}-{m['hash']}", day


def world_databases(client: Any, world_id: str | None = None) -> dict[str, list[str]]:
    """World -> its operational databases (sorted), for one world or every world on the server."""
    out: dict[str, list[str]] = {}
    for name in client.list_database_names():
        parsed = parse_database_name(name)
        if parsed is None or (world_id is not None and parsed[0] != world_id):
            continue
        out.setdefault(parsed[0], []).append(name)
    return {w: sorted(names) for w, names in sorted(out.items())}


def drop_world_databases(client: Any, world_id: str) -> list[str]:
    """Drop every operational database of `world_id`; returns the names dropped."""
    names = world_databases(client, world_id).get(world_id, [])
    for name in names:
        client.drop_database(name)
    return names


# ---------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionWrite:
    """What `write_partition` did: `skipped` when the database was complete with the same content key."""

    database: str
    skipped: bool
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    rewrote_incomplete: bool = False  # a previous write had stopped before its `_meta` document


def collection_hash(docs: Sequence[Mapping[str, Any]]) -> str:
    """The content hash of a collection: SHA-256 of its documents' canonical JSON, sorted, one per line.
    Recorded in `_meta` when a database is written; a reader recomputes it over what it read."""
    return sha256_hex("\n".join(sorted(canonical_json(dict(doc)) for doc in docs)))


def read_meta(db: Any) -> dict[str, Any] | None:
    meta: dict[str, Any] | None = db[META_COLLECTION].find_one({"_id": META_ID})
    return meta


def _meta_matches(meta: Mapping[str, Any] | None, key: Mapping[str, Any]) -> TypeGuard[Mapping[str, Any]]:
    return meta is not None and all(meta.get(k) == v for k, v in key.items())


def write_partition(
    client: Any,
    world_id: str,
    day: dt.date | str,
    collections: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    indexes: Mapping[str, Sequence[Sequence[str]]],
    content_key: Mapping[str, Any],
    force: bool = False,
) -> PartitionWrite:
    """Make database `<world>_<yyyymmdd>` hold exactly `collections`, idempotently.

    `content_key` (plain values, e.g. ledger head hash and document schema version) identifies the content:
    when the database's `_meta` carries the same key the write is skipped. Otherwise the database is
    dropped and rewritten, and `_meta` (the key, counts and `complete: True`) is written last.
    """
    started = time.perf_counter()
    name = database_name(world_id, day)
    db = client[name]
    meta = read_meta(db)
    if not force and _meta_matches(meta, {**content_key, "complete": True}):
        return PartitionWrite(name, True, dict(meta.get("counts") or {}), time.perf_counter() - started)
    had_data = meta is None and name in client.list_database_names()
    # Drop first: a previous, interrupted write may have left any subset of the collections behind.
    client.drop_database(name)
    for coll_name in collections:
        db.create_collection(coll_name)
    _insert_all(client, db, collections)
    counts: dict[str, int] = {}
    for coll_name, docs in collections.items():
        for fields in indexes.get(coll_name, ()):
            db[coll_name].create_index([(f, 1) for f in fields])
        counts[coll_name] = len(docs)
    fault_point("operational_before_meta")  # the reliability tests kill here: a database without its `_meta`
    db[META_COLLECTION].insert_one({
        "_id": META_ID,
        **content_key,
        "world_id": world_id,
        "day": as_day(day).isoformat(),
        "counts": counts,
        # What each collection holds, for readers to check what they read against (`collection_hash`).
        "content_hashes": {coll_name: collection_hash(docs) for coll_name, docs in collections.items()},
        "complete": True,
    })
    return PartitionWrite(name, False, counts, time.perf_counter() - started, rewrote_incomplete=had_data)


# Clients whose server refused a transaction (a standalone MongoDB): they get plain writes from then on.
_NO_TRANSACTIONS: weakref.WeakSet[Any] = weakref.WeakSet()
_ILLEGAL_OPERATION = 20  # "Transaction numbers are only allowed on a replica set member or mongos"


def _insert_all(client: Any, db: Any, collections: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Insert every collection's documents, in one transaction where the server has them.

    nx-27017 commits each inserted document on its own outside a transaction; inside one it commits once,
    which halves the time of a partition. A standalone MongoDB 7 refuses transactions (they need a replica
    set) before writing anything: the same documents are then written without one.
    """
    from pymongo.errors import OperationFailure

    def insert(session: Any = None) -> None:
        for coll_name, docs in collections.items():
            if docs:
                # Unordered: the server may batch freely; ids are unique by construction (a duplicate raises).
                db[coll_name].insert_many([dict(doc) for doc in docs], ordered=False, session=session)

    if client not in _NO_TRANSACTIONS:
        try:
            with client.start_session() as session, session.start_transaction():
                insert(session)
            return
        except OperationFailure as e:
            if e.code != _ILLEGAL_OPERATION and "Transaction numbers" not in str(e):
                raise
            _NO_TRANSACTIONS.add(client)
    insert()


# ---------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------


def require_complete(client: Any, world_id: str, day: dt.date | str) -> Any:
    """The database of (world, day), refusing one that is missing or was not written to the end."""
    name = database_name(world_id, day)
    db = client[name]
    meta = read_meta(db)
    if meta is None or meta.get("complete") is not True:
        state = "was not written to the end" if name in client.list_database_names() else "does not exist"
        raise OperationalStoreError(
            f"operational store of world {world_id} as of {as_day(day)} (database {name}) {state}; "
            f"materialize operational_store for that world and day")
    return db


def read_collections(db: Any, names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Every document of each named collection, sorted by `_id`."""
    return {name: list(db[name].find({}).sort("_id", 1)) for name in names}
