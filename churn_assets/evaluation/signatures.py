"""Ed25519 signatures over results folders, for publishing (issue 46, item 2).

A seal (`seals.py`) needs the state folder's secret key to check: it is for the owner. A reader of published
figures has only the folder and the publisher's public key; `churnbench seals sign` writes, into the folder, the
file `SIGNATURE_FILE`:

    {"format": "churnbench results signature v1", "folder": "<folder name>",
     "files": {"tasks.jsonl": "<sha256>", ...},            # every file of seals.SEALED_FILES the folder holds
     "public_key_id": "<16 hex of SHA-256 of the raw public key>",
     "signature": "<base64 Ed25519 signature of the canonical JSON of the three fields above>"}

and `churnbench verify-results FOLDER --public-key KEY.pub` checks it with the public key alone (no state folder,
no services): the signature over the file list, then every file's SHA-256 against the list. The signature file
carries no public key to trust: the reader's own copy of the publisher's key is what the signature is checked with
(the id only says which key signed, when they differ).

Keys are PEM: the private key PKCS#8 in a 0600 file (`credentials.write_private`), the public key
SubjectPublicKeyInfo (`<private>.pub`), made by `churnbench seals keygen`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from churn_assets.canonical import canonical_json
from churn_assets.credentials import write_private
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.seals import plain_seal
from churn_assets.unique_keys import load_json

SIGNATURE_FILE = "signature.json"
SIGNATURE_FORMAT = "churnbench results signature v1"


class SignatureError(UserFacingError):
    """A key file that is not an Ed25519 key, or a folder without a readable signature."""


def generate_keypair(private_path: Path) -> Path:
    """Write a new Ed25519 private key (PEM, 0600) to `private_path` and its public key beside it (`.pub`);
    returns the public key's path. Refuses to overwrite a key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public_path = private_path.with_name(private_path.name + ".pub")
    for path in (private_path, public_path):
        if path.exists():
            raise SignatureError(f"{path} exists: a signing key is never overwritten (choose another path)")
    key = Ed25519PrivateKey.generate()
    write_private(private_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()).decode())
    public_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
    return public_path


def _load(path: Path, private: bool) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    what = "private" if private else "public"
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SignatureError(f"cannot read the {what} key {path}: {e.strerror}") from None
    try:
        key = (serialization.load_pem_private_key(data, password=None) if private
               else serialization.load_pem_public_key(data))
    except (ValueError, TypeError) as e:  # the message names no key material
        raise SignatureError(f"{path} is not a PEM {what} key ({str(e).splitlines()[0][:80]})") from None
    if not isinstance(key, Ed25519PrivateKey if private else Ed25519PublicKey):
        raise SignatureError(f"{path} is not an Ed25519 {what} key")
    return key


def _raw_public(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def public_key_id(public_key: Any) -> str:
    return hashlib.sha256(_raw_public(public_key)).hexdigest()[:16]


def _message(folder: str, files: dict[str, str], key_id: str) -> bytes:
    return canonical_json({"format": SIGNATURE_FORMAT, "folder": folder, "files": files,
                           "public_key_id": key_id}).encode()


def sign_folder(run_dir: Path, private_key_file: Path) -> Path:
    """Sign the folder's results files with the private key; writes `SIGNATURE_FILE` into it."""
    key = _load(private_key_file, private=True)
    files = plain_seal(run_dir)
    if not files:
        raise SignatureError(f"{run_dir} holds no results files to sign")
    key_id = public_key_id(key.public_key())
    signature = key.sign(_message(run_dir.name, files, key_id))
    record = {"format": SIGNATURE_FORMAT, "folder": run_dir.name, "files": files, "public_key_id": key_id,
              "signature": base64.b64encode(signature).decode()}
    out = run_dir / SIGNATURE_FILE
    out.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def check_signature(run_dir: Path, public_key_file: Path) -> tuple[list[str], int]:
    """What is wrong with the folder's signature under the public key (empty: it holds), and the files it
    covers."""
    from cryptography.exceptions import InvalidSignature

    public = _load(public_key_file, private=False)
    path = run_dir / SIGNATURE_FILE
    try:
        record = load_json(path.read_text(encoding="utf-8"), str(path))
        files = {str(k): str(v) for k, v in dict(record["files"]).items()}
        folder, key_id = str(record["folder"]), str(record["public_key_id"])
        signature = base64.b64decode(str(record["signature"]), validate=True)
    except FileNotFoundError:
        return [f"{SIGNATURE_FILE}: missing (the folder was not signed)"], 0
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        # (a key given twice is a DuplicateKeyError, a ValueError: refused like any malformed record)
        return [f"{SIGNATURE_FILE}: not a signature record ({e.__class__.__name__})"], 0
    if record.get("format") != SIGNATURE_FORMAT:
        return [f"{SIGNATURE_FILE}: format {str(record.get('format'))[:60]!r}, expected {SIGNATURE_FORMAT!r}"], 0
    if key_id != public_key_id(public):
        return [f"{SIGNATURE_FILE}: signed by key {key_id[:16]}, not by the key given ({public_key_id(public)})"], 0
    try:
        public.verify(signature, _message(folder, files, key_id))
    except InvalidSignature:
        return [f"{SIGNATURE_FILE}: the signature does not hold under key {key_id} (the signed list was edited)"], 0
    out = []
    if folder != run_dir.name:  # a signed folder renamed: its files still hold, but say which run it claims to be
        out.append(f"{SIGNATURE_FILE}: signed as folder {folder}, found as {run_dir.name}")
    now = plain_seal(run_dir)
    for name in sorted(set(files) | set(now)):
        if name not in now:
            out.append(f"{name} is missing (signed {files[name][:12]})")
        elif name not in files:
            out.append(f"{name} was not in the folder when it was signed")
        elif files[name] != now[name]:
            out.append(f"{name} changed since it was signed (sha256 {files[name][:12]} signed, {now[name][:12]} now)")
    return out, len(files)
