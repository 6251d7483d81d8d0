"""The document store: one folder per world and day, `<contract_id>.md|.pdf` plus `manifest.json`.

A day is written whole or not at all: the documents and the manifest go to a hidden temporary folder
beside the target, which is then renamed into place. A crash leaves at most a hidden `.tmp` or `.old`
folder (cleared by the next write of that day), never a half-written day under the day's name. A day
folder counts as complete only when its manifest is there, and the manifest lists a SHA-256 per file,
so a reader can tell unchanged documents across days, and tampering, by hash.

One writer per day: `write_day` holds `<contracts root>/.<day>.lock` (an flock) while it writes. A day
that is already complete with the same manifest and intact files is left as it is: between the two
renames of a swap the day is briefly absent, and another process (a parallel cell) may be reading it, so
an identical day is never swapped. Two processes building the same day therefore write it once.

The manifest holds no wall-clock time: the same world and day give a byte-identical folder.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError
from churn_assets.files import file_lock, fsync_dir, other_process_alive

if TYPE_CHECKING:  # only for annotations: `worlds rm` imports this module and needs no PDF library
    from contracts.render import RenderedContract

CONTRACTS_DIRNAME = "contracts"  # under <state>/worlds/<world>/ (docs/rules.md, "Per-world namespaces")
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1
MARKDOWN_SUFFIX = ".md"
PDF_SUFFIX = ".pdf"


class DocumentStoreError(UserFacingError):
    """A day's documents are missing or unreadable; the message names the folder."""


@dataclass(frozen=True)
class DocumentHashes:
    markdown_sha256: str
    pdf_sha256: str


@dataclass(frozen=True)
class DayManifest:
    """What a day folder holds: the world, the day, and the hashes of every contract's two files."""

    world_id: str
    day: dt.date
    documents: dict[str, DocumentHashes]  # contract id -> hashes, sorted by id

    def to_json(self) -> str:
        data = {
            "format": MANIFEST_FORMAT,
            "world_id": self.world_id,
            "day": self.day.isoformat(),
            "count": len(self.documents),
            "documents": {cid: {"markdown_sha256": h.markdown_sha256, "pdf_sha256": h.pdf_sha256}
                          for cid, h in sorted(self.documents.items())},
        }
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @property
    def sha256(self) -> str:
        """One hash of the whole day (a data version: equal iff every document is equal)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @classmethod
    def from_json(cls, text: str, where: Path | str) -> DayManifest:
        try:
            data: dict[str, Any] = json.loads(text)
            if data["format"] != MANIFEST_FORMAT:
                raise DocumentStoreError(f"{where}: manifest format {data['format']!r} is not {MANIFEST_FORMAT}")
            documents = {cid: DocumentHashes(h["markdown_sha256"], h["pdf_sha256"])
                         for cid, h in data["documents"].items()}
            return cls(str(data["world_id"]), dt.date.fromisoformat(data["day"]), dict(sorted(documents.items())))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise DocumentStoreError(f"{where}: manifest is malformed ({e})") from None


def manifest_of(world_id: str, day: dt.date, documents: Iterable[RenderedContract]) -> DayManifest:
    hashes = {d.contract_id: DocumentHashes(d.markdown_sha256, d.pdf_sha256) for d in documents}
    return DayManifest(world_id, day, dict(sorted(hashes.items())))


def day_dir(contracts_root: Path, day: dt.date) -> Path:
    """`<contracts_root>/<YYYY-MM-DD>`; `contracts_root` is `<state>/worlds/<world>/contracts`."""
    return Path(contracts_root) / day.isoformat()


# ---------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------


def write_day(target: Path, world_id: str, day: dt.date, documents: Iterable[RenderedContract]) -> DayManifest:
    """Write a day's documents to `target` atomically (replacing what was there); returns the manifest."""
    documents = list(documents)
    ids = [d.contract_id for d in documents]
    if len(set(ids)) != len(ids):
        raise DocumentStoreError(f"{target}: two documents share a contract id")
    for cid in ids:
        # Contract ids become file names: refuse anything that could leave the folder or hide a file.
        if not cid or "/" in cid or "\\" in cid or cid.startswith(".") or cid == MANIFEST_FILE:
            raise DocumentStoreError(f"{target}: contract id {cid!r} is not usable as a file name")
    target = Path(target)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    manifest = manifest_of(world_id, day, documents)
    with file_lock(parent / f".{target.name}.lock", what=f"the documents of {target}"):
        if _is_intact(target, manifest):
            return manifest
        _write_and_swap(target, documents, manifest)
    return manifest


def _is_intact(target: Path, manifest: DayManifest) -> bool:
    """Whether `target` is a complete day with exactly `manifest` and files that match it."""
    try:
        stored = read_day(target)
    except DocumentStoreError:
        return False
    return stored.manifest == manifest and stored.verify() == []


def _write_and_swap(target: Path, documents: list[RenderedContract], manifest: DayManifest) -> None:
    parent = target.parent
    _clear_leftovers(parent, target.name)
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging = parent / f".{target.name}.tmp-{token}"
    staging.mkdir()
    try:
        for doc in documents:
            (staging / f"{doc.contract_id}{MARKDOWN_SUFFIX}").write_bytes(doc.markdown)
            (staging / f"{doc.contract_id}{PDF_SUFFIX}").write_bytes(doc.pdf)
        # The manifest is written last: inside the staging folder too, "manifest present" means complete.
        (staging / MANIFEST_FILE).write_text(manifest.to_json())
        fsync_dir(staging)
        _swap_into_place(staging, target, token)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_into_place(staging: Path, target: Path, token: str) -> None:
    """Rename `staging` to `target`. A directory cannot be renamed over a non-empty one, so an existing
    day is first renamed aside and removed afterwards; between the two renames the day is absent (a
    reader sees "not materialized"), never a mix of old and new files."""
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{token}"
        target.rename(old)
    staging.rename(target)
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _clear_leftovers(parent: Path, name: str) -> None:
    """Remove hidden staging or replaced folders of `name` left by a crashed write (never those of a
    writer that is still running: their names carry its process id)."""
    for leftover in parent.glob(f".{name}.*-*"):
        pid = leftover.name.rsplit(".", 1)[-1].split("-")[1] if "-" in leftover.name else ""
        if leftover.is_dir() and not (pid.isdigit() and other_process_alive(int(pid))):
            shutil.rmtree(leftover, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredDay:
    """A complete day folder on disk."""

    path: Path
    manifest: DayManifest

    @property
    def contract_ids(self) -> list[str]:
        return list(self.manifest.documents)

    def markdown_path(self, contract_id: str) -> Path:
        return self.path / f"{contract_id}{MARKDOWN_SUFFIX}"

    def pdf_path(self, contract_id: str) -> Path:
        return self.path / f"{contract_id}{PDF_SUFFIX}"

    def markdown(self, contract_id: str) -> str:
        return self._read(self.markdown_path(contract_id)).decode("utf-8")

    def pdf(self, contract_id: str) -> bytes:
        return self._read(self.pdf_path(contract_id))

    def _read(self, path: Path) -> bytes:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise DocumentStoreError(f"{path} is missing (listed in {self.path / MANIFEST_FILE})") from None

    def verify(self) -> list[str]:
        """Problems of the folder against its manifest: missing, changed or unlisted files."""
        problems = []
        listed = set()
        for cid, hashes in self.manifest.documents.items():
            for path, expected in ((self.markdown_path(cid), hashes.markdown_sha256),
                                   (self.pdf_path(cid), hashes.pdf_sha256)):
                listed.add(path.name)
                if not path.exists():
                    problems.append(f"{cid}: {path.name} is missing")
                elif hashlib.sha256(path.read_bytes()).hexdigest() != expected:
                    problems.append(f"{cid}: {path.name} differs from the manifest's hash")
        for extra in sorted(p.name for p in self.path.iterdir() if p.name != MANIFEST_FILE and p.name not in listed):
            problems.append(f"{extra} is not listed in the manifest")
        return problems


def read_day(path: Path) -> StoredDay:
    """The day folder at `path`; `DocumentStoreError` unless it is complete (has its manifest)."""
    path = Path(path)
    manifest_path = path / MANIFEST_FILE
    try:
        text = manifest_path.read_text()
    except FileNotFoundError:
        raise DocumentStoreError(f"no documents at {path} (no {MANIFEST_FILE}): the day is not materialized"
                                 ) from None
    return StoredDay(path, DayManifest.from_json(text, manifest_path))


def stored_days(contracts_root: Path) -> list[dt.date]:
    """The complete day folders under `contracts_root`, in calendar order."""
    root = Path(contracts_root)
    if not root.is_dir():
        return []
    days = []
    for p in root.iterdir():
        if p.name.startswith(".") or not (p / MANIFEST_FILE).exists():
            continue
        try:
            days.append(dt.date.fromisoformat(p.name))
        except ValueError:
            continue
    return sorted(days)


# ---------------------------------------------------------------------------------------------------
# Comparing days
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DayChanges:
    """How a day's documents differ from another day's (by content hash)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: int

    @property
    def touched(self) -> tuple[str, ...]:
        """Every contract whose document is new, gone or different."""
        return tuple(sorted((*self.added, *self.removed, *self.changed)))


def compare_hashes(previous: dict[str, str], current: dict[str, str]) -> DayChanges:
    """Compare {contract id: hash} maps of two days."""
    added = tuple(sorted(current.keys() - previous.keys()))
    removed = tuple(sorted(previous.keys() - current.keys()))
    common = current.keys() & previous.keys()
    changed = tuple(sorted(c for c in common if current[c] != previous[c]))
    return DayChanges(added, removed, changed, len(common) - len(changed))


def compare_days(previous: DayManifest, current: DayManifest) -> DayChanges:
    """A document changed when its Markdown or its PDF hash differs."""
    def key(m: DayManifest) -> dict[str, str]:
        return {cid: f"{h.markdown_sha256}:{h.pdf_sha256}" for cid, h in m.documents.items()}
    return compare_hashes(key(previous), key(current))
