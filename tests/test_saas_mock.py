"""The SaaS API in process (unit level): keys and plans, the token bucket on a fake clock, the projection
cache, and the app through Starlette's test client over a fake vendor database (the `TruthSource` seam).
The real app under uvicorn, reading a real truth schema, is tested in tests/integration/test_saas_api.py."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from churn_assets.world.config import load_config
from churn_assets.world.fold import assigned_licenses, fold_ledger, open_tickets
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger
from saas_mock.app import create_app
from saas_mock.config import KEYS_ENV, PROFILES, SaasConfigError, load_keys, match_key, parse_keys, with_overrides
from saas_mock.limits import RateLimiter
from saas_mock.projection import ProjectionCache, TenantHead

FAST = "f" * 20
SLOW = "s" * 20


def keys_json(**extra: Any) -> str:
    return json.dumps({"keys": [
        {"id": "fast", "key": FAST, "profile": "unlimited"},
        {"id": "slow", "key": SLOW, "profile": "default", "rate_per_minute": 3, "latency_ms": 0, **extra},
    ]})


# --- keys and plans -------------------------------------------------------------------------------------


def test_profiles_match_the_design() -> None:
    assert (PROFILES["default"].rate_per_minute, PROFILES["default"].latency_ms) == (600, 50)
    assert (PROFILES["reference"].rate_per_minute, PROFILES["reference"].latency_ms) == (60, 350)
    assert not PROFILES["unlimited"].limited


def test_keys_from_env_or_file(tmp_path: Path) -> None:
    keys = load_keys(env={KEYS_ENV: keys_json()})
    assert [(k.key_id, k.plan.profile, k.plan.rate_per_minute, k.plan.burst) for k in keys] == [
        ("fast", "unlimited", 0, 1), ("slow", "default", 3, 3)]
    path = tmp_path / "keys.json"
    path.write_text(keys_json())
    assert load_keys(path, env={}) == keys
    with pytest.raises(SaasConfigError, match="no API keys"):
        load_keys(None, env={})
    for bad in ("[]", '{"keys": [{"key": "short"}]}', '{"keys": [{"key": "' + "x" * 20 + '", "profile": "gold"}]}',
                "{not json"):
        with pytest.raises(SaasConfigError):
            parse_keys(bad, "test")


def test_match_key_is_exact() -> None:
    keys = parse_keys(keys_json(), "test")
    assert match_key(keys, FAST).key.key_id == "fast"  # type: ignore[union-attr]
    assert match_key(keys, SLOW).key.key_id == "slow"  # type: ignore[union-attr]
    for wrong in (None, "", FAST[:-1], FAST + "f", "é" * 20):
        assert match_key(keys, wrong) is None


def test_server_overrides_apply_to_every_key() -> None:
    keys = with_overrides(parse_keys(keys_json(), "test"), latency_ms=0, rate_per_minute=0)
    assert all(k.plan.latency_ms == 0 and not k.plan.limited for k in keys)
    assert with_overrides(keys) == keys


def test_token_bucket_refuses_over_the_rate_and_refills() -> None:
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    plan = parse_keys(keys_json(), "test")[1].plan  # 3 per minute, burst 3
    assert [limiter.check("slow", plan).allowed for _ in range(4)] == [True, True, True, False]
    refused = limiter.check("slow", plan)
    assert refused.retry_after_s == pytest.approx(20.0) and refused.retry_after_header == "20"
    now[0] = 19.0
    assert not limiter.check("slow", plan).allowed
    assert limiter.check("slow", plan).retry_after_header == "1"  # never 0, rounded up
    now[0] = 20.0
    assert limiter.check("slow", plan).allowed
    assert limiter.check("other", plan).allowed  # per key
    assert limiter.refused == 4


# --- the app over a fake vendor database ----------------------------------------------------------------


class LedgerSource:
    """The `TruthSource` seam, over a ledger in memory; `version` bumps simulate a re-load."""

    def __init__(self, world_id: str, records: list[dict[str, Any]], start: dt.date, end: dt.date) -> None:
        self.world_id, self.records_, self.start, self.end = world_id, records, start, end
        self.present = True
        self.head_reads = self.record_reads = 0

    def head(self, world_id: str) -> TenantHead | None:
        self.head_reads += 1
        if world_id != self.world_id or not self.present:
            return None
        return TenantHead(world_id, 2, len(self.records_), "h", self.start, self.end)

    def records(self, world_id: str) -> list[dict[str, Any]]:
        self.record_reads += 1
        return self.records_


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    config = load_config(days=30)
    out = tmp_path_factory.mktemp("ledger")
    generate_ledger(config, out)
    return config.world_id, load_ledger(out).records


@pytest.fixture
def source(world: tuple[str, list[dict[str, Any]]]) -> LedgerSource:
    return LedgerSource(world[0], world[1], dt.date(2024, 1, 1), dt.date(2024, 1, 30))


@pytest.fixture
def client(source: LedgerSource) -> TestClient:
    app = create_app(parse_keys(keys_json(), "test"), ProjectionCache(source, revalidate_s=60))
    return TestClient(app)


def get(client: TestClient, path: str, key: str | None = FAST, **params: Any) -> Any:
    headers = {"X-API-Key": key} if key else {}
    return client.get(path, params=params, headers=headers)


def test_auth_is_required_and_checked(client: TestClient, source: LedgerSource) -> None:
    url = f"/v1/tenants/{source.world_id}/prices"
    assert get(client, url, None, as_of="2024-01-10").status_code == 401
    wrong = get(client, url, "x" * 20, as_of="2024-01-10")
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "ApiKey"
    assert get(client, url, as_of="2024-01-10").status_code == 200
    assert client.get("/health").json()["status"] == "ok"


def test_rate_limit_answers_429_with_retry_after(client: TestClient, source: LedgerSource) -> None:
    url = f"/v1/tenants/{source.world_id}/prices"
    codes = [get(client, url, SLOW, as_of="2024-01-10") for _ in range(4)]
    assert [r.status_code for r in codes] == [200, 200, 200, 429]
    assert int(codes[-1].headers["Retry-After"]) >= 1
    assert codes[0].headers["X-SaaS-Profile"] == "default"
    assert get(client, url, FAST, as_of="2024-01-10").status_code == 200  # another key is not limited


def test_as_of_reads_match_the_fold_at_each_day(client: TestClient, source: LedgerSource) -> None:
    w = source.world_id
    answers = {}
    for day in ("2024-01-10", "2024-01-30"):
        state = fold_ledger(source.records_, day)
        body = get(client, f"/v1/tenants/{w}/tickets", as_of=day, page_size=500).json()
        assert {t["ticket_id"] for t in body["items"] if t["status"] != "resolved"} == open_tickets(state, day)
        holder = sorted(assigned_licenses(state, day).items())[0]
        ent = get(client, f"/v1/tenants/{w}/entitlements/{holder[1]}", as_of=day).json()
        assert holder[0] in {e["license_id"] for e in ent["entitlements"]}
        answers[day] = body
    assert answers["2024-01-10"]["total"] != answers["2024-01-30"]["total"]


def test_tickets_filter_and_paginate(client: TestClient, source: LedgerSource) -> None:
    url = f"/v1/tenants/{source.world_id}/tickets"
    everything = get(client, url, as_of="2024-01-30", page_size=500).json()
    pages, page = [], 1
    while page:
        body = get(client, url, as_of="2024-01-30", page=page, page_size=7).json()
        pages += body["items"]
        page = body["next_page"]
    assert pages == everything["items"] and len(pages) == everything["total"]
    product = everything["items"][0]["product_id"]
    resolved = get(client, url, as_of="2024-01-30", status="resolved", product=product, page_size=500).json()
    assert resolved["items"] == [t for t in everything["items"]
                                 if t["status"] == "resolved" and t["product_id"] == product]
    assert get(client, url, as_of="2024-01-30", status="closed").status_code == 422
    assert get(client, url, as_of="2024-01-30", page=0).status_code == 422


def test_unknown_things_are_404_and_days_outside_the_calendar_422(client: TestClient, source: LedgerSource) -> None:
    w = source.world_id
    for path, missing in (("/v1/tenants/nope-s1-abcdef/prices", "tenant"), ("/v1/tenants/NOT A WORLD/prices", "tenant"),
                          ("/v1/tenants/nope-s1-abcdef/products/prd_9999/utilization", "tenant"),
                          (f"/v1/tenants/{w}/entitlements/usr_999999", "user"),
                          (f"/v1/tenants/{w}/products/prd_9999/utilization", "product")):
        answer = get(client, path, as_of="2024-01-10")
        # the 404 says what is missing in a machine-readable field: a client tells "no usage" from "no tenant"
        assert (answer.status_code, answer.json()["missing"]) == (404, missing), path
    outside = get(client, f"/v1/tenants/{w}/prices", as_of="2024-02-01")
    assert outside.status_code == 422 and "outside" in outside.json()["detail"]
    assert get(client, f"/v1/tenants/{w}/prices").status_code == 422  # as_of is required


def test_utilization_definition(client: TestClient, source: LedgerSource) -> None:
    day = dt.date(2024, 1, 20)
    state = fold_ledger(source.records_, day)
    product = state.assignments.licenses[sorted(assigned_licenses(state, day))[0]].product_id
    body = get(client, f"/v1/tenants/{source.world_id}/products/{product}/utilization", as_of=day.isoformat(),
               window_days=7).json()
    start = day - dt.timedelta(days=6)
    rows = [r for r in state.consumption.records if r.product_id == product and start <= r.day <= day]
    assert body["window_start"] == start.isoformat() and body["window_end"] == day.isoformat()
    assert body["api_calls"] == sum(r.api_calls for r in rows)
    assert body["active_users"] == len({r.user_id for r in rows})
    assigned = {lid for lid, _ in assigned_licenses(state, day).items()
                if state.assignments.licenses[lid].product_id == product}
    active = {lid for lid in assigned if any(r.license_id == lid for r in rows)}
    assert (body["assigned_seats"], body["active_seats"]) == (len(assigned), len(active))
    assert body["idle_seats"] == len(assigned) - len(active)
    assert body["utilization_rate"] == round(len(active) / len(assigned), 4)


def test_projection_cache_builds_once_and_notices_a_removed_tenant(source: LedgerSource) -> None:
    now = [0.0]
    cache = ProjectionCache(source, revalidate_s=5, clock=lambda: now[0])
    day = dt.date(2024, 1, 10)
    first = cache.get(source.world_id, day)
    assert cache.get(source.world_id, day) is first and cache.builds == 1 and source.record_reads == 1
    assert cache.peek(source.world_id, day) is first
    cache.get(source.world_id, dt.date(2024, 1, 11))
    assert source.record_reads == 1  # the events are read once per head
    now[0] = 10.0
    assert cache.peek(source.world_id, day) is None  # due for revalidation
    source.present = False
    with pytest.raises(Exception, match="no tenant"):
        cache.get(source.world_id, day)


def test_openapi_schema_is_served(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert set(schema["paths"]) >= {"/v1/tenants/{world}/entitlements/{user}", "/v1/tenants/{world}/tickets",
                                    "/v1/tenants/{world}/products/{product}/utilization",
                                    "/v1/tenants/{world}/prices"}
    params = {p["name"] for p in schema["paths"]["/v1/tenants/{world}/prices"]["get"]["parameters"]}
    assert "as_of" in params
    assert "APIKeyHeader" in schema["components"]["securitySchemes"]


def test_every_answer_says_its_day_and_hashes_its_records(client: TestClient, source: LedgerSource) -> None:
    """`served_day` is the day of the view the answer came from; `content_hash` is the SHA-256 of the
    canonical JSON of the records exactly as the client receives them (what a reader checks)."""
    from churn_assets.canonical import canonical_json, sha256_hex

    world, day = source.world_id, "2024-01-20"
    headers = {"X-API-Key": FAST}
    answers = {
        "tickets": client.get(f"/v1/tenants/{world}/tickets", params={"as_of": day, "page_size": 7}, headers=headers),
        "prices": client.get(f"/v1/tenants/{world}/prices", params={"as_of": day}, headers=headers),
    }
    product = answers["prices"].json()["items"][0]["product_id"]
    answers["licenses"] = client.get(f"/v1/tenants/{world}/products/{product}/utilization",
                                     params={"as_of": day, "window_days": 7}, headers=headers)
    for records, response in answers.items():
        body = response.json()
        assert response.status_code == 200 and body["served_day"] == day
        key = "items" if records in ("tickets", "prices") else "licenses"
        assert body["content_hash"] == sha256_hex(canonical_json(body[key])), records
        assert body[key], records  # the hash of something, not of an empty list


# --- keys scoped to tenants -----------------------------------------------------------------------------------


def test_keys_are_scoped_to_tenants() -> None:
    from churn_assets.credentials import tenant_key

    issuer, scoped = "i" * 20, "t" * 20
    a, b = "default-s42-3f9a1c", "default-s43-3f9a1c"
    keys = parse_keys(json.dumps({"keys": [
        {"id": "issuer", "key": issuer, "profile": "unlimited", "per_tenant": True},
        {"id": "scoped", "key": scoped, "profile": "unlimited", "tenants": [a]},
        {"id": "open", "key": FAST, "profile": "unlimited"},
    ]}), "test")
    derived = match_key(keys, tenant_key(issuer, a))
    assert derived is not None and derived.key.key_id == "issuer" and derived.allows(a) and not derived.allows(b)
    assert match_key(keys, issuer) is None  # an issuer is not a key itself
    assert match_key(keys, f"{a}.{tenant_key(issuer, a).split('.', 1)[1][:-1]}x") is None  # a forged mac
    assert match_key(keys, tenant_key("another issuer 0123", a)) is None
    one = match_key(keys, scoped)
    assert one is not None and one.allows(a) and not one.allows(b)
    every = match_key(keys, FAST)
    assert every is not None and every.allows(a) and every.allows(b)
    for bad in ('{"keys": [{"key": "' + issuer + '", "per_tenant": true, "tenants": ["' + a + '"]}]}',
                '{"keys": [{"key": "' + issuer + '", "tenants": ["not a world"]}]}',
                '{"keys": [{"key": "' + issuer + '", "tenants": []}]}'):
        with pytest.raises(SaasConfigError):
            parse_keys(bad, "test")


def test_a_key_for_another_tenant_is_answered_403(source: LedgerSource) -> None:
    from churn_assets.credentials import tenant_key

    issuer = "i" * 20
    keys = parse_keys(json.dumps({"keys": [{"id": "issuer", "key": issuer, "profile": "unlimited",
                                             "per_tenant": True}]}), "test")
    client = TestClient(create_app(keys, ProjectionCache(source, revalidate_s=60)))
    mine, other = source.world_id, "other-s1-000000"
    assert get(client, f"/v1/tenants/{mine}/prices", tenant_key(issuer, mine), as_of="2024-01-10").status_code == 200
    refused = get(client, f"/v1/tenants/{mine}/prices", tenant_key(issuer, other), as_of="2024-01-10")
    assert refused.status_code == 403 and "not issued for tenant" in refused.json()["detail"]
    # Refused before any lookup: a key cannot probe which other tenants exist.
    assert get(client, f"/v1/tenants/{other}/prices", tenant_key(issuer, mine), as_of="2024-01-10").status_code == 403


def test_each_tenants_derived_key_has_its_own_quota(source: LedgerSource) -> None:
    from churn_assets.credentials import tenant_key

    issuer = "i" * 20
    keys = parse_keys(json.dumps({"keys": [{"id": "issuer", "key": issuer, "profile": "default", "per_tenant": True,
                                             "rate_per_minute": 3, "latency_ms": 0}]}), "test")
    client = TestClient(create_app(keys, ProjectionCache(source, revalidate_s=60)))
    mine, other = source.world_id, "other-s1-000000"
    url = f"/v1/tenants/{mine}/prices"
    codes = [get(client, url, tenant_key(issuer, mine), as_of="2024-01-10").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    # Another tenant's key from the same issuer still has its three requests (its world is unknown here: 404).
    assert [get(client, f"/v1/tenants/{other}/prices", tenant_key(issuer, other), as_of="2024-01-10").status_code
            for _ in range(4)] == [404, 404, 404, 429]


def test_records_and_views_are_built_with_the_gc_paused_then_frozen() -> None:
    import gc

    from saas_mock.projection import long_lived_objects

    try:
        frozen = gc.get_freeze_count()
        with long_lived_objects():
            assert not gc.isenabled()
            with long_lived_objects():  # a second tenant's build at the same time
                kept = [[i] for i in range(1000)]  # lists: objects the cyclic GC tracks
            assert not gc.isenabled()  # the first build still runs
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(kept)
        gc.disable()  # a process that turned the GC off keeps it off
        with long_lived_objects():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
