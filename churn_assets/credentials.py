"""Secrets of the embedded deployment: generated once into files of mode 0600 in the state folder.

Every secret churnbench uses comes from the environment (an external deployment sets it) or, for the
embedded services, from a file this module creates on first use (`ensure_secret_file`). Nothing else holds a
secret: no command line (other users can read command lines), no result, log or scenario file (a test greps
them, `tests/reliability/test_secrets.py`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from churn_assets.errors import UserFacingError
from churn_assets.files import temporary_name

PRIVATE_MODE = 0o600


class CredentialsError(UserFacingError):
    """A secret file is unreadable or readable by others; the message names the file."""


def new_secret() -> str:
    """256 random bits, URL-safe text."""
    return secrets.token_urlsafe(32)


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, mode 0600 from the first byte on (never world-readable, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def ensure_secret_file(path: Path, make: Callable[[], str] = new_secret) -> str:
    """The secret in `path` (stripped), written by `make()` on first use with mode 0600.

    Linked into place rather than renamed: two processes creating it at once agree on one secret. A file that
    others may read is refused (a secret that leaked is not one)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary_name(path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(make().strip() + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            with contextlib.suppress(FileExistsError):  # another process won the race: its secret is the one
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return read_secret_file(path)


def read_secret_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CredentialsError(f"{path} is readable by other users (mode {stat.S_IMODE(mode):o}); "
                                   f"`chmod 600 {path}` or delete it to have a new one generated")
        return path.read_text().strip()
    except OSError as e:
        raise CredentialsError(f"cannot read the secret file {path}: {e.strerror}") from None


def tenant_key(issuer_secret: str, world_id: str) -> str:
    """The SaaS API key of one tenant derived from a per-tenant issuer key (`saas_mock/config.py`):
    `<world>.<HMAC-SHA256(issuer, world), URL-safe base64>`. The server recomputes it; a key of one tenant
    tells nothing about another's."""
    return f"{world_id}.{derived_secret(issuer_secret, f'churnbench saas tenant {world_id}')}"


def derived_secret(secret: str, label: str) -> str:
    """HMAC-SHA256 of `label` under `secret`, URL-safe base64 without padding (43 characters): one secret
    per world from one stored secret, none of which reveals the stored one or another label's."""
    digest = hmac.new(secret.encode(), label.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")
