"""The state folder's seal key: what makes a seal a MAC rather than a hash anyone can remake (issue 46).

Seals of results folders (`evaluation/seals.py`), of the warehouses' content records (`fabric/warehouse_content.py`)
and of ledger manifests' meaning checks (`world/ledger.py`) are HMAC-SHA256 under one key per state folder, each
kind in its own domain. The key lives in a file of the state folder, `<state>/seal-key` (mode
0600, made on first use by `credentials.ensure_secret_file`), never in Postgres: someone who can write the
databases (shared Postgres under compose or Helm, a remote worker's connection) but cannot read the state folder
cannot make a seal that verifies. `CHURNBENCH_SEAL_KEY_FILE` names another file (a remote worker's copy of the
owner's key, docs/deployment.md).

The key itself is never printed, logged or handed to dbt (dbt writes its variables into its output): `SealKey`'s
repr shows only its id. The key id (16 hex digits of HMAC(key, a fixed label)) is recorded with every seal, so a
seal made under another key is told apart from a forged one: "key changed", never "confirmed".
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from pathlib import Path

from churn_assets.credentials import ensure_secret_file, new_secret, read_secret_file
from churn_assets.errors import UserFacingError

SEAL_KEY_FILE_ENV = "CHURNBENCH_SEAL_KEY_FILE"
STATE_DIR_ENV = "CHURNBENCH_STATE_DIR"  # = state.STATE_DIR_ENV (the state module ranks above this one)
DEFAULT_STATE_DIRNAME = ".churnbench"  # = state.DEFAULT_STATE_DIRNAME
SEAL_KEY_FILE = "seal-key"
NEXT_KEY_SUFFIX = ".next"  # the key a rotation is moving to, until every seal is made under it
RETIRED_SUFFIX = ".retired"  # the ids (never the keys) of keys rotations retired, one per line with the day
MAC_ALG = "hmac-sha256"
_KEY_ID_LABEL = b"churnbench seal key id v1"


class KeyChanged(UserFacingError):
    """A seal made under another key than the state folder's: not a forgery that can be shown, not a confirmation."""


@dataclass(frozen=True)
class SealKey:
    """A seal key: its id (public) and its secret bytes (never in repr, logs or output)."""

    key_id: str
    secret: bytes = field(repr=False)

    @classmethod
    def from_text(cls, text: str) -> SealKey:
        secret = text.strip().encode()
        return cls(hmac.new(secret, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16], secret)

    def mac(self, domain: str, *parts: str) -> str:
        """HMAC-SHA256 (hex) of `parts` under this key, for one `domain` (a seal of one kind never passes as a seal
        of another). Each part is length-prefixed, so no two part lists give the same message."""
        message = b"".join(len(p).to_bytes(8, "big") + p for p in (x.encode() for x in (domain, *parts)))
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def verifies(self, mac: str, domain: str, *parts: str) -> bool:
        return hmac.compare_digest(str(mac), self.mac(domain, *parts))


def seal_key_file(state_root: Path) -> Path:
    """`CHURNBENCH_SEAL_KEY_FILE`, else `<state>/seal-key`."""
    from_env = os.environ.get(SEAL_KEY_FILE_ENV)
    return Path(from_env).expanduser() if from_env else state_root / SEAL_KEY_FILE


def seal_key(state_root: Path) -> SealKey:
    """The state folder's key, generated (0600) on first use."""
    return SealKey.from_text(ensure_secret_file(seal_key_file(state_root)))


def next_key(state_root: Path, *, create: bool) -> SealKey | None:
    """The key a rotation moves to (`<key file>.next`, `churnbench seals rotate`): made when `create`, else None when
    no rotation is under way."""
    path = _next_file(state_root)
    if create:
        return SealKey.from_text(ensure_secret_file(path, new_secret))
    return SealKey.from_text(read_secret_file(path)) if path.exists() else None


def promote_next_key(state_root: Path) -> None:
    """End a rotation: the next key replaces the key file (one rename; the old key is gone). The old key's id (public)
    is added to `<key file>.retired`: Dagster's `eval_run` metadata, append-only, keeps seals made under it, which
    `verify-results` then names as retired instead of "key changed"."""
    current = seal_key_file(state_root)
    if current.exists():
        retired = _retired_file(state_root)
        with retired.open("a", encoding="utf-8") as fh:
            fh.write(f"{SealKey.from_text(read_secret_file(current)).key_id} {dt.datetime.now(dt.UTC):%Y-%m-%d}\n")
    _next_file(state_root).replace(current)


def retired_key_ids(state_root: Path) -> set[str]:
    """The ids of the keys this state folder's rotations retired."""
    retired = _retired_file(state_root)
    return {line.split()[0] for line in retired.read_text().splitlines() if line.strip()} if retired.exists() else set()


def _retired_file(state_root: Path) -> Path:
    current = seal_key_file(state_root)
    return current.with_name(current.name + RETIRED_SUFFIX)


def _next_file(state_root: Path) -> Path:
    current = seal_key_file(state_root)
    return current.with_name(current.name + NEXT_KEY_SUFFIX)


def current_key() -> SealKey:
    """The key of the state folder this process works in: the folder `state.StatePaths.resolve()` names
    (`CHURNBENCH_STATE_DIR`, which the CLI, the UI's code server and its run workers share, else `./.churnbench`),
    resolved here by the same rule because the catalog that seals ranks below the state module
    (tests/test_seals.py checks that the two agree)."""
    return seal_key(Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIRNAME).expanduser().resolve())
