"""Chunking of contract documents for the vector index, and the content hash that keys every embedding.

A contract's Markdown is split at its headings with LangChain's `ExperimentalMarkdownSyntaxTextSplitter`
(which, unlike `MarkdownHeaderTextSplitter`, keeps the text byte for byte: blank lines and table rows
survive, so a chunk can be read back with `contracts.parse.parse_summary`). A section longer than
`CHUNK_SIZE` characters is split again with `RecursiveCharacterTextSplitter` at paragraph, then line
boundaries; every continuation piece starts with the section's heading and, inside a table, the
table's header rows, so no piece loses its context.

A chunk's text is exactly what gets embedded, and `content_hash` (SHA-256 of that text) keys its
embedding: a chunk whose text did not change since an earlier day keeps its hash and is never embedded
again. Chunks carry no contract-specific prefix on purpose: the clauses every contract shares word for
word (confidentiality, warranties, ...) hash equal across contracts and are embedded once per world.
The contract id and as-of day live beside the hash (`Chunk.contract_id`, `Chunk.as_of`), not in it.

Sizes: all-MiniLM-L6-v2 reads at most 256 word pieces; 700 characters is about 240 pieces of table
text (the densest the documents hold) and about 160 of prose, so nothing is cut off silently.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

CHUNK_SIZE = 700  # characters
CHUNK_OVERLAP = 100  # characters carried into the next piece of a split prose section
HEADERS = (("#", "title"), ("##", "section"))
PREAMBLE = "Preamble"  # the section name of the text under the document title, before any `##` heading

# Entity ids of the simulator (`ctr_0011`, `usr_000159`, `vnd_011`, `cc_004`, ...).
IDENTIFIER_RE = re.compile(r"\b[a-z]{2,4}_\d{3,7}\b")


def content_hash(text: str) -> str:
    """SHA-256 (hex) of the UTF-8 text: the key of the text's embedding."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identifiers_in(text: str) -> tuple[str, ...]:
    """Entity ids named in a text, in order of first appearance, without repeats."""
    return tuple(dict.fromkeys(m.group(0) for m in IDENTIFIER_RE.finditer(text.lower())))


@dataclass(frozen=True)
class Chunk:
    """One piece of one contract's document as of a day."""

    contract_id: str
    as_of: dt.date
    chunk_no: int  # position in the document, from 0
    section: str  # heading of the section the piece comes from (`Preamble` before the first `##`)
    text: str  # what is embedded, byte for byte
    content_hash: str  # `content_hash(text)`


@cache
def _section_splitter() -> Any:
    from langchain_text_splitters import ExperimentalMarkdownSyntaxTextSplitter

    return ExperimentalMarkdownSyntaxTextSplitter(headers_to_split_on=list(HEADERS), strip_headers=False)


@cache
def _piece_splitter(chunk_size: int, chunk_overlap: int) -> Any:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    return RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap,
                                          separators=["\n\n", "\n", ". ", " ", ""], keep_separator="end")


def split_sections(markdown: str) -> list[tuple[str, str]]:
    """(section name, text) per heading-delimited section, in document order, text unchanged but for
    trailing whitespace."""
    out = []
    for doc in _section_splitter().split_text(markdown):
        text = doc.page_content.strip()
        if not text:
            continue
        meta = doc.metadata
        out.append((meta.get("section") or (PREAMBLE if meta.get("title") else ""), text))
    return out


def _heading_of(text: str) -> str | None:
    first = text.split("\n", 1)[0]
    return first if first.startswith("#") else None


def _table_header(text: str) -> str | None:
    """The header row and separator row of the first Markdown table in `text`."""
    lines = text.split("\n")
    for i in range(len(lines) - 1):
        if lines[i].startswith("|") and re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", lines[i + 1].strip()):
            return f"{lines[i]}\n{lines[i + 1]}"
    return None


def split_section(text: str, *, chunk_size: int = CHUNK_SIZE, chunk_overlap: int = CHUNK_OVERLAP) -> list[str]:
    """A section as pieces of at most about `chunk_size` characters; continuation pieces repeat the
    heading (marked "continued") and, when they start inside a table, the table's header rows. Sections
    with a table are split without overlap (no row appears in two pieces)."""
    if len(text) <= chunk_size:
        return [text]
    heading = _heading_of(text)
    table_header = _table_header(text)
    body = text[len(heading):].lstrip("\n") if heading else text
    # Room for the context repeated on continuation pieces.
    context = len(heading or "") + len(" (continued)\n\n") + len(table_header or "") + 1
    size = max(chunk_size - context, chunk_size // 2)
    # Table rows are facts: a row repeated in two pieces would be counted twice by a reader that sums them.
    overlap = 0 if table_header else min(chunk_overlap, size // 2)
    pieces = [p.strip() for p in _piece_splitter(size, overlap).split_text(body) if p.strip()]
    out = []
    for i, piece in enumerate(pieces):
        prefix = ""
        if i == 0:
            prefix = f"{heading}\n\n" if heading else ""
        else:
            if heading:
                prefix = f"{heading} (continued)\n\n"
            if table_header and piece.startswith("|") and not piece.startswith(table_header):
                prefix += f"{table_header}\n"
        out.append(prefix + piece)
    return out


def chunk_document(contract_id: str, as_of: dt.date, markdown: str, *, chunk_size: int = CHUNK_SIZE,
                   chunk_overlap: int = CHUNK_OVERLAP) -> list[Chunk]:
    """The chunks of one contract document as of `as_of`, in document order."""
    chunks: list[Chunk] = []
    for section, text in split_sections(markdown):
        for piece in split_section(text, chunk_size=chunk_size, chunk_overlap=chunk_overlap):
            chunks.append(Chunk(contract_id, as_of, len(chunks), section, piece, content_hash(piece)))
    return chunks


def chunk_documents(documents: Mapping[str, str], as_of: dt.date, **kwargs: int) -> list[Chunk]:
    """Chunks of every document ({contract id: Markdown}), contracts in id order."""
    out: list[Chunk] = []
    for contract_id in sorted(documents):
        out.extend(chunk_document(contract_id, as_of, documents[contract_id], **kwargs))
    return out
