"""The SaaS API for real: `python -m saas_mock` under uvicorn on a loopback port, reading the small world's
truth schema in the embedded Postgres, called over HTTP.

Auth (401), rate limit (429 + Retry-After), latency, as-of reads (same request, two days, two answers that
match the fold), the client's backoff and its transport error against the real server, the embedded service
(`services up`) and `CHURNBENCH_SAAS_URL`, and a property run: requests generated with hypothesis from the
served OpenAPI schema (every path, every parameter: valid values and deliberately wrong ones) never get a 5xx,
and every 200 carries the fields the schema requires.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from churn_assets.fabric.postgres import connection
from churn_assets.fabric.saas_client import SaasClient, SaasNotFound, TransportError
from churn_assets.fabric.truth import load_truth
from churn_assets.services import SAAS, SAAS_URL_ENV, ServiceUrls, free_port, saas_api_key, services_status
from churn_assets.state import StatePaths
from churn_assets.world.fold import assigned_licenses, existing_users, fold_ledger, open_tickets
from churn_assets.world.ledger import load_ledger

pytestmark = pytest.mark.integration

DAY_A, DAY_B = "2024-01-10", "2024-01-30"
KEYS = {
    "open": ("o" * 24, {"profile": "unlimited"}),
    "limited": ("l" * 24, {"profile": "default", "rate_per_minute": 3, "latency_ms": 0}),
    "throttled": ("t" * 24, {"profile": "default", "rate_per_minute": 120, "burst": 1, "latency_ms": 0}),
    "slow": ("s" * 24, {"profile": "reference", "rate_per_minute": 0, "latency_ms": 300}),
    "issuer": ("i" * 24, {"profile": "default", "rate_per_minute": 3, "latency_ms": 0, "per_tenant": True}),
}


@pytest.fixture(scope="module")
def tenant(services: ServiceUrls, small_world: str, state_paths: StatePaths) -> str:
    """The small world's ledger in its truth schema (the SaaS vendor's database)."""
    loaded = load_ledger(state_paths.ledger_dir(small_world))
    with connection(services.warehouse) as conn:
        load_truth(conn, small_world, loaded)
    return small_world


@pytest.fixture(scope="module")
def records(tenant: str, state_paths: StatePaths) -> list[dict[str, Any]]:
    return load_ledger(state_paths.ledger_dir(tenant)).records


@pytest.fixture(scope="module")
def server(tenant: str, state_paths: StatePaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SaaS API process of this module's own (its own keys), on a free loopback port."""
    port = free_port()
    keys = {"keys": [{"id": name, "key": key, **plan} for name, (key, plan) in KEYS.items()]}
    env = {**os.environ, "CHURNBENCH_SAAS_API_KEYS": json.dumps(keys)}
    log = tmp_path_factory.mktemp("saas") / "saas.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "saas_mock", "--state-dir", str(state_paths.root),
                                 "--port", str(port), "--revalidate-s", "1"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"saas_mock did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def http(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as client:
        yield client


def call(http: httpx.Client, path: str, key: str | None = "open", **params: Any) -> httpx.Response:
    headers = {"X-API-Key": KEYS[key][0]} if key in KEYS else ({"X-API-Key": key} if key else {})
    return http.get(path, params=params, headers=headers)


# ---------------------------------------------------------------------------------------------------


def test_auth(http: httpx.Client, tenant: str) -> None:
    path = f"/v1/tenants/{tenant}/prices"
    assert call(http, path, None, as_of=DAY_A).status_code == 401
    assert call(http, path, "not-a-key-" * 3, as_of=DAY_A).status_code == 401
    ok = call(http, path, as_of=DAY_A)
    assert ok.status_code == 200 and ok.headers["X-SaaS-Profile"] == "unlimited"


def test_rate_limit_429_with_retry_after(http: httpx.Client, tenant: str) -> None:
    path = f"/v1/tenants/{tenant}/prices"
    answers = [call(http, path, "limited", as_of=DAY_A) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert 1 <= int(answers[-1].headers["Retry-After"]) <= 20
    assert call(http, path, "open", as_of=DAY_A).status_code == 200  # per key


def test_each_tenants_derived_key_has_its_own_quota(http: httpx.Client, tenant: str) -> None:
    from churn_assets.credentials import tenant_key

    issuer, other = KEYS["issuer"][0], "other-s1-000000"
    mine = [call(http, f"/v1/tenants/{tenant}/prices", tenant_key(issuer, tenant), as_of=DAY_A).status_code
            for _ in range(4)]
    assert mine == [200, 200, 200, 429]
    # The same issuer's key for another tenant has its own three requests (that world is unknown here: 404).
    theirs = [call(http, f"/v1/tenants/{other}/prices", tenant_key(issuer, other), as_of=DAY_A).status_code
              for _ in range(4)]
    assert theirs == [404, 404, 404, 429]


def test_latency_is_injected(http: httpx.Client, tenant: str) -> None:
    path = f"/v1/tenants/{tenant}/prices"
    call(http, path, "open", as_of=DAY_A)  # the (world, day) view is built
    started = time.perf_counter()
    slow = call(http, path, "slow", as_of=DAY_A)
    assert slow.status_code == 200 and time.perf_counter() - started >= 0.3
    assert slow.headers["X-SaaS-Profile"] == "reference"


def test_same_request_two_days_two_answers_matching_the_fold(http: httpx.Client, tenant: str,
                                                             records: list[dict[str, Any]]) -> None:
    states = {day: fold_ledger(records, day) for day in (DAY_A, DAY_B)}
    holders_a = assigned_licenses(states[DAY_A], DAY_A)
    holders_b = assigned_licenses(states[DAY_B], DAY_B)
    # A user whose entitlements changed between the two days.
    user = next(u for u in sorted(set(holders_a.values()) | set(holders_b.values()))
                if {lid for lid, h in holders_a.items() if h == u} != {lid for lid, h in holders_b.items() if h == u})
    answers = {}
    for day in (DAY_A, DAY_B):
        held = {lid for lid, h in assigned_licenses(states[day], day).items() if h == user}
        r = call(http, f"/v1/tenants/{tenant}/entitlements/{user}", as_of=day)
        if r.status_code == 404:  # not hired yet on the earlier day
            assert user not in existing_users(states[day], day)
            answers[day] = None
            continue
        body = r.json()
        assert {e["license_id"] for e in body["entitlements"]} == held
        answers[day] = body
        tickets = call(http, f"/v1/tenants/{tenant}/tickets", as_of=day, page_size=500).json()
        assert {t["ticket_id"] for t in tickets["items"] if t["status"] != "resolved"} == open_tickets(states[day], day)
    assert answers[DAY_A] != answers[DAY_B]


def test_client_backs_off_honours_retry_after_and_counts(server: str, tenant: str) -> None:
    with SaasClient(server, KEYS["throttled"][0], backoff_base_s=0.05) as client:
        for _ in range(3):
            assert client.prices(tenant, as_of=DAY_A)
        stats = client.stats
        assert client.profile == "default"  # the plan the server applied, as results record it
    # 120/min with a burst of 1: each call after the first waits for the server's Retry-After (1 s).
    assert stats.calls == 3 and stats.throttled >= 2 and stats.failures == 0
    assert stats.wait_seconds >= 2.0
    assert stats.requests == stats.calls + stats.retries
    assert stats.retries == stats.throttled + stats.errors_retried


def test_client_raises_the_transport_error(server: str, tenant: str) -> None:
    waits: list[float] = []
    with SaasClient(server, KEYS["limited"][0], max_retries=2, sleep=waits.append) as client:
        for _ in range(5):  # use up the key's minute
            try:
                client.prices(tenant, as_of=DAY_B)
            except TransportError as e:
                assert e.last_status == 429 and e.attempts == 3
                break
        else:
            pytest.fail("the limited key never ran out")
        assert waits and all(1 <= w <= 60 for w in waits)  # the server's Retry-After, honoured
        assert client.stats.failures == 1
    closed = f"http://127.0.0.1:{free_port()}"
    with SaasClient(closed, KEYS["open"][0], max_retries=2, backoff_base_s=0.01) as down, \
            pytest.raises(TransportError, match="connection failed") as raised:
        down.prices(tenant, as_of=DAY_A)
    assert raised.value.last_status is None and down.stats.errors_retried == 2
    with SaasClient(server, KEYS["open"][0]) as client, pytest.raises(SaasNotFound):
        client.entitlements(tenant, "usr_999999", as_of=DAY_A)


# --- the property run against the served OpenAPI schema ------------------------------------------------


def _mostly(valid: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`valid` nine times in ten, else `other`: most requests get past validation and reach the data."""
    return st.integers(0, 9).flatmap(lambda i: other if i == 0 else valid)


def _param_strategy(param: dict[str, Any], tenant: str) -> st.SearchStrategy[str | None]:
    """Values for one parameter, from its schema: in range, at and beyond the bounds, and junk text."""
    schema = param.get("schema", {})
    options = schema.get("anyOf", [schema])
    kinds = [o for o in options if o.get("type") != "null"]
    spec = kinds[0] if kinds else {}
    junk = st.text(max_size=40)
    if param["name"] == "world":
        valid: st.SearchStrategy[str] = _mostly(st.just(tenant), st.sampled_from(["nope-s1-abcdef", "Bad World"]))
    elif "enum" in spec:
        valid = st.sampled_from(spec["enum"])
    elif spec.get("format") == "date":  # the tenant's calendar, and days around it
        valid = _mostly(st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 30)),
                        st.dates(dt.date(1999, 1, 1), dt.date(2100, 1, 1))).map(dt.date.isoformat)
    elif spec.get("type") == "integer":
        lo, hi = spec.get("minimum", -10), spec.get("maximum", 10_000)
        valid = _mostly(st.integers(lo, min(hi, lo + 60)), st.integers(-(2 ** 40), 2 ** 40)).map(str)
    elif param["name"] == "user":
        valid = st.from_regex(r"usr_0000[0-9]{2}", fullmatch=True)
    elif param["name"] == "product":
        valid = st.from_regex(r"prd_00[0-4][0-9]", fullmatch=True)
    else:
        valid = junk
    value = _mostly(valid, junk)
    return value if param.get("in") == "path" or param.get("required") else _mostly(value, st.none())


@pytest.fixture(scope="module")
def openapi(http: httpx.Client) -> dict[str, Any]:
    schema = http.get("/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    return schema


def _required_fields(openapi: dict[str, Any], operation: dict[str, Any]) -> list[str]:
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    return openapi["components"]["schemas"][ref.rsplit("/", 1)[1]].get("required", [])


def test_property_run_against_the_openapi_schema_has_no_5xx(http: httpx.Client, openapi: dict[str, Any],
                                                            tenant: str) -> None:
    operations = [(path, op) for path, item in openapi["paths"].items() for method, op in item.items()
                  if method == "get"]
    assert len(operations) >= 5
    seen: dict[int, int] = {}

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        path, op = data.draw(st.sampled_from(operations), label="operation")
        params = op.get("parameters", [])
        values = {p["name"]: data.draw(_param_strategy(p, tenant), label=p["name"]) for p in params}
        url = path
        for p in params:
            if p["in"] == "path":
                url = url.replace("{" + p["name"] + "}", quote(values[p["name"]] or "", safe=""))
        query = {p["name"]: values[p["name"]] for p in params if p["in"] == "query" and values[p["name"]] is not None}
        key = data.draw(_mostly(st.just("open"), st.sampled_from([None, "bogus-key-" * 2])), label="key")
        response = call(http, url or "/", key, **query)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        assert response.status_code < 500, f"{url} {query}: {response.status_code} {response.text[:300]}"
        if response.status_code == 200 and "200" in op["responses"] and url.startswith("/v1/"):
            body = response.json()
            missing = [f for f in _required_fields(openapi, op) if f not in body]
            assert not missing, f"{url}: 200 without {missing}"

    run()
    # The run reached the interesting answers, not only validation errors.
    assert seen.get(200, 0) > 20 and seen.get(401, 0) > 0 and seen.get(404, 0) > 0 and seen.get(422, 0) > 0, seen


# --- the embedded service and an external URL -----------------------------------------------------------


def test_services_up_starts_the_saas_api(services: ServiceUrls, state_paths: StatePaths, tenant: str,
                                         records: list[dict[str, Any]]) -> None:
    assert services.saas is not None and services.saas.startswith("http://127.0.0.1:")
    assert (state_paths.services_dir / "saas-keys.json").stat().st_mode & 0o077 == 0  # keys file is private
    state = fold_ledger(records, DAY_B)
    with SaasClient(services.saas, saas_api_key(state_paths, world_id=tenant)) as client:
        prices = {p["product_id"]: p["list_price_usd"] for p in client.prices(tenant, as_of=DAY_B)}
    assert prices == {pid: p.list_price_on(dt.date.fromisoformat(DAY_B)) for pid, p in state.prices.products.items()}
    reference = httpx.get(f"{services.saas}/v1/tenants/{tenant}/prices", params={"as_of": DAY_B},
                          headers={"X-API-Key": saas_api_key(state_paths, "reference", world_id=tenant)}, timeout=10)
    assert reference.headers["X-SaaS-Profile"] == "reference"


def test_an_external_saas_url_is_used_not_started(server: str, state_paths: StatePaths,
                                                  monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(SAAS_URL_ENV, server)
    status = SAAS.ensure(StatePaths.resolve(tmp_path))  # a state folder with no SaaS of its own
    assert (status.mode, status.state, status.url) == ("external", "running", server)
    assert not (tmp_path / "services" / "saas.json").exists()
    saas = next(s for s in services_status(state_paths) if s.name == "saas")
    assert saas.mode == "external"
    monkeypatch.setenv("CHURNBENCH_SAAS_API_KEY", KEYS["open"][0])
    assert saas_api_key(state_paths) == KEYS["open"][0]


# ---------------------------------------------------------------------------------------------------
# Store parity by another path: the API's answers against SQL over the truth schema (no fold), as the
# `saas_api_matches_truth` check of operational_store partitions runs it
# ---------------------------------------------------------------------------------------------------


class _OnePriceOff(SaasClient):
    """A planted wrong answer: the price list with one product's price changed by a cent."""

    def prices(self, world: str, *, as_of: str) -> list[dict[str, Any]]:
        items = super().prices(world, as_of=as_of)
        items[3] = {**items[3], "list_price_usd": round(items[3]["list_price_usd"] + 0.01, 2)}
        return items


@pytest.mark.parametrize("day", [DAY_A, DAY_B])
def test_the_api_matches_the_truth_by_sql_and_a_wrong_price_is_named(server: str, tenant: str,
                                                                     services: ServiceUrls, day: str) -> None:
    from churn_assets.evaluation.independent.stores import StoreTruth, saas_problems

    with connection(services.warehouse, autocommit=True) as conn:
        truth = StoreTruth(conn, tenant, day)
        with SaasClient(server, KEYS["open"][0]) as client:
            assert saas_problems(client, truth) == []
            assert client.stats.calls > 40  # prices, tickets, every product's utilization, sampled users, a 404
        with _OnePriceOff(server, KEYS["open"][0]) as client:
            problems = saas_problems(client, truth)
    [problem] = problems
    assert problem.startswith(f"SaaS API of {tenant} as of {day}, /prices: prd_") and "list_price_usd" in problem
