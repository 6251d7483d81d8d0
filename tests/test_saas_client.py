"""The SaaS client against a fake transport (httpx.MockTransport, the seam): backoff, Retry-After, the
typed errors, pagination, and counters that add up. No real waiting: the client's sleep is recorded."""

from __future__ import annotations

import email.utils
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from churn_assets.errors import UserFacingError
from churn_assets.fabric.saas_client import (
    MAX_RETRY_AFTER_S,
    SaasAuthError,
    SaasClient,
    SaasNotFound,
    SaasRequestError,
    SaasStats,
    TransportError,
    parse_retry_after,
)

BASE = "http://saas.test"
KEY = "k" * 24
Handler = Callable[[httpx.Request], httpx.Response]


def scripted(*steps: Any) -> tuple[Handler, list[httpx.Request]]:
    """A handler answering the i-th request with steps[i] (a Response, or an exception to raise);
    the last step repeats."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        step = steps[min(len(seen), len(steps) - 1)]
        seen.append(request)
        if isinstance(step, Exception):
            raise step
        return step

    return handle, seen


def ok(body: Any = None) -> httpx.Response:
    return httpx.Response(200, json=body if body is not None else {"ok": True})


def status(code: int, **headers: str) -> httpx.Response:
    return httpx.Response(code, json={"detail": f"status {code}"}, headers=headers)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make(sleeps: list[float]) -> Iterator[Callable[..., SaasClient]]:
    clients: list[SaasClient] = []

    def build(handler: Handler, **kwargs: Any) -> SaasClient:
        client = SaasClient(BASE, KEY, transport=httpx.MockTransport(handler), sleep=sleeps.append, **kwargs)
        clients.append(client)
        return client

    yield build
    for c in clients:
        c.close()


def assert_adds_up(stats: SaasStats, sleeps: list[float]) -> None:
    assert stats.requests == stats.calls + stats.retries
    assert stats.retries == stats.throttled + stats.errors_retried
    assert stats.wait_seconds == pytest.approx(sum(sleeps))
    assert stats.retries == len(sleeps)


# ---------------------------------------------------------------------------------------------------


def test_success_sends_the_key_and_the_as_of_day(make: Callable[..., SaasClient], sleeps: list[float]) -> None:
    handler, seen = scripted(ok({"items": [{"product_id": "prd_0000"}]}))
    client = make(handler)
    assert client.prices("w-s1-abcdef", as_of="2024-04-27") == [{"product_id": "prd_0000"}]
    assert seen[0].headers["X-API-Key"] == KEY
    assert seen[0].url.path == "/v1/tenants/w-s1-abcdef/prices"
    assert seen[0].url.params["as_of"] == "2024-04-27"
    assert client.stats == SaasStats(calls=1, requests=1)
    assert sleeps == []


def test_429_waits_exactly_retry_after_then_succeeds(make: Callable[..., SaasClient], sleeps: list[float]) -> None:
    handler, seen = scripted(status(429, **{"Retry-After": "3"}), status(429, **{"Retry-After": "1"}), ok())
    client = make(handler)
    assert client.get("/v1/x") == {"ok": True}
    assert len(seen) == 3
    assert sleeps == [3.0, 1.0]  # the server's word, not the backoff
    assert client.stats == SaasStats(calls=1, requests=3, retries=2, throttled=2, wait_seconds=4.0)
    assert_adds_up(client.stats, sleeps)


def test_429_without_retry_after_and_5xx_back_off_exponentially(
        make: Callable[..., SaasClient], sleeps: list[float]) -> None:
    handler, _ = scripted(status(429), status(503), status(500), status(502), ok())
    client = make(handler, backoff_base_s=0.5, backoff_max_s=3.0)
    client.get("/v1/x")
    assert sleeps == [0.5, 1.0, 2.0, 3.0]  # doubling, capped at backoff_max_s
    stats = client.stats
    assert (stats.throttled, stats.errors_retried, stats.failures) == (1, 3, 0)
    assert_adds_up(stats, sleeps)


def test_exhausted_retries_raise_the_transport_error(make: Callable[..., SaasClient], sleeps: list[float]) -> None:
    handler, seen = scripted(status(503))
    client = make(handler, max_retries=3, backoff_base_s=0.1)
    with pytest.raises(TransportError) as raised:
        client.get("/v1/x")
    err = raised.value
    assert isinstance(err, UserFacingError)
    assert (err.attempts, err.last_status) == (4, 503)
    assert "GET /v1/x failed after 4 attempt(s): 503" in str(err)
    assert len(seen) == 4 and len(sleeps) == 3
    assert client.stats == SaasStats(calls=1, requests=4, retries=3, errors_retried=3, failures=1,
                                     wait_seconds=pytest.approx(0.1 + 0.2 + 0.4))
    assert_adds_up(client.stats, sleeps)


def test_persistent_429_is_a_transport_failure_not_an_answer(
        make: Callable[..., SaasClient], sleeps: list[float]) -> None:
    handler, _ = scripted(status(429, **{"Retry-After": "2"}))
    client = make(handler, max_retries=2)
    with pytest.raises(TransportError, match="429 rate limited") as raised:
        client.get("/v1/x")
    assert raised.value.last_status == 429
    assert sleeps == [2.0, 2.0]
    assert (client.stats.throttled, client.stats.failures) == (2, 1)  # the last 429 was not absorbed
    assert_adds_up(client.stats, sleeps)


@pytest.mark.parametrize("exc", [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"),
                                 httpx.RemoteProtocolError("closed")])
def test_connection_errors_and_timeouts_are_retried(
        make: Callable[..., SaasClient], sleeps: list[float], exc: Exception) -> None:
    handler, _ = scripted(exc, ok())
    client = make(handler)
    assert client.get("/v1/x") == {"ok": True}
    assert client.stats.errors_retried == 1 and len(sleeps) == 1

    handler, _ = scripted(exc)
    failing = make(handler, max_retries=1)
    with pytest.raises(TransportError) as raised:
        failing.get("/v1/x")
    assert raised.value.last_status is None


@pytest.mark.parametrize(("code", "error"), [(401, SaasAuthError), (403, SaasAuthError), (404, SaasNotFound),
                                             (422, SaasRequestError), (400, SaasRequestError)])
def test_client_errors_are_not_retried(make: Callable[..., SaasClient], sleeps: list[float], code: int,
                                       error: type[Exception]) -> None:
    handler, seen = scripted(status(code))
    client = make(handler)
    with pytest.raises(error, match=f"status {code}"):
        client.get("/v1/x")
    assert len(seen) == 1 and sleeps == []
    assert client.stats == SaasStats(calls=1, requests=1)


@pytest.mark.parametrize(("body", "missing"), [
    ({"detail": "no tenant x", "missing": "tenant"}, "tenant"),
    ({"detail": "no product p", "missing": "product"}, "product"),
    ({"detail": "no user u", "missing": "user"}, "user"),
    ({"detail": "Not Found"}, None),  # a path the API does not serve (a wrong base URL)
])
def test_a_404_says_what_is_missing(make: Callable[..., SaasClient], body: dict[str, str],
                                    missing: str | None) -> None:
    handler, _ = scripted(httpx.Response(404, json=body))
    with pytest.raises(SaasNotFound) as raised:
        make(handler).get("/v1/x")
    assert raised.value.missing == missing


def test_a_retry_after_beyond_the_cap_fails_at_once(make: Callable[..., SaasClient], sleeps: list[float]) -> None:
    handler, seen = scripted(status(429, **{"Retry-After": str(int(MAX_RETRY_AFTER_S) + 60)}))
    client = make(handler)
    with pytest.raises(TransportError, match="asks to wait"):
        client.get("/v1/x")
    assert len(seen) == 1 and sleeps == []


def test_retry_after_as_an_http_date() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 7, usegmt=True)
    assert parse_retry_after(header, now=lambda: now) == pytest.approx(7.0)
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_tickets_follow_next_page(make: Callable[..., SaasClient]) -> None:
    pages = {1: {"items": [{"ticket_id": "t1"}, {"ticket_id": "t2"}], "next_page": 2},
             2: {"items": [{"ticket_id": "t3"}], "next_page": None}}
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return ok(pages[int(request.url.params["page"])])

    client = make(handler)
    tickets = client.tickets("w-s1-abcdef", as_of="2024-01-05", status="open", product="prd_0001")
    assert [t["ticket_id"] for t in tickets] == ["t1", "t2", "t3"]
    assert [r.url.params["page"] for r in seen] == ["1", "2"]
    assert all(r.url.params["status"] == "open" and r.url.params["product"] == "prd_0001" for r in seen)
    assert client.stats.calls == 2
    client.tickets_page("w-s1-abcdef", as_of="2024-01-05")
    assert "status" not in seen[-1].url.params and "product" not in seen[-1].url.params  # None is not sent


def test_jitter_stays_in_bounds_and_is_seeded(make: Callable[..., SaasClient]) -> None:
    handler, _ = scripted(ok())
    a, b = make(handler, jitter=0.5, seed=7), make(handler, jitter=0.5, seed=7)
    waits = [a.backoff(n) for n in range(5)]
    assert waits == [b.backoff(n) for n in range(5)]
    for n, w in enumerate(waits):
        base = min(a.backoff_max_s, a.backoff_base_s * 2 ** n)
        assert 0.5 * base <= w <= 1.5 * base


def test_counters_add_up_under_threads(make: Callable[..., SaasClient], sleeps: list[float]) -> None:
    lock = threading.Lock()
    count = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        with lock:
            count["n"] += 1
            n = count["n"]
        return status(429, **{"Retry-After": "0"}) if n % 3 == 0 else ok()

    client = make(handler)
    threads = [threading.Thread(target=lambda: [client.get("/v1/x") for _ in range(25)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = client.stats
    assert stats.calls == 100 and stats.failures == 0
    assert stats.requests == count["n"]
    assert_adds_up(stats, sleeps)
    span = stats - SaasStats(calls=40, requests=40)
    assert span.calls == 60


def test_503_waits_exactly_retry_after_other_5xx_back_off(
        make: Callable[..., SaasClient], sleeps: list[float]) -> None:
    # RFC 9110: Retry-After comes with 429 and 503; a 500 carrying one is still backed off.
    handler, _ = scripted(status(503, **{"Retry-After": "4"}), status(500, **{"Retry-After": "9"}), ok())
    client = make(handler, backoff_base_s=0.5)
    assert client.get("/v1/x") == {"ok": True}
    assert sleeps == [4.0, 1.0]  # the server's word, then backoff(1)
    assert client.stats == SaasStats(calls=1, requests=3, retries=2, errors_retried=2, wait_seconds=5.0)
    assert_adds_up(client.stats, sleeps)

    handler, seen = scripted(status(503, **{"Retry-After": str(int(MAX_RETRY_AFTER_S) + 1)}))
    down = make(handler)
    with pytest.raises(TransportError, match="503 status 503; the server asks to wait 121 s") as raised:
        down.get("/v1/x")
    assert (raised.value.attempts, raised.value.last_status, len(seen)) == (1, 503, 1)
    assert down.stats == SaasStats(calls=1, requests=1, failures=1)


def test_the_last_attempt_draws_no_jitter(make: Callable[..., SaasClient], sleeps: list[float]) -> None:
    # A call that runs out of retries waits before each retry only: the seeded jitter sequence the next
    # call waits by is the one a fresh client with the same seed would draw.
    handler, _ = scripted(status(500), status(500), status(500), status(500), ok())
    client = make(handler, max_retries=2, jitter=0.5, seed=3)
    with pytest.raises(TransportError):
        client.get("/v1/x")
    client.get("/v1/x")  # one more 500, then ok
    fresh = make(handler, max_retries=2, jitter=0.5, seed=3)
    assert sleeps == [fresh.backoff(0), fresh.backoff(1), fresh.backoff(0)]
    assert client.stats.failures == 1 and client.stats.retries == 3
