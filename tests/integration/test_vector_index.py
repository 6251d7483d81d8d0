"""The vector index and the RAG corpus against the real embedded Postgres (pgvector) and the real model.

On the session's 30-day world: two consecutive days whose documents differ in exactly one contract are
indexed through the `vector_index` asset (the second re-embeds only that contract's new chunks, counted
by the model's own encoder-call counter); retrieval reads exactly one day; a question naming a contract
finds it among the top 3 chunks for every contract; the `rag_index` asset built twice for one day
encodes nothing the second time, and its records agree with the truth schema by SQL (a deleted record and a
record pointing at another's text are named); `worlds rm` drops a world's vector tables.

The model is loaded once for the whole session (module-level cache in `grounding.embeddings`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from churn_assets.fabric.postgres import connection
from churn_assets.grounding.chunks import chunk_documents
from churn_assets.grounding.embeddings import GLOBAL_STATS, EncoderStats, default_encoder
from churn_assets.grounding.rag_corpus import corpus_build_of, search_corpus
from churn_assets.grounding.vector_index import (
    IndexNotBuiltError,
    build_of,
    build_vector_index,
    built_days,
    day_chunks,
    search,
    staging_schema,
    table_exists,
    worlds_with_vectors,
)
from churn_assets.orchestration.materialize import Session, materialize
from churn_assets.orchestration.partitions import world_day_key
from churn_assets.orchestration.world_registry import add_world, remove_world, world_artefacts
from churn_assets.world.config import load_config
from churn_assets.world.ledger import load_ledger
from contracts.facts import contract_facts_as_of, document_records
from contracts.render import render_markdown
from contracts.store import day_dir, read_day

pytestmark = pytest.mark.integration


def documents_on(records: list[dict[str, Any]], day: dt.date) -> dict[str, str]:
    return {f.contract_id: render_markdown(f) for f in contract_facts_as_of(records, day)}


def day_with_one_changed_contract(records: list[dict[str, Any]], first: dt.date, days: int
                                  ) -> tuple[dt.date, dt.date, str]:
    """(day before, day, contract): the first pair of consecutive days whose documents differ in one contract."""
    relevant = document_records(records)
    previous = documents_on(relevant, first)
    for offset in range(1, days):
        day = first + dt.timedelta(days=offset)
        current = documents_on(relevant, day)
        changed = sorted(c for c in current if current[c] != previous.get(c))
        if len(changed) == 1 and set(current) == set(previous):
            return day - dt.timedelta(days=1), day, changed[0]
        previous = current
    raise AssertionError("no day of the small world changes exactly one contract document")


@dataclass
class Indexed:
    world_id: str
    before: dt.date
    day: dt.date
    changed: str
    metadata: dict[dt.date, dict[str, Any]]
    encoded: dict[dt.date, EncoderStats]  # the model's own counter, per day's materialization
    documents: dict[dt.date, dict[str, str]]  # as stored on disk by contract_documents


def stored_documents(session: Session, world_id: str, day: dt.date) -> dict[str, str]:
    stored = read_day(day_dir(session.paths.contracts_root(world_id), day))
    return {cid: stored.markdown(cid) for cid in stored.contract_ids}


@pytest.fixture(scope="module")
def own_world(session: Session, session_defs: Any) -> str:
    """The default 30-day world under another name: the same events, a world id (and so schemas and an
    embeddings table) of its own, so that what other modules built for the shared world cannot leak in."""
    from churn_assets.orchestration.world_registry import add_world

    config = load_config(days=30, name="vindex")
    add_world(session.paths, session.instance, config)
    materialize(session, session_defs, ["ledger"], [config.world_id])
    return config.world_id


@pytest.fixture(scope="module")
def indexed(session: Session, session_defs: Any, own_world: str) -> Indexed:
    small_world = own_world
    records = load_ledger(session.paths.ledger_dir(small_world)).records
    first = dt.date.fromisoformat(records[0]["at"])
    before, day, changed = day_with_one_changed_contract(records, first + dt.timedelta(days=1), 29)
    keys = [world_day_key(small_world, d) for d in (before, day)]
    materialize(session, session_defs, ["contract_documents"], keys)
    metadata, encoded = {}, {}
    for d, key in zip((before, day), keys, strict=True):
        start = GLOBAL_STATS.snapshot()
        run = materialize(session, session_defs, ["vector_index"], [key])[0]
        encoded[d] = GLOBAL_STATS.since(start)
        metadata[d] = run.metadata["vector_index"]
    documents = {d: stored_documents(session, small_world, d) for d in (before, day)}
    return Indexed(small_world, before, day, changed, metadata, encoded, documents)


@pytest.fixture(scope="module")
def conn(services: Any) -> Iterator[Any]:
    with connection(services.warehouse, autocommit=True) as c:
        yield c


# ---------------------------------------------------------------------------------------------------
# vector_index
# ---------------------------------------------------------------------------------------------------


def test_a_days_build_prints_progress_naming_world_and_day(session: Session, session_defs: Any, indexed: Indexed,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 37's acceptance line: `paper` prints progress naming the world and day. `paper` cannot run on a 30-day
    world (its T, 2024-04-27, lies outside it), so this runs what `paper` runs for each missing input: the steps of
    `plan_steps`, each through `build_step` (`cells.run_cells`), here the documents and vector index of a day
    before the fixture's (most of its chunks are embedded already: a few seconds). The step prints its tally on
    stderr, `vector_index [<world> <day>]: 0/N new chunks embedded` first and `N/N ... in x s` last; the
    materializer's own line names the step alike."""
    from churn_assets.freshness.scenario import ScenarioInput
    from churn_assets.orchestration.scenario_materializer import asset_ancestors, build_step, plan_steps

    world, day = indexed.world_id, indexed.before - dt.timedelta(days=1)
    steps = plan_steps([ScenarioInput("vector_index", world, day), ScenarioInput("contract_documents", world, day)],
                       asset_ancestors(session_defs))
    echoed: list[str] = []
    capfd.readouterr()
    for step in steps:
        assert build_step(session, session_defs, step, {}, echoed.append).ok
    printed = [line.strip() for line in capfd.readouterr().err.splitlines()]
    label = f"vector_index [{world} {day}]"
    lines = [line for line in printed if line.startswith(f"{label}: ")]
    assert lines, "\n".join(printed)
    first = re.fullmatch(rf"{re.escape(label)}: 0/(\d+) new chunks embedded", lines[0])
    last = re.fullmatch(rf"{re.escape(label)}: (\d+)/(\d+) new chunks embedded in \d+\.\d s", lines[-1])
    assert first and last and int(last[1]) == int(last[2]) == int(first[1]), lines
    for middle in lines[1:-1]:  # throttled lines in between, on a slow machine: counts and elapsed seconds
        assert re.fullmatch(rf"{re.escape(label)}: \d+/{first[1]} new chunks embedded, \d+ s", middle), middle
    assert [e.strip().split(":")[0] for e in echoed] == [f"contract_documents [{world} {day}]", label], echoed


def test_first_day_embeds_each_distinct_chunk_once(indexed: Indexed) -> None:
    chunks = chunk_documents(indexed.documents[indexed.before], indexed.before)
    meta = indexed.metadata[indexed.before]
    assert meta["chunks_total"] == len(chunks)
    assert meta["unique_chunks"] == len({c.content_hash for c in chunks}) < len(chunks)  # shared clauses
    assert meta["re_embedded"] == meta["unique_chunks"]
    assert meta["encoder_calls"] >= 1
    assert indexed.encoded[indexed.before].texts == meta["re_embedded"]
    assert meta["model"] == "all-MiniLM-L6-v2"


def test_a_day_with_one_changed_contract_re_embeds_only_its_new_chunks(indexed: Indexed) -> None:
    before = chunk_documents(indexed.documents[indexed.before], indexed.before)
    after = chunk_documents(indexed.documents[indexed.day], indexed.day)
    known = {c.content_hash for c in before}
    new = {c.content_hash: c for c in after if c.content_hash not in known}
    assert new, "the changed document must bring new chunk texts"
    assert {c.contract_id for c in new.values()} == {indexed.changed}
    meta = indexed.metadata[indexed.day]
    assert meta["chunks_total"] == len(after)
    assert meta["re_embedded"] == len(new)
    assert meta["encoder_calls"] == 1
    assert meta["reused"] == meta["unique_chunks"] - len(new)
    # The model's own counter agrees: one call, exactly the new texts.
    assert (indexed.encoded[indexed.day].calls, indexed.encoded[indexed.day].texts) == (1, len(new))


def test_rebuilding_a_day_embeds_nothing(indexed: Indexed, conn: Any) -> None:
    encoder = default_encoder()
    start = GLOBAL_STATS.snapshot()
    build = build_vector_index(conn, indexed.world_id, indexed.day, indexed.documents[indexed.day], encoder)
    assert (build.embedded, build.encoder_calls) == (0, 0)
    assert GLOBAL_STATS.since(start).calls == 0
    assert build.content_version == indexed.metadata[indexed.day]["content_version"]


def test_retrieval_reads_exactly_the_day_asked_for(indexed: Indexed, conn: Any) -> None:
    encoder = default_encoder()
    question = f"When does contract {indexed.changed} expire, and what is its status?"
    for d in (indexed.before, indexed.day):
        everything = search(conn, indexed.world_id, d, question, encoder, k=100_000)
        assert {h.day for h in everything} == {d}
        assert sorted((h.contract_id, h.chunk_no, h.content_hash) for h in everything) == day_chunks(
            conn, indexed.world_id, d)
    only_before = {c.content_hash for c in chunk_documents(indexed.documents[indexed.before], indexed.before)} - {
        c.content_hash for c in chunk_documents(indexed.documents[indexed.day], indexed.day)}
    hits = search(conn, indexed.world_id, indexed.day, question, encoder, k=20, contract_id=indexed.changed)
    assert hits and {h.contract_id for h in hits} == {indexed.changed}
    assert not {h.content_hash for h in hits} & only_before  # the older version never leaks into the newer day
    hits = search(conn, indexed.world_id, indexed.before, question, encoder, k=20, contract_id=indexed.changed)
    assert {h.content_hash for h in hits} & only_before
    assert built_days(conn, indexed.world_id)[-2:] == [indexed.before, indexed.day]
    with pytest.raises(IndexNotBuiltError, match="no build for"):
        search(conn, indexed.world_id, indexed.day + dt.timedelta(days=1), question, encoder)


def test_a_question_naming_a_contract_finds_it_in_the_top_3(indexed: Indexed, conn: Any) -> None:
    encoder = default_encoder()
    day = indexed.day
    contracts = sorted(indexed.documents[day])
    assert len(contracts) >= 50
    stating_the_value = {"Contract summary", "5. Fees and payment", "Schedule B: Term history"}
    misses, first = [], Counter()
    for cid in contracts:
        hits = search(conn, indexed.world_id, day, f"What is the annual value of contract {cid}?", encoder, k=3)
        if cid not in {h.contract_id for h in hits}:
            misses.append(cid)
        # cosine ranks within the contract: a chunk stating the annual value is among the three
        assert {h.section for h in hits} & stating_the_value, (cid, [h.section for h in hits])
        assert 0.0 < hits[-1].score <= hits[0].score <= 1.0
        first[hits[0].section] += 1
    assert not misses
    assert first["Contract summary"] >= 0.8 * len(contracts), first


def test_cosine_alone_finds_the_clause_a_question_is_about(indexed: Indexed, conn: Any) -> None:
    hits = search(conn, indexed.world_id, indexed.day, "How much notice is needed to stop the automatic renewal?",
                  default_encoder(), k=5)
    assert [h.section for h in hits].count("4. Renewal") >= 3
    assert not any(h.named for h in hits)


# ---------------------------------------------------------------------------------------------------
# rag_index
# ---------------------------------------------------------------------------------------------------


def test_rag_corpus_rebuilt_for_an_unchanged_day_encodes_nothing(
        indexed: Indexed, session: Session, session_defs: Any, conn: Any) -> None:
    key = world_day_key(indexed.world_id, indexed.day)
    start = GLOBAL_STATS.snapshot()
    first = materialize(session, session_defs, ["rag_index"], [key])[0].metadata["rag_index"]
    first_encoded = GLOBAL_STATS.since(start)
    # Contract chunks were embedded by the vector index already: the corpus reuses them.
    assert first["re_embedded"] == first_encoded.texts < first["unique_texts"]
    assert first["records_per_kind"]["contract_chunk"] == indexed.metadata[indexed.day]["chunks_total"]
    assert first["data_time"] == indexed.day.isoformat()

    start = GLOBAL_STATS.snapshot()
    again = materialize(session, session_defs, ["rag_index"], [key])[0].metadata["rag_index"]
    assert (again["re_embedded"], again["encoder_calls"]) == (0, 0)
    assert GLOBAL_STATS.since(start).texts == 0
    assert again["content_version"] == first["content_version"]
    assert corpus_build_of(conn, indexed.world_id, indexed.day).records == again["records"]

    # A point lookup: the record of the user a question names comes first.
    records = load_ledger(session.paths.ledger_dir(indexed.world_id)).records
    user = next(r["entity_id"] for r in records if r["kind"] == "user_hired")
    hits = search_corpus(conn, indexed.world_id, indexed.day, f"Which cost center is user {user} in?",
                         default_encoder(), k=5)
    assert hits[0].record_id == f"user:{user}"
    assert {h.day for h in hits} == {indexed.day}
    # Two named ids: a record naming both outranks one naming one; `matched_ids` counts distinct named ids.
    other = hits[0].refs[-1] if len(hits[0].refs) > 1 else user
    both = search_corpus(conn, indexed.world_id, indexed.day, f"Is user {user} in cost center {other}?",
                         default_encoder(), k=20)
    assert [h.matched_ids for h in both] == sorted((h.matched_ids for h in both), reverse=True)
    assert all(h.matched_ids == len({user, other} & set(h.refs)) for h in both)
    assert both[0].matched_ids == len({user, other})
    with pytest.raises(Exception, match="no build for"):
        search_corpus(conn, indexed.world_id, indexed.before - dt.timedelta(days=1), "anything", default_encoder())


def test_rag_corpus_matches_the_truth_by_sql_and_names_a_tampered_record(
        indexed: Indexed, session: Session, session_defs: Any, conn: Any) -> None:
    import dagster as dg

    from churn_assets.fabric.truth import load_truth
    from churn_assets.orchestration.materialize import run_checks

    check = dg.AssetCheckKey(dg.AssetKey("rag_index"), "rag_index_matches_truth")
    world, key = indexed.world_id, world_day_key(indexed.world_id, indexed.day)
    load_truth(conn, world, load_ledger(session.paths.ledger_dir(world)))
    materialize(session, session_defs, ["rag_index"], [key])  # reuses every embedding (test above)
    [ok] = run_checks(session, session_defs, [check], str(key))
    assert ok.passed, ok.description

    records = f"{staging_schema(world)}.rag_corpus_records"
    licenses = [r[0] for r in conn.execute(
        f"SELECT record_id FROM {records} WHERE day = %s AND kind = 'license' ORDER BY record_id LIMIT 2",
        (indexed.day,))]
    user = conn.execute(f"SELECT record_id FROM {records} WHERE day = %s AND kind = 'user' ORDER BY record_id "
                        "LIMIT 1", (indexed.day,)).fetchone()[0]
    conn.execute(f"DELETE FROM {records} WHERE day = %s AND record_id = %s", (indexed.day, user))
    conn.execute(f"UPDATE {records} SET content_hash = (SELECT content_hash FROM {records} WHERE day = %s AND "
                 "record_id = %s) WHERE day = %s AND record_id = %s",
                 (indexed.day, licenses[1], indexed.day, licenses[0]))
    try:
        [bad] = run_checks(session, session_defs, [check], str(key))
    finally:
        materialize(session, session_defs, ["rag_index"], [key])  # rewrites the day's records
    assert not bad.passed
    problems = bad.metadata["problems"].value
    where = f"RAG corpus of {world} built {indexed.day}, record"
    assert f"{where}: {user} is missing" in problems
    assert any(p.startswith(f"{where}: {licenses[0]} ") for p in problems), problems
    [again] = run_checks(session, session_defs, [check], str(key))
    assert again.passed


# ---------------------------------------------------------------------------------------------------
# worlds rm
# ---------------------------------------------------------------------------------------------------


def test_worlds_rm_drops_the_world_vectors(session: Session, conn: Any, small_world: str) -> None:
    config = load_config(days=30, seed=808)
    world_id = config.world_id
    add_world(session.paths, session.instance, config)
    build_vector_index(conn, world_id, dt.date(2024, 1, 5), {"ctr_0001": "# Contract ctr_0001\n\nA tiny document."},
                       default_encoder())
    schema = staging_schema(world_id)
    assert table_exists(conn, schema, "vector_index_chunks")
    assert world_id in worlds_with_vectors(conn)
    assert "vector index and RAG corpus" in world_artefacts(session.paths, session.instance, world_id)

    removed = remove_world(session.paths, session.instance, world_id)
    assert "vector index and RAG corpus" in removed
    assert world_id not in worlds_with_vectors(conn)
    assert not table_exists(conn, schema, "embeddings")
    assert build_of(conn, world_id, dt.date(2024, 1, 5)) is None
    assert world_artefacts(session.paths, session.instance, world_id) == []
    assert small_world in worlds_with_vectors(conn) or not built_days(conn, small_world)  # others untouched
