"""The services of a state folder together: started in parallel (each after what it depends on), found,
health-checked, stopped in reverse order; the URLs they answer on (and the settings a worker on another host needs
to reach them over TCP, `worker_settings`); and the translation of a connection lost mid-command into an error
naming the service that died."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from churn_assets.services.base import (
    DAGSTER_DATABASE,
    DAGSTER_POSTGRES_URL_ENV,
    MONGODB_URI_ENV,
    POSTGRES_URL_ENV,
    SAAS_API_KEY_ENV,
    SAAS_KEY_ISSUER_ENV,
    SAAS_URL_ENV,
    SERVICE_HOST_ENV,
    WAREHOUSE_DATABASE,
    Service,
    ServiceError,
    ServiceStatus,
    ServiceUrls,
    is_connection_error,
    libpq_url,
    one_line,
    redact,
    service_host,
    with_database,
)
from churn_assets.services.dagster_home import write_dagster_yaml
from churn_assets.services.engine import (
    BROKER_SERVICE,
    BROKER_URL_ENV,
    broker_url_of_record,
    engine_statuses,
    stop_engine,
)
from churn_assets.services.llm import LLM, llm_status
from churn_assets.services.mongo import MongoService
from churn_assets.services.postgres import PostgresService
from churn_assets.services.process import read_record, services_lock, terminate
from churn_assets.services.saas import SaasService
from churn_assets.state import StatePaths
from churn_assets.unique_keys import load_json

POSTGRES = PostgresService()
MONGO = MongoService()
SAAS = SaasService()
# Started in parallel, each after its `depends_on`; stopped in reverse order.
SERVICES: list[Service] = [POSTGRES, MONGO, SAAS]
# Started by what needs them, not by `services up` (the local model server: by an `--agent llm` evaluation);
# shown by `services status` once started, stopped first by `services down`.
ON_DEMAND: list[Service] = [LLM]


def start_services(paths: StatePaths | None = None,
                   names: Sequence[str] | None = None) -> list[ServiceStatus]:
    """Start (or find, or health-check when external) every service; write the Dagster instance config.

    Services start in parallel threads (Postgres initdb and the Mongo server's import time overlap).
    """
    paths = (paths or StatePaths.resolve()).ensure()
    wanted = [s for s in SERVICES if names is None or s.name in names]
    with services_lock(paths), ThreadPoolExecutor(max_workers=len(wanted) or 1) as pool:
        futures: dict[str, Future[ServiceStatus]] = {}
        for service in wanted:
            deps = [futures[d] for d in service.depends_on if d in futures]
            futures[service.name] = pool.submit(_after, deps, service.ensure, paths)
        statuses = [futures[s.name].result() for s in wanted]
        if names is None or POSTGRES.name in names:
            write_dagster_yaml(paths, urls_from(statuses, paths))
    return statuses


def _after(deps: list[Future[ServiceStatus]], fn: Callable[[StatePaths], ServiceStatus],
           paths: StatePaths) -> ServiceStatus:
    for dep in deps:
        dep.result()
    return fn(paths)


def ensure_services(paths: StatePaths | None = None) -> ServiceUrls:
    """The URLs of every service, starting embedded ones that are not running (fast when they are)."""
    paths = paths or StatePaths.resolve()
    return urls_from(start_services(paths), paths)


def urls_from(statuses: Sequence[ServiceStatus], paths: StatePaths) -> ServiceUrls:
    by_name = {s.name: s for s in statuses}
    pg, mongo = by_name.get(POSTGRES.name), by_name.get(MONGO.name)
    if pg is None or mongo is None or pg.url is None or mongo.url is None:
        raise ServiceError("internal: Postgres and Mongo must both be resolved")
    server = libpq_url(pg.url)
    if pg.mode == "external":
        warehouse = server
        dagster = libpq_url(os.environ.get(DAGSTER_POSTGRES_URL_ENV) or server)
    else:
        warehouse = with_database(server, WAREHOUSE_DATABASE)
        dagster = with_database(server, DAGSTER_DATABASE)
    saas = by_name["saas"].url if "saas" in by_name else None
    embedded = frozenset(s.name for s in statuses if s.mode == "embedded")
    return ServiceUrls(postgres_server=server, warehouse=warehouse, dagster_storage=dagster,
                       mongodb=mongo.url, saas=saas, embedded=embedded)


@dataclass(frozen=True)
class WorkerSetting:
    """One environment variable a worker on another host needs to reach this host's services."""

    name: str
    value: str
    secret: bool  # a password or key, or a URL carrying one: masked unless asked for

    def shown(self, *, secrets: bool) -> str:
        if not self.secret or secrets:
            return self.value
        return redact(self.value) if "://" in self.value else "***"


def worker_settings(paths: StatePaths) -> tuple[list[WorkerSetting], list[str]]:
    """The settings (and notes) that point a worker on another host at this state folder's services, as the
    variables that select external services (so the worker starts none): the embedded Postgres over TCP with its
    superuser's password (warehouse and Dagster storage), the arm roles' secret, the MongoDB-protocol server and the
    SaaS API with its default profile's issuer key (the local model server, when it runs, is a note); an external
    service's own variables are passed on as they are. Raises when a core embedded service is not running."""
    from churn_assets.credentials import read_secret_file
    from churn_assets.fabric.roles import ARM_PASSWORD_ENV, arm_secret
    from churn_assets.services.llm import NAME as LLM_NAME
    from churn_assets.services.saas import saas_keys_file

    out: list[WorkerSetting] = []
    notes: list[str] = []
    wanted_host = service_host()

    def passed_on(*names: str, secret: bool) -> None:
        out.extend(WorkerSetting(n, os.environ[n], secret) for n in names if os.environ.get(n))

    def running(service: Service) -> dict[str, object]:
        status = service.status(paths)
        record = read_record(paths, service.name) or {}
        if status.state != "running":
            raise ServiceError(f"{service.label} of {paths.root} is {status.state}: `churnbench services up` "
                               "first")
        host = str(record.get("host") or "127.0.0.1")
        if host != wanted_host:
            notes.append(f"{service.name} is bound to {host}, not {SERVICE_HOST_ENV}={wanted_host}: "
                         "`churnbench services down && churnbench services up` binds it again")
        return {"url": status.url, **record}

    if POSTGRES.external_url():
        passed_on(POSTGRES_URL_ENV, DAGSTER_POSTGRES_URL_ENV, secret=True)
    else:
        running(POSTGRES)
        address = POSTGRES.tcp_address(paths)
        if address is None:
            raise ServiceError(f"{POSTGRES.label} of {paths.root} listens on its Unix socket only (started by an "
                               "older churnbench): `churnbench services down && churnbench services up` adds TCP")
        if address[0] != wanted_host:
            notes.append(f"postgres is bound to {address[0]}, not {SERVICE_HOST_ENV}={wanted_host}: "
                         "`churnbench services down && churnbench services up` binds it again")
        password = read_secret_file(paths.postgres_password_file)
        out.append(WorkerSetting(POSTGRES_URL_ENV, POSTGRES.tcp_url(*address, password, WAREHOUSE_DATABASE), True))
        out.append(WorkerSetting(DAGSTER_POSTGRES_URL_ENV, POSTGRES.tcp_url(*address, password, DAGSTER_DATABASE),
                                 True))
    out.append(WorkerSetting(ARM_PASSWORD_ENV, arm_secret(paths.arm_secret_file), True))
    if MONGO.external_url():
        passed_on(MONGODB_URI_ENV, secret=True)
    else:
        out.append(WorkerSetting(MONGODB_URI_ENV, str(running(MONGO)["url"]), False))
    if SAAS.external_url():
        passed_on(SAAS_URL_ENV, secret=False)
        passed_on(SAAS_KEY_ISSUER_ENV, SAAS_API_KEY_ENV, secret=True)
    else:
        out.append(WorkerSetting(SAAS_URL_ENV, str(running(SAAS)["url"]), False))
        keys = load_json(read_secret_file(saas_keys_file(paths)), str(saas_keys_file(paths)))["keys"]
        issuer = next((k for k in keys if k.get("profile") == "default" and k.get("per_tenant")), None)
        if issuer is None:
            raise ServiceError(f"{saas_keys_file(paths)} has no per-tenant key of the default profile: "
                               "`churnbench services down && churnbench services up` issues one")
        out.append(WorkerSetting(SAAS_KEY_ISSUER_ENV, str(issuer["key"]), True))
        if len(keys) > 1:
            notes.append(f"{SAAS_KEY_ISSUER_ENV} is the default profile's issuer key: a worker's SaaS requests "
                         "are served under that profile whatever --saas-profile says")
    broker = os.environ.get(BROKER_URL_ENV) or broker_url_of_record(paths)
    if broker:  # a celery run's broker (started by the first one): `churnbench worker` on the other host needs it
        out.append(WorkerSetting(BROKER_URL_ENV, broker, True))
    else:
        notes.append(f"no cell engine broker yet: the first run with --workers above 1 starts one ({BROKER_URL_ENV})")
    llm = llm_status(paths)
    if llm is not None and llm.state == "running" and llm.url:
        # Not a setting: CHURNBENCH_LLM_BASE_URL selects an external endpoint, whose agent settings (and so
        # agent id) differ from the local model's; how workers reach the model server is issue 47's item 3.
        alias = (read_record(paths, LLM_NAME) or {}).get("alias", "?")
        notes.append(f"the local model server serves {alias} at {llm.url}/v1 (not a worker setting: an external "
                     "endpoint has other agent settings)")
    return out, notes


def services_status(paths: StatePaths | None = None, *, check_health: bool = True,
                    on_demand: bool = True) -> list[ServiceStatus]:
    """Current state of every service, starting nothing; with `on_demand`, the on-demand ones that were started in
    this state folder too (after the core ones)."""
    paths = paths or StatePaths.resolve()
    out = []
    for service in SERVICES:
        url = service.external_url()
        if url:
            try:
                out.append(service.external_status(url) if check_health else ServiceStatus(
                    service.name, service.label, "external", "running", url=url))
            except ServiceError as e:
                out.append(ServiceStatus(service.name, service.label, "external", "unresponsive", url=url,
                                         detail=str(e)))
        else:
            out.append(service.status(paths, check_health=check_health))
    llm = llm_status(paths, check_health=check_health) if on_demand else None
    engine = engine_statuses(paths, check_health=check_health) if on_demand else []
    return out + ([llm] if llm is not None else []) + engine


def stop_services(paths: StatePaths | None = None) -> list[ServiceStatus]:
    """Stop the embedded services of this state folder; external ones are never touched."""
    paths = paths or StatePaths.resolve()
    if not paths.root.exists():
        # The state folder was deleted with services running: stop what can still be found by path.
        POSTGRES._stop_postmaster(paths)
        for owner in (BROKER_SERVICE, LLM, SAAS, MONGO):
            for proc in owner.owned_processes(paths):
                terminate(proc.pid, proc.create_time())
        return []
    with services_lock(paths):
        out = stop_engine(paths)  # the workers first: they use every other service
        if llm_status(paths) is not None:
            out.append(LLM.stop(paths))
        for service in reversed(SERVICES):  # dependents first
            if service.external_url():
                out.append(ServiceStatus(service.name, service.label, "external", "running",
                                         url=service.external_url(), action="left alone (external)"))
            else:
                out.append(service.stop(paths))
        return list(reversed(out))  # the core services in start order, the on-demand ones last


def purge_embedded_data(paths: StatePaths) -> None:
    """Stop the embedded services and delete their data (the Postgres cluster outside the state folder
    included). Used by test sessions, whose state folders are temporary."""
    stop_services(paths)
    if paths.pg_home.exists():
        shutil.rmtree(paths.pg_home, ignore_errors=True)
    shutil.rmtree(paths.services_dir, ignore_errors=True)


@contextlib.contextmanager
def service_errors(paths: StatePaths | None = None) -> Iterator[None]:
    """Turn a connection lost in the middle of a command into a ServiceError naming the dead service."""
    try:
        yield
    except ServiceError:
        raise
    except Exception as e:
        if not is_connection_error(e):
            raise
        paths = paths or StatePaths.resolve()
        raise_if_a_service_died(paths, e)
        raise ServiceError(f"lost the connection to a service: {one_line(e)}") from e


def raise_if_a_service_died(paths: StatePaths, cause: BaseException | None = None,
                            settle_s: float = 1.0) -> None:
    """A ServiceError naming every embedded service of `paths` that is no longer running (cheap: pid
    checks only). For callers that saw a failure and want to know whether a service is the reason.

    A killed process closes its sockets before it is gone from the process table, so a client can see
    the connection drop while the pid still looks alive: look again for up to `settle_s`."""
    deadline = time.monotonic() + settle_s
    while True:
        # the core services: a dead model server is named by the evaluation that talks to it (`llm_server_failure`)
        statuses = services_status(paths, check_health=False, on_demand=False)
        gone = [s for s in statuses if s.mode == "embedded" and s.state in ("dead", "stopped")]
        if gone or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if gone:
        names = "; ".join(f"{s.label}: {s.detail}" for s in gone)
        raise ServiceError(f"a service of state folder {paths.root} stopped during the command "
                           f"({names}); `churnbench services up` starts it again") from cause
