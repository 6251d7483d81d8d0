"""The contract vector index in pgvector: content-addressed embeddings and one chunk list per as-of day.

Tables, in the world's `<world>_staging` schema (docs/rules.md, "Per-world namespaces"):

- `embeddings` (content_hash, model) -> content, embedding: every text embedded once per world and
  model, whatever day or store it came from. The RAG corpus (`rag_corpus.py`) shares it, so a contract
  chunk embedded for the index is never embedded again for the corpus.
- `vector_index_chunks` (day, contract_id, chunk_no) -> section, content_hash: which chunks make up
  the index as of each day. A `vector_index` partition *is* this day's rows.
- `vector_index_builds` (day) -> model and counts: one row per built day, written last in the same
  transaction as the day's chunks, so a day with a build row is complete.

A new day embeds only the texts whose hash is not in `embeddings` yet (a document that did not change
costs nothing; a changed document costs only its changed chunks). Embeddings are written in batches as
they are computed, before the day's rows: they are content-addressed, so a build that fails half-way
leaves only reusable vectors behind, and the next attempt resumes where it stopped.

Retrieval (`search`) reads exactly one day's chunks (the served vintage the router asks for: never
"the newest day that exists") and ranks them by cosine similarity, exact (no approximate index: one
day holds about a thousand chunks, and an HNSW index would filter by day after its approximate scan).
Contract ids named in the question rank that contract's chunks first: all-MiniLM-L6-v2 embeds
`ctr_0011` and `ctr_0012` almost alike (they differ in one word piece), so pure cosine finds the
contract a question names among its top 3 chunks for fewer than 1 contract in 10 (measured on the
default world); the ids are matched exactly and cosine ranks within and after them.

Every function takes an open psycopg 3 connection (`fabric.postgres.connection(url, autocommit=True)`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, LiteralString

import numpy as np

from churn_assets.errors import UserFacingError
from churn_assets.fabric.postgres import ident, parse_schema_name, relation_exists, schema_name
from churn_assets.grounding.chunks import Chunk, chunk_documents, identifiers_in
from churn_assets.grounding.embeddings import CountingEncoder, Encoder
from churn_assets.progress import Tally

if TYPE_CHECKING:
    import psycopg

STAGING = "staging"
EMBEDDINGS_TABLE = "embeddings"
CHUNKS_TABLE = "vector_index_chunks"
BUILDS_TABLE = "vector_index_builds"
INDEX_TABLES = (EMBEDDINGS_TABLE, CHUNKS_TABLE, BUILDS_TABLE)
RAG_RECORDS_TABLE = "rag_corpus_records"  # the RAG corpus' tables (`rag_corpus.py`): same store, same version
RAG_BUILDS_TABLE = "rag_corpus_builds"
RAG_TABLES = (RAG_RECORDS_TABLE, RAG_BUILDS_TABLE)
META_TABLE = "vector_store_meta"
ENCODE_BATCH = 256  # texts per encoder call: each batch is stored as soon as it is embedded
# Bump when a table of this module or `rag_corpus.py` changes: older tables are dropped and rebuilt (they
# are caches of the documents and the ledger; the partitions are then materialized again).
STORE_VERSION = 1
# `progress(n)` of a build: the tally to count its `n` texts to embed in (`embed_missing`).
Progress = Callable[[int], Tally]

# The DDL of every table of the store (this module's and the RAG corpus'): `{table}` is the table, qualified by
# the world's staging schema, filled in by `ensure_tables` with `sql.Identifier`.
_EMBEDDINGS_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    content_hash text NOT NULL,
    model text NOT NULL,
    content text NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (content_hash, model)
);
COMMENT ON TABLE {table} IS
    'Every text embedded for the vector index or the RAG corpus, once per content hash (SHA-256 of content) and model.';
"""

_CHUNKS_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    day date NOT NULL,
    contract_id text NOT NULL,
    chunk_no integer NOT NULL,
    section text NOT NULL,
    content_hash text NOT NULL,
    PRIMARY KEY (day, contract_id, chunk_no)
);
COMMENT ON TABLE {table} IS
    'The contract chunks of the vector index as of each day (a vector_index partition); embeddings by content_hash.';
"""

_BUILDS_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    day date PRIMARY KEY,
    model text NOT NULL,
    documents integer NOT NULL,
    chunks integer NOT NULL,
    unique_chunks integer NOT NULL,
    embedded integer NOT NULL,
    encoder_calls integer NOT NULL,
    content_version text NOT NULL,
    source_version text
);
COMMENT ON TABLE {table} IS
    'One row per built vector_index day (written last): the day''s chunks are complete.';
"""

_RAG_RECORDS_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    day date NOT NULL,
    record_id text NOT NULL,
    kind text NOT NULL,
    entity_id text NOT NULL,
    refs text[] NOT NULL,
    content_hash text NOT NULL,
    PRIMARY KEY (day, record_id)
);
COMMENT ON TABLE {table} IS
    'The classic-RAG corpus as built on each day (data time = day); record texts and embeddings by content_hash.';
"""

_RAG_BUILDS_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    day date PRIMARY KEY,
    model text NOT NULL,
    records integer NOT NULL,
    unique_texts integer NOT NULL,
    embedded integer NOT NULL,
    encoder_calls integer NOT NULL,
    kinds jsonb NOT NULL,
    content_version text NOT NULL,
    source_version text
);
COMMENT ON TABLE {table} IS
    'One row per built RAG corpus day (written last): the day''s records are complete.';
"""

TABLE_DDL: dict[str, LiteralString] = {
    EMBEDDINGS_TABLE: _EMBEDDINGS_DDL, CHUNKS_TABLE: _CHUNKS_DDL, BUILDS_TABLE: _BUILDS_DDL,
    RAG_RECORDS_TABLE: _RAG_RECORDS_DDL, RAG_BUILDS_TABLE: _RAG_BUILDS_DDL,
}


class VectorIndexError(UserFacingError):
    """The vector index (or the RAG corpus) cannot be built or read; the message names world and day."""


class IndexNotBuiltError(VectorIndexError):
    """The day asked for has no build: its partition was never materialized."""


# ---------------------------------------------------------------------------------------------------
# Schema and the shared embedding store
# ---------------------------------------------------------------------------------------------------


def staging_schema(world_id: str) -> str:
    return schema_name(world_id, STAGING)


def ensure_vector_extension(conn: psycopg.Connection[Any]) -> None:
    """pgvector in the database (the embedded server creates it at bootstrap; an external one may not)."""
    row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    if row is None:
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except Exception as e:
            raise VectorIndexError(f"the pgvector extension is not installed in the warehouse database and "
                                   f"cannot be created by this user ({type(e).__name__}: {e}); run "
                                   "`CREATE EXTENSION vector` as a superuser") from None
    register_vector(conn)


def register_vector(conn: psycopg.Connection[Any]) -> None:
    """Teach this connection the `vector` type (numpy arrays in, `pgvector.Vector` out); idempotent."""
    if conn.adapters.types.get("vector") is not None:
        return
    from pgvector.psycopg import register_vector as _register

    _register(conn)


def ensure_tables(conn: psycopg.Connection[Any], world_id: str, tables: Sequence[str]) -> str:
    """Create the staging schema, the embedding store and `tables` (names of `TABLE_DDL`) when missing; the
    schema.

    Tables of an older `STORE_VERSION` are dropped first (all of them: they reference each other).
    """
    from psycopg import sql

    unknown = [t for t in tables if t not in TABLE_DDL]
    if unknown:
        raise ValueError(f"no DDL for vector store table(s) {', '.join(unknown)} (known: {', '.join(TABLE_DDL)})")
    schema = staging_schema(world_id)
    ensure_vector_extension(conn)
    wanted = list(dict.fromkeys([EMBEDDINGS_TABLE, *tables]))
    if _store_version(conn, schema) == STORE_VERSION and all(relation_exists(conn, schema, t) for t in wanted):
        return schema  # the usual case: no DDL, no lock
    meta = ident(schema, META_TABLE)
    with conn.transaction():
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide in the catalogue: one creator at a time.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{schema} vector tables",))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(schema)))
        if _store_version(conn, schema) != STORE_VERSION:
            for table in VECTOR_TABLES:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(ident(schema, table)))
            conn.execute(sql.SQL("CREATE TABLE {} (version integer NOT NULL)").format(meta))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(meta), (STORE_VERSION,))
        for table in wanted:
            conn.execute(sql.SQL(TABLE_DDL[table]).format(table=ident(schema, table)))
    return schema


def _store_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    from psycopg import sql

    if not relation_exists(conn, schema, META_TABLE):
        return None
    row = conn.execute(sql.SQL("SELECT max(version) FROM {}").format(ident(schema, META_TABLE))).fetchone()
    return None if row is None else row[0]


def stored_hashes(conn: psycopg.Connection[Any], schema: str, model: str, hashes: Sequence[str]) -> set[str]:
    """The hashes among `hashes` that already have an embedding for `model`."""
    from psycopg import sql

    if not hashes:
        return set()
    rows = conn.execute(
        sql.SQL("SELECT content_hash FROM {} WHERE model = %s AND content_hash = ANY(%s)").format(
            ident(schema, EMBEDDINGS_TABLE)),
        (model, list(hashes))).fetchall()
    return {r[0] for r in rows}


def store_embeddings(conn: psycopg.Connection[Any], schema: str, model: str, hashes: Sequence[str],
                     contents: Sequence[str], vectors: np.ndarray) -> None:
    """Insert embeddings (skipping hashes another build stored meanwhile), in one transaction."""
    from psycopg import sql

    register_vector(conn)
    with conn.transaction():
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS _new_embeddings "
                     "(content_hash text, content text, embedding vector) ON COMMIT DELETE ROWS")
        with conn.cursor() as cur, cur.copy(
                "COPY _new_embeddings (content_hash, content, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "text", "vector"])
            for h, c, v in zip(hashes, contents, vectors, strict=True):
                copy.write_row((h, c, v))
        conn.execute(sql.SQL("INSERT INTO {} (content_hash, model, content, embedding) "
                             "SELECT content_hash, %s, content, embedding FROM _new_embeddings "
                             "ON CONFLICT (content_hash, model) DO NOTHING").format(ident(schema, EMBEDDINGS_TABLE)),
                     (model,))


@dataclass(frozen=True)
class EmbedResult:
    unique: int  # distinct texts asked for
    embedded: int  # texts that had no embedding yet and were encoded now
    encoder_calls: int
    seconds: float


def embed_missing(conn: psycopg.Connection[Any], schema: str, texts: Mapping[str, str], encoder: Encoder,
                  *, batch: int = ENCODE_BATCH, progress: Progress | None = None) -> EmbedResult:
    """Make sure every text of `texts` ({content hash: text}) has an embedding for the encoder's model:
    encode only the missing ones, in batches of `batch`, storing each batch as soon as it is encoded.
    `progress(n)`: the tally to count the `n` texts to encode in, batch by batch (the long part of a build)."""
    counting = CountingEncoder(encoder)
    model = encoder.model_id
    missing = sorted(set(texts) - stored_hashes(conn, schema, model, list(texts)), key=lambda h: (len(texts[h]), h))
    tally = progress(len(missing)) if progress is not None else None
    for start in range(0, len(missing), batch):
        hashes = missing[start:start + batch]
        contents = [texts[h] for h in hashes]
        vectors = counting.encode(contents)
        if vectors.shape != (len(hashes), encoder.dimension):
            raise VectorIndexError(f"encoder {model} returned shape {vectors.shape} for {len(hashes)} texts")
        store_embeddings(conn, schema, model, hashes, contents, vectors)
        if tally is not None:
            tally.advance(len(hashes))
    if tally is not None:
        tally.finish()
    return EmbedResult(len(texts), counting.stats.texts, counting.stats.calls, counting.stats.seconds)


@contextmanager
def day_lock(conn: psycopg.Connection[Any], name: str) -> Iterator[None]:
    """A transaction holding an advisory lock on `name` (one writer per world, store and day)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
        yield


def copy_rows(conn: psycopg.Connection[Any], schema: str, table: str, columns: Sequence[str],
              rows: Sequence[Sequence[Any]]) -> None:
    from psycopg import sql

    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(ident(schema, table),
                                                         sql.SQL(", ").join(ident(c) for c in columns))
    with conn.cursor() as cur, cur.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


# ---------------------------------------------------------------------------------------------------
# Building a day
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexBuild:
    """What one day's build holds and did: `embedded` texts were encoded now, the rest reused."""

    world_id: str
    day: dt.date
    model: str
    documents: int
    chunks: int
    unique_chunks: int
    embedded: int
    encoder_calls: int
    content_version: str  # SHA-256 over the model and every (contract, position, content hash) of the day
    source_version: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def reused(self) -> int:
        return self.unique_chunks - self.embedded


def content_version(model: str, keyed_hashes: Sequence[tuple[str, str]]) -> str:
    """One hash of a day's content: equal iff the same model embedded the same texts at the same places
    (`keyed_hashes`: (place, content hash) pairs, e.g. ("ctr_0011#3", hash))."""
    digest = hashlib.sha256(model.encode())
    for key, h in sorted(keyed_hashes):
        digest.update(f"\n{key}\t{h}".encode())
    return digest.hexdigest()


def build_vector_index(conn: psycopg.Connection[Any], world_id: str, day: dt.date, documents: Mapping[str, str],
                       encoder: Encoder, *, source_version: str | None = None,
                       progress: Progress | None = None) -> IndexBuild:
    """Index the documents of `day` ({contract id: Markdown}): chunk, embed what is new, replace the day.

    `source_version` (e.g. the document manifest's hash) is stored with the build for lineage; `progress`: see
    `embed_missing`.
    """
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    chunks = chunk_documents(documents, day)
    seconds["chunk"] = time.perf_counter() - started

    schema = ensure_tables(conn, world_id, INDEX_TABLES)
    texts = {c.content_hash: c.text for c in chunks}
    embedded = embed_missing(conn, schema, texts, encoder, progress=progress)
    seconds["embed"] = embedded.seconds

    started = time.perf_counter()
    version = content_version(encoder.model_id, [(f"{c.contract_id}#{c.chunk_no}", c.content_hash) for c in chunks])
    build = IndexBuild(world_id, day, encoder.model_id, len(documents), len(chunks), embedded.unique,
                       embedded.embedded, embedded.encoder_calls, version, source_version)
    write_day(conn, schema, build, chunks)
    seconds["store"] = time.perf_counter() - started
    return dataclasses.replace(build, seconds=seconds)


def write_day(conn: psycopg.Connection[Any], schema: str, build: IndexBuild, chunks: Sequence[Chunk]) -> None:
    """Replace the day's chunk list and build row, in one transaction."""
    from psycopg import sql

    with day_lock(conn, f"{schema} vector_index {build.day.isoformat()}"):
        conn.execute(sql.SQL("DELETE FROM {} WHERE day = %s").format(ident(schema, CHUNKS_TABLE)), (build.day,))
        copy_rows(conn, schema, CHUNKS_TABLE, ("day", "contract_id", "chunk_no", "section", "content_hash"),
                  [(build.day, c.contract_id, c.chunk_no, c.section, c.content_hash) for c in chunks])
        conn.execute(sql.SQL(
            """
            INSERT INTO {}
                (day, model, documents, chunks, unique_chunks, embedded, encoder_calls, content_version,
                 source_version)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (day) DO UPDATE SET model = EXCLUDED.model, documents = EXCLUDED.documents,
                chunks = EXCLUDED.chunks, unique_chunks = EXCLUDED.unique_chunks, embedded = EXCLUDED.embedded,
                encoder_calls = EXCLUDED.encoder_calls, content_version = EXCLUDED.content_version,
                source_version = EXCLUDED.source_version
            """).format(ident(schema, BUILDS_TABLE)),
            (build.day, build.model, build.documents, build.chunks, build.unique_chunks, build.embedded,
             build.encoder_calls, build.content_version, build.source_version))


# ---------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------


# The index's name for it (its callers and tests use it); one implementation, in fabric.postgres.
table_exists = relation_exists


def built_days(conn: psycopg.Connection[Any], world_id: str) -> list[dt.date]:
    """The days the vector index of `world_id` has a complete build for, in calendar order."""
    from psycopg import sql

    schema = staging_schema(world_id)
    if not relation_exists(conn, schema, BUILDS_TABLE):
        return []
    rows = conn.execute(sql.SQL("SELECT day FROM {} ORDER BY day").format(ident(schema, BUILDS_TABLE)))
    return [r[0] for r in rows]


def build_of(conn: psycopg.Connection[Any], world_id: str, day: dt.date) -> IndexBuild | None:
    """The stored build of `day`, or None when the day was never built."""
    from psycopg import sql

    schema = staging_schema(world_id)
    if not relation_exists(conn, schema, BUILDS_TABLE):
        return None
    row = conn.execute(sql.SQL(
        "SELECT model, documents, chunks, unique_chunks, embedded, encoder_calls, content_version, source_version "
        "FROM {} WHERE day = %s").format(ident(schema, BUILDS_TABLE)), (day,)).fetchone()
    if row is None:
        return None
    return IndexBuild(world_id, day, *row)


def day_chunks(conn: psycopg.Connection[Any], world_id: str, day: dt.date) -> list[tuple[str, int, str]]:
    """(contract id, chunk no, content hash) of every chunk of a built day, in document order."""
    from psycopg import sql

    _require_build(conn, world_id, day, None)
    return [tuple(r) for r in conn.execute(sql.SQL(
        "SELECT contract_id, chunk_no, content_hash FROM {} WHERE day = %s ORDER BY contract_id, chunk_no").format(
        ident(staging_schema(world_id), CHUNKS_TABLE)), (day,))]


def _require_build(conn: psycopg.Connection[Any], world_id: str, day: dt.date, model: str | None) -> IndexBuild:
    build = build_of(conn, world_id, day)
    if build is None:
        days = built_days(conn, world_id)
        shown = ", ".join(d.isoformat() for d in days[-5:]) or "none"
        raise IndexNotBuiltError(f"the vector index of world {world_id} has no build for {day.isoformat()} "
                                 f"(materialize vector_index for that world and day; latest built days: {shown})")
    if model is not None and build.model != model:
        raise VectorIndexError(f"the vector index of world {world_id} for {day.isoformat()} was built with "
                               f"{build.model}, not {model}: rebuild it or search with the same model")
    return build


@dataclass(frozen=True)
class ChunkHit:
    """One retrieved chunk: where it comes from (day, contract, position) and its cosine similarity."""

    day: dt.date
    contract_id: str
    chunk_no: int
    section: str
    text: str
    content_hash: str
    score: float  # cosine similarity to the query, in [-1, 1]
    named: bool  # the query names this chunk's contract id


def query_vector(query: str | np.ndarray, encoder: Encoder) -> np.ndarray:
    if isinstance(query, str):
        return np.asarray(encoder.encode([query])[0], dtype=np.float32)
    vector = np.asarray(query, dtype=np.float32)
    if vector.shape != (encoder.dimension,):
        raise ValueError(f"query vector has shape {vector.shape}, expected ({encoder.dimension},)")
    return vector


def search(conn: psycopg.Connection[Any], world_id: str, day: dt.date, query: str | np.ndarray, encoder: Encoder,
           *, k: int = 5, contract_id: str | None = None, match_identifiers: bool = True) -> list[ChunkHit]:
    """The `k` chunks of the index as of `day` most similar to `query` (a question, or its vector).

    Only chunks of `day` are ever returned. `contract_id` restricts the search to one contract. With
    `match_identifiers`, chunks of the contracts whose ids the question names rank first (by cosine),
    then every other chunk (by cosine). Ties break by contract id and position, so results are stable.
    """
    from psycopg import sql

    if k <= 0:
        return []
    _require_build(conn, world_id, day, encoder.model_id)
    register_vector(conn)
    vector = query_vector(query, encoder)
    named = list(identifiers_in(query)) if (match_identifiers and isinstance(query, str)) else []
    schema = staging_schema(world_id)
    rows = conn.execute(sql.SQL(
        """
        SELECT m.contract_id, m.chunk_no, m.section, e.content, m.content_hash,
               1 - (e.embedding <=> %(q)s) AS score, m.contract_id = ANY(%(named)s::text[]) AS named
        FROM {chunks} m
        JOIN {embeddings} e ON e.content_hash = m.content_hash AND e.model = %(model)s
        WHERE m.day = %(day)s AND (%(contract)s::text IS NULL OR m.contract_id = %(contract)s)
        ORDER BY named DESC, e.embedding <=> %(q)s, m.contract_id, m.chunk_no
        LIMIT %(k)s
        """).format(chunks=ident(schema, CHUNKS_TABLE), embeddings=ident(schema, EMBEDDINGS_TABLE)),
        {"q": vector, "named": named, "model": encoder.model_id, "day": day, "contract": contract_id, "k": k},
    ).fetchall()
    return [ChunkHit(day, r[0], r[1], r[2], r[3], r[4], float(r[5]), bool(r[6])) for r in rows]


# ---------------------------------------------------------------------------------------------------
# Per-world cleanup (`churnbench worlds rm` / `gc`)
# ---------------------------------------------------------------------------------------------------

# Every table this module and `rag_corpus.py` create in a world's staging schema.
VECTOR_TABLES = (CHUNKS_TABLE, BUILDS_TABLE, *RAG_TABLES, EMBEDDINGS_TABLE, META_TABLE)


def worlds_with_vectors(conn: psycopg.Connection[Any]) -> set[str]:
    """Worlds whose staging schema holds any table of the vector index or the RAG corpus."""
    rows = conn.execute("SELECT schemaname FROM pg_tables WHERE tablename = ANY(%s)", (list(VECTOR_TABLES),))
    found = set()
    for (schema,) in rows:
        parsed = parse_schema_name(schema)
        if parsed is not None and parsed[1] == STAGING:
            found.add(parsed[0])
    return found


def drop_world_vectors(conn: psycopg.Connection[Any], world_id: str) -> list[str]:
    """Drop the vector index and RAG corpus tables of a world (not its other staging tables); returns
    the tables that existed."""
    from psycopg import sql

    schema = staging_schema(world_id)
    dropped = []
    with conn.transaction():
        for table in VECTOR_TABLES:
            if relation_exists(conn, schema, table):
                conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(ident(schema, table)))
                dropped.append(table)
    return dropped
