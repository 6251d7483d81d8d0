"""Seals of results folders: a MAC of every results file under the state folder's key, recorded outside the folder
when a run finishes (issue 35; keyed since issue 46, `seal_key.py`).

A run's folder (`results.py`: the first answering, a retry `__retry<N>`, or any other folder of an experiment)
is sealed the same way, whatever its name: `seal_folder(run_dir, key)` gives, per file of `SEALED_FILES` it holds,
HMAC-SHA256 under the key of (folder name, file name, SHA-256 of the file), with the key's id:

    {"alg": "hmac-sha256", "key_id": "<16 hex>", "files": {"tasks.jsonl": "<mac hex>", ...}}

The folder's name is in every MAC, so a seal moved to another run's row does not hold either. The runner's catalog
records the seal in the run's row (`catalog.RunCatalog.complete`, column `seal`, one entry per folder name, so a
retry's seal joins the first folder's) and `eval_run` in its materialization metadata (`seal`); `verify-results`
checks the files against both before anything else (`broken_seal`) and names every file that changed, appeared or
went missing. A seal under another key id is `KeyChanged` ("key changed"), never confirmed.

What a seal proves: the folder's files are byte for byte what the run wrote, unless whoever edited them could read
the key (the state folder's owner, root, or a worker given the key). Someone who can only write the database can
rewrite the catalog row and Dagster's metadata but cannot make a MAC that holds. It proves nothing about whether
what the run wrote was right (the verifiers' other modes look at that).

Before issue 46 a seal was the plain SHA-256 of each file (`{name: sha256}`, `plain_seal`): `churnbench migrate`
re-seals each such seal under the key once, if the files still match it (`reseal`), and reports the others.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from churn_assets.evaluation.results import IDENTITY_FILE, STALE_FILE, SUMMARY_FILE, TASKS_FILE, TIMINGS_FILE
from churn_assets.seal_key import MAC_ALG, KeyChanged, SealKey

SEALED_FILES = (TASKS_FILE, SUMMARY_FILE, STALE_FILE, IDENTITY_FILE, TIMINGS_FILE)

Seal = dict[str, Any]  # {"alg", "key_id", "files": {file name -> MAC hex}}; before issue 46 {file name -> SHA-256}
SEAL_METADATA = "seal"  # the `eval_run` materialization's metadata entry: {folder name: Seal}
SEAL_DOMAIN = "churnbench results seal v1"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def plain_seal(run_dir: Path) -> dict[str, str]:
    """The SHA-256 of each results file the folder holds (the seal of before issue 46; what anyone can remake)."""
    return {name: file_sha256(run_dir / name) for name in SEALED_FILES if (run_dir / name).is_file()}


def seal_folder(run_dir: Path, key: SealKey, folder_name: str | None = None) -> Seal:
    """The folder's seal under `key`; `folder_name`: the name the run wrote it under (default: its own)."""
    name = folder_name or run_dir.name
    return {"alg": MAC_ALG, "key_id": key.key_id,
            "files": {f: key.mac(SEAL_DOMAIN, name, f, h) for f, h in plain_seal(run_dir).items()}}


def is_keyed(seal: Mapping[str, Any]) -> bool:
    return seal.get("alg") == MAC_ALG and isinstance(seal.get("files"), Mapping) and "key_id" in seal


def key_changed(seal: Mapping[str, Any], key: SealKey) -> str | None:
    """The sentence saying a keyed seal was made under another key (None: it is this key's, or not keyed)."""
    if is_keyed(seal) and seal["key_id"] != key.key_id:
        return (f"key changed: sealed under key id {str(seal['key_id'])[:16]}, this state folder's key is "
                f"{key.key_id} (a seal under another key vouches for nothing here; see docs/guarantees.md)")
    return None


def broken_seal(run_dir: Path, seal: Mapping[str, Any], key: SealKey | None = None,
                folder_name: str | None = None) -> list[str]:
    """What differs between a folder's files and its seal, one sentence per file (empty: the seal holds).

    A keyed seal is checked under `key` (it must be of `key`'s id: `key_changed` first); a plain one (a record of
    before issue 46, Dagster's metadata of a migrated run) by SHA-256."""
    now = plain_seal(run_dir)
    keyed = is_keyed(seal)
    if keyed:
        if key is None or key.key_id != seal["key_id"]:
            raise KeyChanged(key_changed(seal, key) if key is not None else "no key to check a keyed seal with")
        folder = folder_name or run_dir.name
        sealed_files: Mapping[str, str] = seal["files"]
        found_files = {f: key.mac(SEAL_DOMAIN, folder, f, h) for f, h in now.items()}
    else:
        sealed_files, found_files = seal, now
    out = []
    for name in sorted(set(sealed_files) | set(found_files)):
        sealed, found = sealed_files.get(name), found_files.get(name)
        if sealed is not None and found is not None and hmac.compare_digest(str(sealed), found):
            continue
        if found is None:
            out.append(f"{name} is missing (sealed {str(sealed)[:12]})")
        elif sealed is None:
            out.append(f"{name} was not in the folder when it was sealed")
        elif keyed:
            out.append(f"{name} changed since the run sealed it (its MAC under key {seal['key_id']} does not hold: "
                       f"sha256 {now[name][:12]} now)")
        else:
            out.append(f"{name} changed since the run sealed it (sha256 {str(sealed)[:12]} sealed, {found[:12]} now)")
    return out


def reseal(run_dir: Path, seal: Mapping[str, Any], old: SealKey | None, new: SealKey,
           folder_name: str | None = None) -> tuple[Seal | None, list[str]]:
    """A seal that holds (under `old` when keyed, by SHA-256 when plain) made again under `new`; (None, what is
    wrong) when it does not hold: such a folder is reported, never re-sealed (a forgery must not gain a MAC)."""
    try:
        problems = broken_seal(run_dir, seal, old, folder_name)
    except KeyChanged as e:
        return None, [str(e)]
    if problems:
        return None, problems
    return seal_folder(run_dir, new, folder_name), []
