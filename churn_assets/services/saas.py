"""The embedded SaaS API (`python -m saas_mock` under uvicorn) on a free port of the service address, and its API keys
(`<state>/services/saas-keys.json`, mode 0600, one per-tenant issuer key per profile: the key a client of
world W sends is derived from it, `churn_assets.credentials.tenant_key`, and reads tenant W only)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from churn_assets.fabric.saas_profiles import SAAS_PROFILES
from churn_assets.services.base import (
    SAAS_API_KEY_ENV,
    SAAS_KEY_ISSUER_ENV,
    SAAS_KEYS_FILENAME,
    SAAS_URL_ENV,
    ServiceError,
    http_health,
    url_host,
)
from churn_assets.services.process import ProcessService
from churn_assets.state import StatePaths
from churn_assets.unique_keys import load_json


class SaasService(ProcessService):
    """The SaaS API (`python -m saas_mock`, FastAPI under uvicorn) on a free port of the service address.

    It reads tenants from the truth schemas of the warehouse (found through `--state-dir`, or
    CHURNBENCH_POSTGRES_URL when that is set), hence after Postgres. Keys are written once to
    `<state>/services/saas-keys.json` (0600), one per profile; `saas_api_key` gives a client its key.
    churn_assets never imports saas_mock: the service is a subprocess.
    """

    name = "saas"
    label = "SaaS API (saas_mock, uvicorn)"
    url_env = SAAS_URL_ENV
    depends_on = ("postgres",)

    def prepare(self, paths: StatePaths) -> None:
        ensure_saas_keys(paths)

    def log_file(self, paths: StatePaths) -> Path:
        return paths.services_dir / f"{self.name}.out"  # uvicorn logs to its output, which goes here

    def command(self, paths: StatePaths, host: str, port: int) -> list[str]:
        # No key and no URL on the command line (other users can read it): both come through the state folder.
        return [sys.executable, "-m", "saas_mock", "--state-dir", str(paths.root), "--host", host,
                "--port", str(port)]

    def url_for(self, host: str, port: int) -> str:
        return f"http://{url_host(host)}:{port}"

    def owned_processes(self, paths: StatePaths) -> list[Any]:
        import psutil

        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if "saas_mock" in cmdline and str(paths.root) in cmdline:
                found.append(proc)
        return found

    def health(self, url: str, timeout: float) -> None:
        http_health(url, timeout)


def saas_keys_file(paths: StatePaths) -> Path:
    return paths.services_dir / SAAS_KEYS_FILENAME


def ensure_saas_keys(paths: StatePaths) -> Path:
    """Write the embedded SaaS API's keys file (one random per-tenant issuer key per profile, mode 0600). A file
    of per-tenant keys is kept and gets a key for each profile it lacks (one written before a profile existed);
    a file of an older churnbench, whose keys read every tenant, is replaced. This runs before the server starts,
    which reads the file once."""
    from churn_assets.credentials import new_secret, write_private

    target = saas_keys_file(paths)
    kept: list[dict[str, object]] = []
    try:
        entries = load_json(target.read_text(), str(target))["keys"]
        if entries and all(entry.get("per_tenant") is True for entry in entries):
            kept = list(entries)
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
        pass  # no keys file, or one of another shape: (re)issue the per-tenant keys below
    have = {entry.get("profile") for entry in kept}
    missing = [p for p in SAAS_PROFILES if p not in have]
    if kept and not missing:
        return target
    keys = {"keys": kept + [{"id": f"churnbench-{profile}", "key": new_secret(), "profile": profile,
                             "per_tenant": True} for profile in missing]}
    write_private(target, json.dumps(keys, indent=2) + "\n")
    return target


def saas_api_key(paths: StatePaths | None = None, profile: str = "default", *, world_id: str | None = None) -> str:
    """The API key a client of tenant `world_id` sends: CHURNBENCH_SAAS_API_KEY as it is, else the key derived
    for that tenant from CHURNBENCH_SAAS_KEY_ISSUER or from the embedded keys file's issuer key for `profile` (a
    derived key reads that tenant only). With CHURNBENCH_SAAS_URL set the key must come from the environment
    (the deployment issued it)."""
    from churn_assets.credentials import tenant_key

    key = os.environ.get(SAAS_API_KEY_ENV)
    if key:
        return key
    issuer = os.environ.get(SAAS_KEY_ISSUER_ENV)
    if issuer:
        if world_id is None:
            raise ServiceError(f"{SAAS_KEY_ISSUER_ENV} issues one key per tenant: name the world the key is for")
        return tenant_key(issuer, world_id)
    if os.environ.get(SAAS_URL_ENV):
        raise ServiceError(f"{SAAS_URL_ENV} is set: set {SAAS_KEY_ISSUER_ENV} (a per-tenant issuer key) or "
                           f"{SAAS_API_KEY_ENV} (one key) to what that SaaS deployment issued")
    paths = paths or StatePaths.resolve()
    target = saas_keys_file(paths)
    try:
        entries = load_json(target.read_text(), str(target))["keys"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
        raise ServiceError(f"no SaaS API keys in {target}: `churnbench services up` writes them") from None
    for entry in entries:
        if entry.get("profile") == profile:
            if not entry.get("per_tenant"):
                return str(entry["key"])  # a key of an older file: the server started with it reads every tenant
            if world_id is None:
                raise ServiceError(f"the SaaS keys in {target} are per tenant: name the world the key is for")
            return tenant_key(str(entry["key"]), world_id)
    known = ", ".join(sorted({str(e.get("profile")) for e in entries}))
    raise ServiceError(f"{target} has no key for SaaS profile {profile!r} (it has: {known})")
