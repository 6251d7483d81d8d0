"""Verified ledger records held packed: one compact JSON line per record, parsed again on each pass.

A record parsed into Python dicts costs about 2 KiB (the dicts, and a string object per id, day and hash), so a
100x world's 5.7M records take some 11 GiB: more than the exposure-only path of a large world may hold. What it
needs is several passes over the records in order (folds at a few days, the answer-change walk), not random
access to many dicts at once. `PackedRecords` keeps each verified record as the bytes of its canonical JSON
without the chain fields (`hash`, `prev_hash`, `recorded_at`: checked when the ledger was read, and read by
nothing downstream of a fold), about 200 bytes, and parses a line when a pass reaches it (orjson: about 1 us).

Parsed records share one string object per distinct string value (ids, days, kinds), as the sub-states built
from them keep those strings: a fold's consumption index holds 100x world's 5.4M usage records, and fresh
strings per record would take more memory than the packed lines themselves.

A `PackedRecords` is a read-only `Sequence` of dicts: every fold, gold resolver and rate measurement takes it
where they take a list of records. Each access returns a new dict (mutating it changes nothing held).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import orjson

from churn_assets.canonical import canonical_json

# The fields of a format-2 record that a fold reads; the chain fields are left out (see the module doc).
PACKED_FIELDS = ("seq", "at", "kind", "entity_type", "entity_id", "payload")


class PackedRecords(Sequence[dict[str, Any]]):
    """Records in ledger order, each held as compact JSON bytes (see the module doc)."""

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        self._strings: dict[str, str] = {}  # one object per distinct string value of parsed records
        self.head_hash: str | None = None  # the chain's head: the last record's `hash` (None without a chain)

    def append(self, record: dict[str, Any]) -> None:
        """Add a verified record (only `PACKED_FIELDS` are kept), as canonical JSON: not `orjson.dumps`, whose
        bytes keep a 4 KiB allocation each (measured: 4 KiB a line against 225 bytes)."""
        self._lines.append(canonical_json({k: record[k] for k in PACKED_FIELDS if k in record}).encode())
        self.head_hash = record.get("hash")

    def __len__(self) -> int:
        return len(self._lines)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self._parse(line) for line in self._lines[index]]
        return self._parse(self._lines[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        parse = self._parse
        for line in self._lines:
            yield parse(line)

    def content_digest(self) -> str:
        """A digest of the packed lines (what `records_key` keys records without a chain by)."""
        return hashlib.blake2b(b"\n".join(self._lines), digest_size=16).hexdigest()

    def _parse(self, line: bytes) -> dict[str, Any]:
        rec: dict[str, Any] = orjson.loads(line)
        strings = self._strings
        for key in ("at", "kind", "entity_type", "entity_id"):
            value = rec[key]
            rec[key] = strings.setdefault(value, value)
        payload = rec["payload"]
        for key, value in payload.items():
            if type(value) is str:
                payload[key] = strings.setdefault(value, value)
        return rec


def packed(records: Sequence[dict[str, Any]]) -> PackedRecords:
    """`records` packed (a test seam; `load_ledger(..., packed=True)` packs while it reads)."""
    out = PackedRecords()
    for rec in records:
        out.append(rec)
    return out


def records_key(records: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
    """A value that identifies a ledger's records, for the caches of `churn_assets/memo.py`: equal keys, equal
    records. With a hash chain (format 2, as the verifying loader hands them out, list or packed): the count and
    the head's hash, which commits to every record before it (O(1)). Without one (format 1, records built in a
    test): a digest of the content (one pass; what is cached on it costs many). Never the object's identity: its
    `id` is reused once it is freed."""
    if not records:
        return ("content", 0, "")
    if isinstance(records, PackedRecords):
        if records.head_hash is not None:
            return ("chain", len(records), records.head_hash)
        return ("content", len(records), records.content_digest())
    head = records[-1].get("hash")
    if isinstance(head, str):
        return ("chain", len(records), head)
    digest = hashlib.blake2b(orjson.dumps(list(records), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
                                         default=str), digest_size=16)
    return ("content", len(records), digest.hexdigest())
