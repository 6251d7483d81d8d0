"""Seals of results folders: the SHA-256 of every results file, recorded outside the folder when a run finishes.

A run's folder (`results.py`: the first answering, a retry `__retry<N>`, or any other folder of an experiment)
is sealed the same way, whatever its name: `seal_folder(run_dir)` hashes each file of `SEALED_FILES` it holds.
The runner's catalog records the seal in the run's row (`catalog.RunCatalog.complete`, column `seal`, one entry
per folder name, so a retry's seal joins the first folder's) and `eval_run` in its materialization metadata
(`seal`); `verify-results` checks the files against both before anything else (`broken_seal`) and names every file
that changed, appeared or went missing.

What a seal proves: the folder's files are byte for byte what the run wrote, unless whoever edited them edited
the catalog row and Dagster's materialization metadata to match. It proves nothing about whether what the run
wrote was right (the verifiers' other modes look at that).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from churn_assets.evaluation.results import IDENTITY_FILE, STALE_FILE, SUMMARY_FILE, TASKS_FILE, TIMINGS_FILE

SEALED_FILES = (TASKS_FILE, SUMMARY_FILE, STALE_FILE, IDENTITY_FILE, TIMINGS_FILE)

Seal = dict[str, str]  # file name -> SHA-256 hex
SEAL_METADATA = "seal"  # the `eval_run` materialization's metadata entry: {folder name: Seal}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def seal_folder(run_dir: Path) -> Seal:
    """The SHA-256 of each results file the folder holds (of `SEALED_FILES`)."""
    return {name: file_sha256(run_dir / name) for name in SEALED_FILES if (run_dir / name).is_file()}


def broken_seal(run_dir: Path, seal: Mapping[str, str]) -> list[str]:
    """What differs between a folder's files and its seal, one sentence per file (empty: the seal holds)."""
    now = seal_folder(run_dir)
    out = []
    for name in sorted(set(seal) | set(now)):
        sealed, found = seal.get(name), now.get(name)
        if sealed == found:
            continue
        if found is None:
            out.append(f"{name} is missing (sealed {str(sealed)[:12]})")
        elif sealed is None:
            out.append(f"{name} was not in the folder when it was sealed")
        else:
            out.append(f"{name} changed since the run sealed it (sha256 {sealed[:12]} sealed, {found[:12]} now)")
    return out
