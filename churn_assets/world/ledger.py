"""The ledger: append-only JSONL, hash-chained (format 2), with a manifest; and its verifying loader.

Format 2 record (a superset of the ChurnBench v1 record `{seq, at, kind, entity_type, entity_id,
payload}`): plus `recorded_at` (transaction time on the simulated clock), `prev_hash` and `hash`.
`hash` = SHA-256 of the canonical JSON (UTF-8, sorted keys, no spaces) of the record without `hash`.
Lines are written in canonical JSON, so the verifier hashes the line's own bytes with the hash field
cut out: a changed byte anywhere (even a re-formatting) breaks the chain.

Format 1 (the reference's ledgers) has no hashes and no `recorded_at`; it loads through the same
loader, checked against its own payload schemas, and is reported as unverified.

Meaning (format 2): a chain proves nothing about whether the events can happen. The writer checks each event
against the world the events before it made (`meaning.MeaningChecker`: the fold's invariants, references across
entities) and the manifest records `meaning_check` = {version, head_hash, key_id, mac} when it closes; `churnbench
ledger verify` runs the same check over a ledger from disk and records it. The record is sealed: `mac` is an HMAC of
the check's version and the head hash under the seal key of the state folder the process works in
(`seal_key.current_key`, issue 46), so a record typed into a manifest by hand, or made under another folder's key,
is not one. Every loader (`LedgerStream`, `load_ledger`) refuses a format-2 ledger whose manifest does not record a
passed check of today's `meaning.CHECK_VERSION` for its head hash, sealed under that key: a cheap look at the
manifest, not a second pass over the events. A ledger brought from another state folder is checked again here
(`churnbench ledger verify`): its record says that folder's owner checked it, not this one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gzip
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from churn_assets.canonical import canonical_json
from churn_assets.errors import UserFacingError
from churn_assets.files import atomic_write_text, temporary_name
from churn_assets.seal_key import SealKey, current_key
from churn_assets.unique_keys import load_json
from churn_assets.world.events import SCHEMAS_BY_FORMAT, payload_error, round_payload
from churn_assets.world.meaning import CHECK_VERSION, MeaningChecker, MeaningError
from churn_assets.world.packed import PackedRecords

FORMAT_VERSION = 2
LEDGER_FILE = "ledger.jsonl"
MANIFEST_FILE = "manifest.json"
GENESIS_HASH = "0" * 64
_SECONDS_PER_DAY = 86_400

V1_FIELDS = ("seq", "at", "kind", "entity_type", "entity_id", "payload")
V2_FIELDS = (*V1_FIELDS, "recorded_at", "prev_hash", "hash")


class LedgerError(UserFacingError, ValueError):
    """The ledger is invalid; `line` (1-based) and `path` name the place when known."""

    def __init__(self, message: str, *, path: Path | str | None = None, line: int | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}" + (f", line {line}" if line is not None else "")
        elif line is not None:
            where = f"line {line}"
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True, slots=True)
class Event:
    """One ledger event as the simulator emits it (before sequencing and hashing)."""

    at: dt.date
    kind: str
    entity_type: str
    entity_id: str
    payload: dict[str, Any]


def _hash_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def recorded_at(day: dt.date, position: int) -> str:
    """Transaction time on the simulated clock: the event's day plus its position in the day, as seconds."""
    if position >= _SECONDS_PER_DAY:
        raise LedgerError(f"more than {_SECONDS_PER_DAY} events on {day}: the simulated clock has no room")
    h, rem = divmod(position, 3600)
    m, s = divmod(rem, 60)
    return f"{day.isoformat()}T{h:02d}:{m:02d}:{s:02d}Z"


# ----------------------------------------------------------------------------------------------
# Writing (append-only: there is no update or delete path)
# ----------------------------------------------------------------------------------------------


class LedgerWriter:
    """Appends events to a format-2 ledger; `close()` writes the manifest that seals it.

    The ledger file is written to a temporary name of this writer's own and renamed on close, so a crash
    never leaves a ledger that looks complete, and two processes generating the same world at once each
    write their own file (the same bytes: generation is deterministic) instead of one shared `.partial`.
    """

    def __init__(self, out_dir: Path, world_config: dict[str, Any], world_id: str, config_hash: str,
                 key: SealKey | None = None) -> None:
        self.out_dir = Path(out_dir)
        self._key = key  # seals the manifest's meaning check; None: the state folder's (`current_key`) at close
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._tmp = temporary_name(self.out_dir / LEDGER_FILE)
        self._fh = self._tmp.open("w", encoding="utf-8", newline="\n")
        self._world_config = world_config
        self._world_id = world_id
        self._config_hash = config_hash
        self._seq = 0
        self._prev = GENESIS_HASH
        self._day: dt.date | None = None
        self._first_day: dt.date | None = None
        self._position = 0
        self._counts: Counter[str] = Counter()
        self._schemas = SCHEMAS_BY_FORMAT[FORMAT_VERSION]
        self._meaning = MeaningChecker()

    def append(self, event: Event) -> None:
        kind = self._schemas.get(event.kind)
        if kind is None:
            raise LedgerError(f"unknown event kind {event.kind!r}")
        if self._day is not None and event.at < self._day:
            raise LedgerError(f"event on {event.at} after {self._day}: days may not go backwards")
        if event.at != self._day:
            self._day, self._position = event.at, 0
            if self._first_day is None:
                self._first_day = event.at
        payload = round_payload(kind, event.payload)
        problem = payload_error(kind, payload)
        if problem:
            raise LedgerError(problem)
        record = {
            "seq": self._seq,
            "at": event.at.isoformat(),
            "kind": event.kind,
            "entity_type": event.entity_type,
            "entity_id": event.entity_id,
            "payload": payload,
            "recorded_at": recorded_at(event.at, self._position),
            "prev_hash": self._prev,
        }
        try:
            self._meaning.check(record)
        except MeaningError as e:
            raise LedgerError(f"impossible event: {e}", line=self._seq + 1) from None
        body = canonical_json(record)
        digest = _hash_hex(body.encode())
        # Insert the hash at its sorted place ("entity_type" < "hash" < "kind") instead of serializing
        # twice. Inside JSON strings quotes are escaped, so `,"kind":"` only occurs as the top-level key.
        cut = body.index(',"kind":"')
        self._fh.write(f'{body[:cut]},"hash":"{digest}"{body[cut:]}\n')
        self._prev = digest
        self._seq += 1
        self._position += 1
        self._counts[event.kind] += 1

    def extend(self, events: Iterable[Event]) -> None:
        for e in events:
            self.append(e)

    def close(self) -> LedgerManifest:
        self._fh.close()
        manifest = LedgerManifest(
            format_version=FORMAT_VERSION,
            count=self._seq,
            head_hash=self._prev,
            first_day=self._first_day.isoformat() if self._first_day else None,
            last_day=self._day.isoformat() if self._day else None,
            counts_per_kind=dict(sorted(self._counts.items())),
            world_id=self._world_id,
            world_config_hash=self._config_hash,
            world_config=self._world_config,
            meaning_check=meaning_record(self._prev, self._key or current_key()) if self._seq else None,
        )
        self._tmp.replace(self.out_dir / LEDGER_FILE)
        atomic_write_text(self.out_dir / MANIFEST_FILE, json.dumps(manifest.to_dict(), indent=2, sort_keys=True) + "\n")
        return manifest

    def abort(self) -> None:
        self._fh.close()
        self._tmp.unlink(missing_ok=True)


MEANING_SEAL_DOMAIN = "ledger-meaning-check"  # the MAC's domain: no seal of another kind passes as this one


def meaning_record(head_hash: str, key: SealKey) -> dict[str, Any]:
    """What a manifest records once the events up to `head_hash` passed the meaning check, sealed with `key`."""
    return {"version": CHECK_VERSION, "head_hash": head_hash, "key_id": key.key_id,
            "mac": key.mac(MEANING_SEAL_DOMAIN, str(CHECK_VERSION), head_hash)}


def meaning_problem(manifest: LedgerManifest, key: SealKey) -> str | None:
    """None when the manifest records a passed meaning check of today's version for its own head, sealed with
    `key`; else what the manifest records instead, as the end of a sentence."""
    record, head = manifest.meaning_check or {}, manifest.head_hash
    if head is None or record.get("version") != CHECK_VERSION or record.get("head_hash") != head:
        return f"records no passed meaning check (version {CHECK_VERSION}) for the ledger's head {(head or '')[:12]}"
    if "mac" not in record:
        return "records its meaning check without a seal (an older churnbench's record, or one added by hand)"
    if record.get("key_id") != key.key_id:
        return (f"records its meaning check under another seal key (key changed: {record.get('key_id')}, this state "
                f"folder's is {key.key_id})")
    if not key.verifies(str(record["mac"]), MEANING_SEAL_DOMAIN, str(CHECK_VERSION), head):
        return "records a meaning check whose seal does not verify under this state folder's key (forged or edited)"
    return None


def meaning_checked(manifest: LedgerManifest, key: SealKey) -> bool:
    return meaning_problem(manifest, key) is None


@dataclass(frozen=True)
class LedgerManifest:
    format_version: int
    count: int
    head_hash: str | None
    first_day: str | None
    last_day: str | None
    counts_per_kind: dict[str, int]
    world_id: str | None = None
    world_config_hash: str | None = None
    world_config: dict[str, Any] | None = None
    # {"version": meaning.CHECK_VERSION, "head_hash": ...}: the events' meaning was checked up to that head
    meaning_check: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"meaning_check": self.meaning_check} if self.meaning_check is not None else {}),
            "format_version": self.format_version,
            "count": self.count,
            "head_hash": self.head_hash,
            "first_day": self.first_day,
            "last_day": self.last_day,
            "counts_per_kind": self.counts_per_kind,
            "world_id": self.world_id,
            "world_config_hash": self.world_config_hash,
            "world_config": self.world_config,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: Path | str) -> LedgerManifest:
        try:
            return cls(
                format_version=int(d["format_version"]),
                count=int(d["count"]),
                head_hash=d.get("head_hash"),
                first_day=d.get("first_day"),
                last_day=d.get("last_day"),
                counts_per_kind=dict(d.get("counts_per_kind") or {}),
                world_id=d.get("world_id"),
                world_config_hash=d.get("world_config_hash"),
                world_config=d.get("world_config"),
                meaning_check=dict(d["meaning_check"]) if d.get("meaning_check") is not None else None,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise LedgerError(f"manifest is malformed ({e})", path=path) from None


# ----------------------------------------------------------------------------------------------
# Reading and verifying
# ----------------------------------------------------------------------------------------------


@dataclass
class LoadedLedger:
    """A ledger read through the verifying loader: events in order plus what was checked."""

    path: Path
    format_version: int
    verified: bool  # True when the hash chain and manifest were checked (format 2)
    records: Sequence[dict[str, Any]]  # a list, or `PackedRecords` (`load_ledger(..., packed=True)`)
    manifest: LedgerManifest | None
    counts_per_kind: dict[str, int] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def head_hash(self) -> str | None:
        if not self.records:
            return None
        if isinstance(self.records, PackedRecords):  # holds no chain fields; the manifest's head was checked
            return self.manifest.head_hash if self.verified and self.manifest is not None else None
        return self.records[-1].get("hash")

    @property
    def first_day(self) -> str | None:
        return self.records[0]["at"] if self.records else None

    @property
    def last_day(self) -> str | None:
        return self.records[-1]["at"] if self.records else None


def resolve_ledger_paths(path: str | Path) -> tuple[Path, Path | None]:
    """(ledger file, manifest or None) for a ledger directory, a .jsonl or a .jsonl.gz file."""
    p = Path(path)
    if p.is_dir():
        ledger = p / LEDGER_FILE
        if not ledger.exists():
            raise LedgerError(f"no {LEDGER_FILE} in this directory", path=p)
        manifest = p / MANIFEST_FILE
        return ledger, manifest if manifest.exists() else None
    if not p.exists():
        raise LedgerError("file not found", path=p)
    manifest = p.parent / MANIFEST_FILE
    if p.name == LEDGER_FILE and manifest.exists():
        return p, manifest
    return p, None


def _open_binary(path: Path) -> BinaryIO:
    if path.suffix == ".gz":
        return cast(BinaryIO, gzip.open(path, "rb"))
    return path.open("rb")


def _text_lines(path: Path) -> Generator[tuple[int, str], None, None]:
    """(1-based line number, line) of a ledger file, each line decoded as UTF-8 on its own, so that a byte
    that is not UTF-8 is refused with its line (a decoding error of the whole stream names none)."""
    with _open_binary(path) as fh:
        try:
            for lineno, raw in enumerate(fh, start=1):
                try:
                    yield lineno, raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise LedgerError(f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); a "
                                      "ledger is UTF-8 JSON lines", path=path, line=lineno) from None
        except (OSError, EOFError) as e:  # gzip: not a gzip file, or cut short
            raise LedgerError(f"cannot be read ({type(e).__name__}: {e})", path=path) from None


class LedgerStream:
    """A ledger read through the verifying checks one record at a time, holding none: iterate it once. The
    checks are `load_ledger`'s (each line as it is read; truncation and the head hash when the last line has
    been read, so a stream consumed to the end is verified). After iterating, `format_version` and `count`
    say what was read. A 100x world's verify and fold walk stream; what needs every record at once (gold,
    exposure) loads them."""

    def __init__(self, path: str | Path, *, progress: Callable[[int], None] | None = None,
                 require_meaning: bool = True, key: SealKey | None = None) -> None:
        self.ledger_path, manifest_path = resolve_ledger_paths(path)
        self.progress = progress
        self.manifest: LedgerManifest | None = None
        if manifest_path is not None:
            try:
                text = manifest_path.read_bytes().decode("utf-8")
                self.manifest = LedgerManifest.from_dict(load_json(text, str(manifest_path)), manifest_path)
            except json.JSONDecodeError as e:
                raise LedgerError(f"manifest is not valid JSON ({e.msg})", path=manifest_path) from None
            except UnicodeDecodeError:
                raise LedgerError("manifest is not UTF-8 text", path=manifest_path) from None
            if self.manifest.format_version not in SCHEMAS_BY_FORMAT:
                raise LedgerError(f"unsupported format_version {self.manifest.format_version}", path=manifest_path)
            problem = (meaning_problem(self.manifest, key or current_key())
                       if require_meaning and self.manifest.format_version == 2 else None)
            if problem:
                where = manifest_path.parent if manifest_path.name == MANIFEST_FILE else manifest_path
                raise LedgerError(f"the manifest {problem}: check it with `churnbench ledger verify {where}`, which "
                                  "records it (a state folder's worlds: `churnbench migrate`)", path=manifest_path)
        self.format_version: int | None = self.manifest.format_version if self.manifest else None
        self.count = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        manifest, ledger_path, progress = self.manifest, self.ledger_path, self.progress
        last: dict[str, Any] | None = None
        lines = _text_lines(ledger_path)
        with contextlib.closing(lines):  # the file is closed when a line is refused, too
            _, first = next(lines, (0, ""))
            if not first:
                # Every world has day-0 events (vendors, products, cost centers): an empty file was truncated.
                said = f" but the manifest says {manifest.count} events" if manifest is not None and manifest.count \
                    else ""
                raise LedgerError(f"empty ledger (no events){said}: truncated, or not a ledger", path=ledger_path)
            if self.format_version is None:
                self.format_version = _sniff_format(first, ledger_path)
            check = _LineChecker(self.format_version, ledger_path).check
            last = check(first, 1)
            self.count = 1
            yield last
            for lineno, line in lines:
                last = check(line, lineno)
                self.count = lineno
                yield last
                if progress is not None and lineno % 20_000 == 0:
                    progress(lineno)
            if progress is not None:
                progress(self.count)
        if self.format_version == 2:
            if manifest is None:
                raise LedgerError(f"format-2 ledger without {MANIFEST_FILE}: cannot check for truncation",
                                  path=ledger_path)
            if manifest.count != self.count:
                raise LedgerError(
                    f"manifest says {manifest.count} events but the file has {self.count} "
                    "(truncated or appended)",
                    path=ledger_path, line=self.count)
            head = last["hash"]
            if manifest.head_hash != head:
                raise LedgerError(f"head hash {head[:12]}… differs from the manifest's "
                                  f"{(manifest.head_hash or '')[:12]}…", path=ledger_path, line=self.count)


def load_ledger(
    path: str | Path,
    *,
    progress: Callable[[int], None] | None = None,
    packed: bool = False,
    require_meaning: bool = True,
    key: SealKey | None = None,
) -> LoadedLedger:
    """Read and verify a ledger. Raises `LedgerError` naming the file and the 1-based line.

    Refuses: malformed JSON, missing or mistyped fields, an unknown kind, non-monotonic or duplicate
    `seq`, days going backwards, payloads that violate their schema, and (format 2) a broken hash
    chain or a truncated ledger (count or head hash differing from the manifest).

    `packed`: hold the verified records as `PackedRecords` (compact JSON without the chain fields, parsed on
    each pass: a tenth of the memory), for a large world's passes over its ledger (the exposure-only path).
    `require_meaning=False`: load a format-2 ledger whose manifest records no passed meaning check (what
    `check_meaning` does before it checks one). `key`: the seal key the record must be sealed with (default: the
    state folder's, `seal_key.current_key`).
    """
    stream = LedgerStream(path, progress=progress, require_meaning=require_meaning, key=key)
    counts: Counter[str] = Counter()
    records: list[dict[str, Any]] | PackedRecords
    if packed:
        records = PackedRecords()
        for rec in stream:
            counts[rec["kind"]] += 1
            records.append(rec)
    else:
        records = list(stream)
        counts.update(r["kind"] for r in records)
    fmt = stream.format_version or FORMAT_VERSION
    return LoadedLedger(stream.ledger_path, fmt, fmt == 2, records, stream.manifest, dict(sorted(counts.items())))


@dataclass(frozen=True)
class MeaningChecked:
    """What `check_meaning` found: the events checked, the head, and whether the manifest now records it."""

    count: int
    format_version: int
    head_hash: str | None
    recorded: bool  # False: the check passed but the manifest could not be written (a read-only folder)
    already: bool  # the manifest recorded it before


def check_meaning(path: str | Path, *, progress: Callable[[int], None] | None = None,
                  record: bool = True, key: SealKey | None = None) -> MeaningChecked:
    """Read a ledger through every check, the meaning check included (format 2), in one pass holding no
    records; raise `LedgerError` naming the line of the first impossible event. Then record the passed check in
    the manifest (`record`), sealed with `key` (default: the state folder's). A record the manifest had is trusted
    only when it verifies under that key: the events are checked either way. Format 1 is read with its own checks
    and has no meaning check."""
    stream = LedgerStream(path, progress=progress, require_meaning=False)
    checker = MeaningChecker()
    head = None
    for n, rec in enumerate(stream, start=1):
        if stream.format_version == 2:
            try:
                checker.check(rec)
            except MeaningError as e:
                raise LedgerError(f"impossible event: {e}", path=stream.ledger_path, line=n) from None
            head = rec["hash"]
    manifest = stream.manifest
    if stream.format_version != 2 or manifest is None or head is None:
        return MeaningChecked(stream.count, stream.format_version or 1, head, False, False)
    key = key or current_key()
    if meaning_checked(manifest, key):
        return MeaningChecked(stream.count, 2, head, True, True)
    recorded = False
    if record:
        try:
            _record_meaning(stream.ledger_path.parent, manifest, head, key)
            recorded = True
        except OSError:
            recorded = False
    return MeaningChecked(stream.count, 2, head, recorded, False)


def reseal_meaning(path: str | Path, old: SealKey, new: SealKey) -> tuple[bool, str | None]:
    """A key rotation's step: the manifest's meaning check, sealed under `old`, sealed again under `new`. (True,
    None) when it was; (False, None) when it is under `new` already or the ledger has none (format 1); (False,
    what is wrong) when it does not verify under `old`: it is left as it is (a record never gains a seal it did not
    have). Reads the manifest only: the loaders check that it matches the ledger."""
    manifest = LedgerStream(path, require_meaning=False).manifest
    if manifest is None or manifest.format_version != 2 or meaning_checked(manifest, new):
        return False, None
    problem = meaning_problem(manifest, old)
    if problem or manifest.head_hash is None:
        return False, f"the manifest {problem}"
    _record_meaning(resolve_ledger_paths(path)[0].parent, manifest, manifest.head_hash, new)
    return True, None


def _record_meaning(folder: Path, manifest: LedgerManifest, head: str, key: SealKey) -> None:
    updated = dataclasses.replace(manifest, meaning_check=meaning_record(head, key))
    atomic_write_text(folder / MANIFEST_FILE, json.dumps(updated.to_dict(), indent=2, sort_keys=True) + "\n")


def _sniff_format(first_line: str, path: Path) -> int:
    try:
        rec = load_json(first_line, f"{path}, line 1")
    except json.JSONDecodeError as e:
        raise LedgerError(f"malformed JSON ({e.msg})", path=path, line=1) from None
    if isinstance(rec, dict) and "hash" in rec:
        return 2
    return 1


_raw_decode = json.JSONDecoder().raw_decode
_sha256 = hashlib.sha256


class _LineChecker:
    """Stateful per-line validation: fields, types, kinds, payloads, ordering and the hash chain."""

    def __init__(self, fmt: int, path: Path) -> None:
        self.fmt = fmt
        self.path = path
        self.schemas = SCHEMAS_BY_FORMAT[fmt]
        self.fields = V2_FIELDS if fmt == 2 else V1_FIELDS
        self.field_set = frozenset(self.fields)
        self.prev_seq = -1
        self.prev_at = ""
        self.prev_hash = GENESIS_HASH

    def fail(self, msg: str, lineno: int) -> LedgerError:
        return LedgerError(msg, path=self.path, line=lineno)

    def check(self, line: str, lineno: int) -> dict[str, Any]:
        try:
            rec, end = _raw_decode(line)
        except json.JSONDecodeError as e:
            raise self.fail(f"malformed JSON ({e.msg})", lineno) from None
        if end != len(line) and line[end:].strip():
            raise self.fail("malformed JSON (extra data after the record)", lineno)
        if type(rec) is not dict:
            raise self.fail("record must be a JSON object", lineno)
        if rec.keys() != self.field_set:
            missing = [f for f in self.fields if f not in rec]
            extra = [f for f in rec if f not in self.fields]
            detail = "; ".join(p for p in (
                f"missing {', '.join(missing)}" if missing else "",
                f"unexpected {', '.join(extra)}" if extra else "") if p)
            raise self.fail(f"record fields: {detail}", lineno)
        seq, at, kind_name = rec["seq"], rec["at"], rec["kind"]
        if type(seq) is not int:
            raise self.fail(f"seq must be an integer (got {seq!r})", lineno)
        if seq <= self.prev_seq:
            what = "duplicate" if seq == self.prev_seq else "non-monotonic"
            raise self.fail(f"{what} seq {seq} after {self.prev_seq}", lineno)
        if self.fmt == 2 and seq != self.prev_seq + 1:
            raise self.fail(f"seq {seq} skips after {self.prev_seq} (an event is missing)", lineno)
        if not isinstance(at, str) or len(at) != 10:
            raise self.fail(f"at must be an ISO day (got {at!r})", lineno)
        if at != self.prev_at:
            try:
                dt.date.fromisoformat(at)
            except ValueError:
                raise self.fail(f"at must be an ISO day (got {at!r})", lineno) from None
            if at < self.prev_at:
                raise self.fail(f"day {at} goes backwards after {self.prev_at}", lineno)
        for name in ("kind", "entity_type", "entity_id"):
            if type(rec[name]) is not str or not rec[name]:
                raise self.fail(f"{name} must be a non-empty string (got {rec[name]!r})", lineno)
        kind = self.schemas.get(kind_name)
        if kind is None:
            raise self.fail(f"unknown event kind {kind_name!r}", lineno)
        if rec["entity_type"] != kind.entity_type:
            raise self.fail(f"{kind_name} must have entity_type {kind.entity_type!r} "
                            f"(got {rec['entity_type']!r})", lineno)
        problem = payload_error(kind, rec["payload"])
        if problem:
            raise self.fail(problem, lineno)
        if self.fmt == 2:
            self._check_chain(rec, line, lineno)
        self.prev_seq, self.prev_at = seq, at
        return rec

    def _check_chain(self, rec: dict[str, Any], line: str, lineno: int) -> None:
        ra = rec["recorded_at"]
        if not isinstance(ra, str) or not ra.startswith(rec["at"]):
            raise self.fail(f"recorded_at {ra!r} is not on the event's day {rec['at']}", lineno)
        if rec["prev_hash"] != self.prev_hash:
            raise self.fail(f"prev_hash {str(rec['prev_hash'])[:12]}… does not match the previous event's "
                            f"hash {self.prev_hash[:12]}… (chain broken: an event was removed or reordered)",
                            lineno)
        digest = rec["hash"]
        # Canonical lines put "hash" between "entity_type" and "kind" (sorted keys); quotes inside
        # JSON strings are escaped, so the first unescaped `,"hash":"` is the top-level field.
        if type(digest) is not str or len(digest) != 64:
            raise self.fail("hash field missing or malformed", lineno)
        idx = line.find(',"hash":"')
        if idx < 0 or line[idx + 9:idx + 73] != digest:
            raise self.fail("hash mismatch: the line is not in canonical form", lineno)
        cut = line[:idx] + line[idx + 74:].rstrip("\n")
        if _sha256(cut.encode()).hexdigest() != digest:
            raise self.fail("hash mismatch: the event was altered (or re-formatted) after it was written",
                            lineno)
        self.prev_hash = digest


def file_sha256(path: Path) -> str:
    """SHA-256 of the (uncompressed) ledger bytes."""
    h = hashlib.sha256()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
