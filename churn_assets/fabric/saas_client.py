"""The SaaS API client: timeouts, exponential backoff that honours `Retry-After`, typed errors, counters.

    client = SaasClient(base_url, api_key)
    client.entitlements(world, "usr_000042", as_of="2024-04-27")
    client.tickets(world, as_of=..., status="open", product="prd_0003")     # every page, merged
    client.utilization(world, "prd_0003", as_of=..., window_days=30)
    client.prices(world, as_of=...)
    client.stats                                                              # counters so far

Retried: 429 and 503 (after `Retry-After` when the server sends it, else the backoff), other 5xx, timeouts
and connection errors, up to `max_retries` retries per call with waits `backoff_base * 2**n` (capped at
`backoff_max`, optionally jittered). A server asking to wait longer than `MAX_RETRY_AFTER_S` is treated as
down: the call fails at once. After the last retry the call raises `TransportError`: the evaluation scores
that as a `transport_failure`, never as a wrong answer (docs/rules.md, "Transport failures"). Not retried: 401/403
(`SaasAuthError`), 404 (`SaasNotFound`: the tenant, user or product does not exist as of the day; its
`missing` says which, from the body's machine-readable field) and other 4xx (`SaasRequestError`, a bug in
the caller). Only a missing user or product is an answer ("the vendor does not know it today"); a missing
tenant, or a 404 that does not say what is missing (a wrong base URL), is an error of the caller.

The retry loop is tenacity's (`Retrying`: stop, wait, sleep and the hooks below); the policy is this module's:
what is retryable (`_Retryable`), the wait (`Retry-After`, else `backoff`, seeded so reruns wait alike), the
cap, the counters and the error raised when retries run out. The sleep is injected (tests record it).

Counters (`SaasStats`), which results report (docs/rules.md, "SaaS mock"): `calls` (API calls made),
`requests` (HTTP attempts), `retries`, `throttled` (429s absorbed, i.e. followed by a retry),
`errors_retried` (5xx, timeouts and connection errors followed by a retry), `failures` (calls that raised
`TransportError`), `wait_seconds` (time spent waiting between attempts). They add up:
`requests == calls + retries` and `retries == throttled + errors_retried`.
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, NoReturn
from urllib.parse import quote

import httpx
import tenacity

from churn_assets.errors import UserFacingError

KEY_HEADER = "X-API-Key"
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_RETRIES = 6
DEFAULT_BACKOFF_BASE_S = 0.25
DEFAULT_BACKOFF_MAX_S = 30.0
MAX_RETRY_AFTER_S = 120.0  # a server asking for a longer pause is treated as down: fail the call instead
PAGE_SIZE = 500
RETRY_AFTER_STATUSES = (429, 503)  # the answers whose `Retry-After` says when to come back (RFC 9110, 10.2.3)


def segment(value: str) -> str:
    """One URL path segment: every character that is not unreserved is percent-encoded (`/`, `?`, `#` and `..`
    in a user id cannot reach another endpoint or tenant); query parameters are httpx's to encode."""
    if value in (".", ".."):  # dot segments are resolved away by URL normalisation: never a valid id anyway
        return value.replace(".", "%2E")
    return quote(value, safe="")


class SaasError(UserFacingError):
    """Any failure of a SaaS API call; the message names the endpoint."""


class TransportError(SaasError):
    """The call did not get an answer after its retries (429s, 5xx, timeouts, refused connections)."""

    # Set on the way up, when present (read with getattr): what the failed answer had read (`arms.base`) and what
    # the model had spent on it (`arms.agents.llm`).
    traces: list[Any]
    usage: Any

    def __init__(self, message: str, *, attempts: int, last_status: int | None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last_status = last_status


class SaasAuthError(SaasError):
    """401/403: the API key is missing or not accepted."""


class SaasNotFound(SaasError):
    """404: the tenant, user or product does not exist (as of the day asked).

    `missing` is the answer's machine-readable field (`tenant`, `user`, `product`), None when the body has
    none (a path the API does not serve: a wrong base URL or an older API)."""

    def __init__(self, message: str, *, missing: str | None = None) -> None:
        super().__init__(message)
        self.missing = missing


class SaasRequestError(SaasError):
    """Another 4xx: the request itself is wrong."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SaasStats:
    calls: int = 0
    requests: int = 0
    retries: int = 0
    throttled: int = 0
    errors_retried: int = 0
    failures: int = 0
    wait_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __sub__(self, other: SaasStats) -> SaasStats:
        """Counters of a span: `after - before`."""
        return SaasStats(**{k: getattr(self, k) - getattr(other, k) for k in self.__dataclass_fields__})


def parse_retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from a `Retry-After` header (delay-seconds or an HTTP date); None when absent/bad."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - now()
    return max(0.0, seconds)


class SaasClient:
    """A client of one SaaS API deployment, safe to share between threads (counters are locked)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_base_s: float = DEFAULT_BACKOFF_BASE_S,
        backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
        jitter: float = 0.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        seed: int = 0,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.jitter = jitter
        self._sleep = sleep
        self._random = random.Random(seed)  # jitter only; seeded so that reruns wait alike
        self._http = httpx.Client(base_url=self.base_url, headers={KEY_HEADER: api_key},
                                  timeout=httpx.Timeout(timeout_s), transport=transport)
        self._lock = threading.Lock()
        self._stats = SaasStats()
        # The plan the server applies to our key (`X-SaaS-Profile`), for results to record; None until known.
        self.profile: str | None = None

    # -- counters ---------------------------------------------------------------------------------

    @property
    def stats(self) -> SaasStats:
        with self._lock:
            return self._stats

    def _count(self, **deltas: float) -> None:
        with self._lock:
            s = self._stats
            self._stats = SaasStats(**{k: getattr(s, k) + deltas.get(k, 0) for k in s.__dataclass_fields__})

    # -- the retry loop ---------------------------------------------------------------------------

    def backoff(self, retry: int) -> float:
        """Wait before retry number `retry` (0-based) when the server gave no `Retry-After`."""
        factor: int = 2 ** retry  # a non-negative exponent: an int
        wait = min(self.backoff_max_s, self.backoff_base_s * factor)
        if self.jitter:
            wait *= 1.0 + self.jitter * (2 * self._random.random() - 1)
        return max(0.0, wait)

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """GET `path` and return its JSON, retrying as the module doc says."""
        clean = {k: str(v) for k, v in (params or {}).items() if v is not None}
        what = f"GET {path}"
        self._count(calls=1)
        # One controller per call (cheap): it reads max_retries as the call starts.
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Retryable),
            wait=self._wait,
            stop=tenacity.stop_after_attempt(self.max_retries + 1) | _StopWhenAskedToWaitTooLong(),
            before_sleep=self._count_retry,
            sleep=lambda seconds: self._sleep(float(seconds)),  # tenacity passes a float subclass
            retry_error_callback=lambda state: self._give_up(what, state),
        )
        return retrying(self._attempt, path, clean, what)

    def _attempt(self, path: str, params: dict[str, str], what: str) -> Any:
        """One HTTP request: its JSON, a typed error that is not retried, or `_Retryable`."""
        self._count(requests=1)
        try:
            response = self._http.get(path, params=params)
        except httpx.TimeoutException as e:
            raise _Retryable(f"timed out ({type(e).__name__})", None, None) from e
        except httpx.TransportError as e:
            raise _Retryable(f"connection failed ({type(e).__name__}: {e})", None, None) from e
        status = response.status_code
        if status < 400:
            self.profile = response.headers.get("X-SaaS-Profile", self.profile)
            return response.json()
        detail = _detail(response)
        if status in (401, 403):
            raise SaasAuthError(f"{what}: {status} {detail} (check CHURNBENCH_SAAS_API_KEY or the "
                                "state folder's services/saas-keys.json)")
        if status == 404:
            raise SaasNotFound(f"{what}: {detail}", missing=_missing(response))
        if status < 500 and status != 429:
            raise SaasRequestError(f"{what}: {status} {detail}", status=status)
        problem = f"429 rate limited ({detail})" if status == 429 else f"{status} {detail}"
        retry_after = parse_retry_after(response.headers.get("Retry-After")) if status in RETRY_AFTER_STATUSES \
            else None
        raise _Retryable(problem, status, retry_after)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """Seconds before the next attempt: the server's `Retry-After` exactly, else the backoff."""
        failed = _failure(state)
        if failed.retry_after is not None:
            return failed.retry_after
        if state.attempt_number > self.max_retries:
            # tenacity asks for the wait before it checks the stop; no retry follows this attempt, and
            # drawing a jittered wait here would move the seeded sequence the next calls wait by.
            return 0.0
        return self.backoff(state.attempt_number - 1)

    def _count_retry(self, state: tenacity.RetryCallState) -> None:
        """Before each wait: one retry, absorbing a 429 (`throttled`) or an error (`errors_retried`)."""
        throttled = _failure(state).status == 429
        self._count(retries=1, throttled=int(throttled), errors_retried=int(not throttled),
                    wait_seconds=state.upcoming_sleep)

    def _give_up(self, what: str, state: tenacity.RetryCallState) -> NoReturn:
        """Retries exhausted (or the server asks for too long a pause): count the failure, raise."""
        failed = _failure(state)
        problem = failed.problem
        if state.attempt_number <= self.max_retries:  # stopped by the cap, not by the attempts
            problem += f"; the server asks to wait {state.upcoming_sleep:.0f} s, more than {MAX_RETRY_AFTER_S:.0f} s"
        self._count(failures=1)
        raise TransportError(f"{what} failed after {state.attempt_number} attempt(s): {problem}",
                             attempts=state.attempt_number, last_status=failed.status)

    # -- endpoints --------------------------------------------------------------------------------

    def entitlements(self, world: str, user_id: str, *, as_of: str) -> dict[str, Any]:
        body: dict[str, Any] = self.get(f"/v1/tenants/{segment(world)}/entitlements/{segment(user_id)}",
                                        {"as_of": as_of})
        return body

    def tickets_page(self, world: str, *, as_of: str, status: str | None = None, product: str | None = None,
                     page: int = 1, page_size: int = PAGE_SIZE) -> dict[str, Any]:
        body: dict[str, Any] = self.get(f"/v1/tenants/{segment(world)}/tickets", {
            "as_of": as_of, "status": status, "product": product, "page": page, "page_size": page_size})
        return body

    def iter_tickets(self, world: str, *, as_of: str, status: str | None = None,
                     product: str | None = None, page_size: int = PAGE_SIZE) -> Iterator[dict[str, Any]]:
        page: int | None = 1
        while page is not None:
            body = self.tickets_page(world, as_of=as_of, status=status, product=product, page=page,
                                     page_size=page_size)
            yield from body["items"]
            page = body["next_page"]

    def tickets(self, world: str, *, as_of: str, status: str | None = None,
                product: str | None = None) -> list[dict[str, Any]]:
        """Every matching ticket (all pages)."""
        return list(self.iter_tickets(world, as_of=as_of, status=status, product=product))

    def utilization(self, world: str, product_id: str, *, as_of: str, window_days: int = 30) -> dict[str, Any]:
        body: dict[str, Any] = self.get(f"/v1/tenants/{segment(world)}/products/{segment(product_id)}/utilization",
                                        {"as_of": as_of, "window_days": window_days})
        return body

    def prices(self, world: str, *, as_of: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get(f"/v1/tenants/{segment(world)}/prices", {"as_of": as_of})["items"]
        return items

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SaasClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Retryable(Exception):
    """An attempt that may be retried: what went wrong, the HTTP status (None without an answer), and the
    server's `Retry-After` in seconds (None when it sent none)."""

    def __init__(self, problem: str, status: int | None, retry_after: float | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.status = status
        self.retry_after = retry_after


def _failure(state: tenacity.RetryCallState) -> _Retryable:
    """The failure of the attempt just made (the retry predicate lets only `_Retryable` through)."""
    failed = state.outcome.exception() if state.outcome is not None else None
    if not isinstance(failed, _Retryable):
        raise AssertionError(f"tenacity retried a non-retryable outcome: {failed!r}")
    return failed


class _StopWhenAskedToWaitTooLong(tenacity.stop.stop_base):
    # A `stop_base` rather than a function, so that `stop_after_attempt(...) | ...` is typed.
    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        # tenacity computes the wait before the stop, so `upcoming_sleep` is the wait that would follow.
        return retry_state.upcoming_sleep > MAX_RETRY_AFTER_S


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:300]
    return str(body)[:200]


def _missing(response: httpx.Response) -> str | None:
    """The 404 body's `missing` field (what does not exist), None when absent."""
    try:
        body = response.json()
    except ValueError:
        return None
    value = body.get("missing") if isinstance(body, dict) else None
    return value if isinstance(value, str) else None
