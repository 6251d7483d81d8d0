"""Generated secrets (0600 files, one secret however many processes create it at once) and derived ones."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from churn_assets.credentials import CredentialsError, derived_secret, ensure_secret_file, tenant_key


def test_a_secret_file_is_private_from_its_first_byte_and_written_once(tmp_path: Path) -> None:
    path = tmp_path / "services" / "secret"
    values = iter(f"secret-{i}" for i in range(100))
    with ThreadPoolExecutor(8) as pool:
        seen = set(pool.map(lambda _: ensure_secret_file(path, lambda: next(values)), range(16)))
    assert len(seen) == 1 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secret"]  # no temporary file left behind
    assert ensure_secret_file(path, lambda: "another") == seen.pop()


def test_a_secret_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    ensure_secret_file(path)
    path.chmod(0o644)
    with pytest.raises(CredentialsError, match="readable by other users"):
        ensure_secret_file(path)


def test_derived_secrets_differ_per_label_and_reveal_nothing() -> None:
    a, b = derived_secret("s", "world a"), derived_secret("s", "world b")
    assert a != b and derived_secret("s", "world a") == a and derived_secret("t", "world a") != a
    assert len(a) == 43
    key = tenant_key("issuer-secret-0123456789", "default-s42-3f9a1c")
    assert key.startswith("default-s42-3f9a1c.") and "issuer-secret" not in key


def test_the_saas_keys_file_keeps_its_keys_and_gains_a_profile_it_lacks(tmp_path: Path) -> None:
    """A keys file written before the `unlimited` profile existed keeps its issuers (clients' derived keys stay
    valid) and gets one for the new profile; a file of an older shape (keys reading every tenant) is replaced."""
    import json

    from churn_assets.fabric.saas_profiles import SAAS_PROFILES
    from churn_assets.services import ensure_saas_keys, saas_api_key
    from churn_assets.state import StatePaths

    paths = StatePaths.resolve(tmp_path / "state")
    target = ensure_saas_keys(paths)
    first = json.loads(target.read_text())["keys"]
    assert [k["profile"] for k in first] == list(SAAS_PROFILES) and all(k["per_tenant"] for k in first)
    older = [k for k in first if k["profile"] != "unlimited"]
    target.write_text(json.dumps({"keys": older}))
    ensure_saas_keys(paths)
    again = json.loads(target.read_text())["keys"]
    assert again[:len(older)] == older and [k["profile"] for k in again] == list(SAAS_PROFILES)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert saas_api_key(paths, "unlimited", world_id="w1").startswith("w1.")
    target.write_text(json.dumps({"keys": [{"id": "old", "key": "k" * 24, "profile": "default"}]}))
    ensure_saas_keys(paths)
    assert {k["id"] for k in json.loads(target.read_text())["keys"]} == {f"churnbench-{p}" for p in SAAS_PROFILES}
