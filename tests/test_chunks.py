"""Chunking of contract documents (pure): coverage, sizes, hashes, continuation context, and which chunks
change when one fact of a contract changes. Documents come from the real renderer."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib

import numpy as np
import pytest
from fake_encoder import FakeEncoder

from churn_assets.grounding.chunks import (
    CHUNK_SIZE,
    PREAMBLE,
    chunk_document,
    chunk_documents,
    content_hash,
    identifiers_in,
    split_sections,
)
from churn_assets.grounding.embeddings import CountingEncoder, Encoder
from churn_assets.grounding.vector_index import content_version
from contracts.facts import ContractFacts, ProductRef, TermFacts
from contracts.parse import parse_summary
from contracts.render import render_markdown

DAY = dt.date(2024, 4, 27)


def term(change: str, recorded: str, effective: str, expires: str, value: float, seats: int) -> TermFacts:
    return TermFacts(change, dt.date.fromisoformat(recorded), 12, dt.date.fromisoformat(effective),
                     dt.date.fromisoformat(expires), value, seats)


def facts(contract_id: str = "ctr_0011", *, renewals: int = 0, value: float = 24_989.59,
          vendor: str = "Bramblecloud") -> ContractFacts:
    terms = [term("signed", "2024-01-01", "2023-04-27", "2024-04-26", value, 11)]
    for i in range(renewals):
        terms.append(term("renewed", "2024-04-01", f"{2024 + i}-04-27", f"{2025 + i}-04-26", value + i, 11 + i))
    return ContractFacts(
        contract_id=contract_id, vendor_id="vnd_011", vendor_name=vendor, vendor_tier="preferred",
        products=(ProductRef("prd_0011", f"{vendor} Sign"), ProductRef("prd_0020", f"{vendor} Code")),
        signed_on=dt.date(2023, 4, 14), auto_renew=True, renewal_notice_days=60, terms=tuple(terms),
        expired_on=None, status="active")


@pytest.fixture(scope="module")
def markdown() -> str:
    return render_markdown(facts())


def test_every_line_of_the_document_is_in_a_chunk(markdown: str) -> None:
    chunks = chunk_document("ctr_0011", DAY, markdown)
    joined = "\n".join(c.text for c in chunks)
    for line in markdown.splitlines():
        if line.strip():
            assert line in joined, line


def test_chunks_are_numbered_sized_hashed_and_carry_contract_and_day(markdown: str) -> None:
    chunks = chunk_document("ctr_0011", DAY, markdown)
    assert [c.chunk_no for c in chunks] == list(range(len(chunks)))
    assert {c.contract_id for c in chunks} == {"ctr_0011"}
    assert {c.as_of for c in chunks} == {DAY}
    for c in chunks:
        assert c.content_hash == hashlib.sha256(c.text.encode()).hexdigest() == content_hash(c.text)
        assert len(c.text) <= CHUNK_SIZE
        assert c.text == c.text.strip()
    assert chunks[0].section == PREAMBLE
    sections = [c.section for c in chunks]
    assert "Contract summary" in sections and "Schedule B: Term history" in sections
    assert "4. Renewal" in sections


def test_chunking_is_deterministic(markdown: str) -> None:
    assert chunk_document("ctr_0011", DAY, markdown) == chunk_document("ctr_0011", DAY, markdown)


def test_sections_keep_the_markdown_byte_for_byte(markdown: str) -> None:
    # Unlike MarkdownHeaderTextSplitter, blank lines and table rows survive: a chunk reads back.
    summary = next(text for name, text in split_sections(markdown) if name == "Contract summary")
    assert summary.startswith("## Contract summary\n\n| Field | Value |\n| --- | --- |\n")
    fields = parse_summary(summary)
    assert fields["Contract ID"] == "ctr_0011"
    assert fields["Annual value"] == "USD 24,989.59"


def test_a_long_table_splits_with_heading_and_header_rows_and_no_repeated_row() -> None:
    markdown = render_markdown(facts(renewals=14))
    chunks = [c for c in chunk_document("ctr_0011", DAY, markdown) if c.section == "Schedule B: Term history"]
    assert len(chunks) > 1
    header = ("| # | Event | Recorded on | Effective on | Expires on | Term (months) | Annual value (USD) | "
              "Committed seats |")
    rows: list[str] = []
    for i, c in enumerate(chunks):
        first = c.text.split("\n", 1)[0]
        assert first == ("## Schedule B: Term history" if i == 0 else "## Schedule B: Term history (continued)")
        assert header in c.text
        assert len(c.text) <= CHUNK_SIZE
        rows += [line for line in c.text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == len(set(rows)) == 15  # every term once: no overlap between table pieces


def test_a_changed_fact_changes_only_the_chunks_stating_it() -> None:
    before = chunk_document("ctr_0011", DAY, render_markdown(facts(value=24_989.59)))
    after = chunk_document("ctr_0011", DAY, render_markdown(facts(value=31_000.00)))
    assert len(before) == len(after)
    changed = {b.section for b, a in zip(before, after, strict=True) if b.content_hash != a.content_hash}
    assert changed == {"Contract summary", "5. Fees and payment", "Schedule B: Term history"}


def test_clauses_shared_word_for_word_hash_equal_across_contracts() -> None:
    a = chunk_document("ctr_0011", DAY, render_markdown(facts("ctr_0011")))
    b = chunk_document("ctr_0042", DAY, render_markdown(facts("ctr_0042", vendor="Northware")))
    shared = {c.content_hash for c in a} & {c.content_hash for c in b}
    shared_sections = {c.section for c in a if c.content_hash in shared}
    assert {"1. Definitions", "7. Confidentiality", "9. Warranties", "11. Termination"} <= shared_sections
    assert "Contract summary" not in shared_sections  # names the contract
    assert "12. General" not in shared_sections  # names the contract too


def test_chunk_documents_orders_by_contract_and_keeps_each_numbering() -> None:
    docs = {"ctr_0042": render_markdown(facts("ctr_0042")), "ctr_0011": render_markdown(facts("ctr_0011"))}
    chunks = chunk_documents(docs, DAY)
    ids = [c.contract_id for c in chunks]
    assert ids == sorted(ids)
    for cid in docs:
        assert [c.chunk_no for c in chunks if c.contract_id == cid] == list(range(ids.count(cid)))


def test_identifiers_in_text() -> None:
    text = "Does ctr_0011 or CTR_0054 cover usr_000159 on prd_0022? Not vnd_011, cc_004, ctr_0011 again; not x_1."
    assert identifiers_in(text) == ("ctr_0011", "ctr_0054", "usr_000159", "prd_0022", "vnd_011", "cc_004")
    assert identifiers_in("what is the annual value?") == ()


def test_content_version_is_order_free_and_model_bound() -> None:
    pairs = [("ctr_0011#0", "a"), ("ctr_0011#1", "b")]
    assert content_version("m", pairs) == content_version("m", list(reversed(pairs)))
    assert content_version("m", pairs) != content_version("other", pairs)
    assert content_version("m", pairs) != content_version("m", [("ctr_0011#0", "a"), ("ctr_0011#1", "c")])


def test_counting_encoder_counts_calls_and_texts_at_the_seam() -> None:
    fake = FakeEncoder()
    assert isinstance(fake, Encoder)
    counting = CountingEncoder(fake, keep_texts=True)
    assert counting.encode([]).shape == (0, fake.dimension)
    vectors = counting.encode(["contract ctr_0011 annual value", "confidentiality"])
    assert vectors.shape == (2, fake.dimension) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert (counting.stats.calls, counting.stats.texts) == (1, 2)
    assert counting.seen == ["contract ctr_0011 annual value", "confidentiality"]
    again = counting.encode(["contract ctr_0011 annual value"])
    assert np.allclose(again[0], vectors[0])  # deterministic
    assert dataclasses.astuple(counting.stats)[:2] == (2, 3)
