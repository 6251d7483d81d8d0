"""Plans, profiles and API keys of the SaaS API.

A *profile* is a named plan: requests per minute per key and injected latency (docs/rules.md,
"SaaS mock"): `default` 600/min and 50 ms for local runs, `reference` 60/min and 350 ms (the ChurnBench
reference's SaaS), `unlimited` no limit and no latency (benchmarks). Each API key is issued on a profile,
as vendors issue keys on plans: one running server serves a `default` and a `reference` caller at once, and
the caller picks its profile by the key it sends. A key may override its profile's numbers.

Keys come only from the environment or from a file in the state folder, never from the command line
(other users can read command lines):

- `CHURNBENCH_SAAS_API_KEYS`: JSON, `{"keys": [{"id": "...", "key": "...", "profile": "default"}, ...]}`
  (optional per key: `rate_per_minute`, `burst`, `latency_ms`, and the key's scope: `tenants`, a list of world ids
  it may read, or `per_tenant: true`);
- or a file of the same JSON, `--keys-file` / `CHURNBENCH_SAAS_KEYS_FILE`; the embedded service writes
  `<state>/services/saas-keys.json` (mode 0600) with one key per built-in profile on its first start.

Keys are scoped to tenants (worlds). A key with `tenants` reads only those; a key with `per_tenant: true` is
not itself accepted but issues one key per tenant, `<world>.<HMAC-SHA256 of the world under the key>`
(`churn_assets.credentials.tenant_key`), which reads that tenant only: the embedded keys file holds such keys,
so a new world needs no new file and no restart. A request for a tenant the key is not for is answered 403. A
key with neither reads every tenant (an operator's key; the server says so at start).

Keys are compared in constant time (`hmac.compare_digest`, against every known key, no early exit).
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from churn_assets.credentials import tenant_key
from churn_assets.errors import UserFacingError
from churn_assets.unique_keys import DuplicateKeyError, load_json
from churn_assets.world.config import WORLD_ID_RE
from churn_assets.world.validation import StrictModel, fail, one_of, parse

KEYS_ENV = "CHURNBENCH_SAAS_API_KEYS"
KEYS_FILE_ENV = "CHURNBENCH_SAAS_KEYS_FILE"
KEY_HEADER = "X-API-Key"


class SaasConfigError(UserFacingError):
    """The SaaS API's keys or limits are misconfigured; the message names the source."""


@dataclass(frozen=True)
class Plan:
    """Limits of one key. `rate_per_minute` 0 means no limit; `burst` is the bucket size (requests that may
    arrive at once; the bucket refills at `rate_per_minute / 60` per second)."""

    profile: str
    rate_per_minute: float
    latency_ms: float
    burst: int

    @property
    def limited(self) -> bool:
        return self.rate_per_minute > 0


def _plan(profile: str, rate_per_minute: float, latency_ms: float) -> Plan:
    # A minute's quota may arrive at once (as under a fixed one-minute window), then it refills evenly.
    return Plan(profile, rate_per_minute, latency_ms, max(1, int(rate_per_minute)))


PROFILES: dict[str, Plan] = {
    "default": _plan("default", 600, 50),
    "reference": _plan("reference", 60, 350),
    "unlimited": _plan("unlimited", 0, 0),
}
DEFAULT_PROFILE = "default"


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    secret: bytes
    plan: Plan
    tenants: frozenset[str] | None = None  # None: every tenant (unless `per_tenant`)
    per_tenant: bool = False  # the secret issues `<world>.<mac>` keys, one per tenant, and is not a key itself

    def allows(self, world: str) -> bool:
        return self.tenants is None or world in self.tenants

    @property
    def scope(self) -> str:
        if self.per_tenant:
            return "one tenant per derived key"
        return "every tenant" if self.tenants is None else f"{len(self.tenants)} tenant(s)"


def plan_for(profile: str, overrides: Mapping[str, Any] | None = None) -> Plan:
    """The plan of `profile`, with a key's own `rate_per_minute`, `latency_ms` or `burst` if it has them."""
    if profile not in PROFILES:
        raise SaasConfigError(f"unknown SaaS profile {profile!r} (known: {', '.join(PROFILES)})")
    given = parse(PlanOverrides, dict(overrides or {}),
                  lambda message: SaasConfigError(f"profile {profile}: {message}")).given()
    plan = PROFILES[profile]
    rate = float(given.get("rate_per_minute", plan.rate_per_minute))
    # A new rate brings its own bucket size (a minute's quota), unless the key sets `burst` too.
    burst_default = plan.burst if "rate_per_minute" not in given else max(1, int(rate))
    return replace(plan, rate_per_minute=rate, latency_ms=float(given.get("latency_ms", plan.latency_ms)),
                   burst=int(given.get("burst", burst_default)))


def parse_keys(text: str, where: str) -> list[ApiKey]:
    """Keys from the JSON text of `where` (an env variable or a file), validated."""
    try:
        data = load_json(text, where)
    except DuplicateKeyError as e:
        raise SaasConfigError(str(e)) from None
    except json.JSONDecodeError as e:
        raise SaasConfigError(f"{where}: not valid JSON ({e.msg})") from None
    # Never quote a value in the message: the values are secrets.
    checked = parse(KeysFile, data, lambda message: SaasConfigError(f"{where}: {message}"), show_input=False)
    return [ApiKey(entry.id or "", entry.key.encode(), plan_for(entry.profile, entry.given()),
                   None if entry.tenants is None else frozenset(entry.tenants), entry.per_tenant)
            for entry in checked.keys]


# --- the keys' schema ---------------------------------------------------------------------------------------

NonNegative = Annotated[float | None, Field(ge=0, description="a number >= 0")]


class PlanOverrides(StrictModel):
    """A key's own limits, over its profile's."""

    rate_per_minute: NonNegative = None
    latency_ms: NonNegative = None
    burst: Annotated[int | None, Field(ge=1, description="an integer >= 1")] = None

    def given(self) -> dict[str, float]:
        """The limits this key sets (an absent or null one is the profile's)."""
        values = {name: getattr(self, name) for name in PlanOverrides.model_fields}
        return {name: value for name, value in values.items() if value is not None}


class KeyEntry(PlanOverrides):
    # Any JSON scalar names a key (as before: `str(id)`); none or "" is `key<i>`.
    id: Annotated[str | None, BeforeValidator(lambda v: None if v in (None, "") else str(v)),
                  Field(description="a key id")] = None
    key: Annotated[str, Field(min_length=16, description="a string of at least 16 characters")]
    profile: Annotated[str, BeforeValidator(one_of(PROFILES, "SaaS profile")),
                       Field(description="a profile name")] = DEFAULT_PROFILE
    tenants: Annotated[list[Annotated[str, Field(pattern=WORLD_ID_RE.pattern)]] | None,
                       Field(min_length=1, description="a non-empty list of world ids")] = None
    per_tenant: bool = False

    @model_validator(mode="after")
    def _one_scope(self) -> KeyEntry:
        if self.per_tenant and self.tenants is not None:
            raise fail("a key has `tenants` or `per_tenant`, not both")
        return self


KEYS_SHAPE = '{"keys": [{"id": ..., "key": ..., "profile": ...}]}'


class KeysFile(StrictModel):
    keys: Annotated[list[KeyEntry], Field(min_length=1, description=f"a non-empty list, as in {KEYS_SHAPE}")]

    @model_validator(mode="before")
    @classmethod
    def _shaped(cls, data: Any) -> Any:
        """Something else than `{"keys": ...}` is shown the shape (not "keys is missing")."""
        if not isinstance(data, dict) or "keys" not in data:
            raise fail(f"expected {KEYS_SHAPE}")
        return data

    @model_validator(mode="after")
    def _unique_ids(self) -> KeysFile:
        """A key without an id is `key<i>` (its place in the list); every id names one key."""
        seen: set[str] = set()
        for i, entry in enumerate(self.keys):
            entry.id = entry.id or f"key{i}"
            if entry.id in seen:
                raise fail(f"key id {entry.id!r} appears twice")
            seen.add(entry.id)
        return self


def load_keys(keys_file: str | Path | None = None, env: Mapping[str, str] | None = None) -> list[ApiKey]:
    """Keys from `CHURNBENCH_SAAS_API_KEYS`, else from `keys_file` / `CHURNBENCH_SAAS_KEYS_FILE`."""
    env = os.environ if env is None else env
    if env.get(KEYS_ENV):
        return parse_keys(env[KEYS_ENV], KEYS_ENV)
    path = keys_file or env.get(KEYS_FILE_ENV)
    if not path:
        raise SaasConfigError(f"no API keys: set {KEYS_ENV} (JSON) or give a keys file ({KEYS_FILE_ENV}, "
                              "--keys-file or --state-dir)")
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SaasConfigError(f"cannot read the SaaS keys file {path}: {e.strerror}") from None
    return parse_keys(text, str(path))


def with_overrides(keys: Sequence[ApiKey], **overrides: float | None) -> list[ApiKey]:
    """Server-wide overrides (command-line flags for benchmarks and tests) applied to every key's plan."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return list(keys)
    out = []
    for key in keys:
        rate = float(given.get("rate_per_minute", key.plan.rate_per_minute))
        burst = int(given["burst"]) if "burst" in given else (
            max(1, int(rate)) if "rate_per_minute" in given else key.plan.burst)
        out.append(replace(key, plan=replace(key.plan, rate_per_minute=rate, burst=burst,
                                             latency_ms=float(given.get("latency_ms", key.plan.latency_ms)))))
    return out


@dataclass(frozen=True)
class Match:
    """The key a presented secret is, and the tenant it was issued for when it is a derived key."""

    key: ApiKey
    tenant: str | None = None  # a per-tenant key's tenant

    def allows(self, world: str) -> bool:
        return self.tenant == world if self.key.per_tenant else self.key.allows(world)

    @property
    def bucket(self) -> str:
        """The rate limiter's bucket: one per key, and a derived key is a key of its own (each tenant has its own
        quota, as each customer of a SaaS vendor has), not a share of its issuer's."""
        return self.key.key_id if self.tenant is None else f"{self.key.key_id}/{self.tenant}"


def match_key(keys: Sequence[ApiKey], presented: str | None) -> Match | None:
    """The key `presented` is (a key's own secret, or a per-tenant key derived from one), compared in constant
    time against every key."""
    if not presented:
        return None
    given = presented.encode("utf-8", "surrogateescape")
    tenant = presented.split(".", 1)[0] if "." in presented else None
    found: Match | None = None
    for key in keys:
        # No early exit: the time taken does not tell which key (or how much of one) matched.
        if key.per_tenant:
            expected = tenant_key(key.secret.decode(), tenant).encode() if tenant else b""
            if hmac.compare_digest(expected, given) and tenant:
                found = Match(key, tenant)
        elif hmac.compare_digest(key.secret, given):
            found = Match(key)
    return found
