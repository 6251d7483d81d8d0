"""Canonical JSON: the one serialization behind every hash and every byte-compared file.

UTF-8 text, keys sorted, no whitespace (`","` and `":"`), non-ASCII kept as is (docs/rules.md,
"Canonical JSON and hashes"). The ledger's hash chain, world ids, policy ids, task-set hashes, experiment hashes and
the model-settings hash of an LLM agent are all computed over this text, so two of them can never disagree
about what "the same object" means. Floats are written as Python writes them; callers round a field to its
declared precision before (the ledger does).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

# One encoder, built once: `json.dumps` with these arguments builds the same encoder on every call, which
# shows in loops over a ledger's tens of thousands of records.
_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def canonical_json(obj: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """`obj` as canonical JSON text; `default` turns values JSON has no type for (e.g. `str` for days)."""
    if default is None:
        return _ENCODE(obj)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=default)


def sha256_hex(text: str) -> str:
    """The SHA-256 of `text`'s UTF-8 bytes, as 64 hex digits."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
