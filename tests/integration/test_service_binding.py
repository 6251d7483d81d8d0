"""Every embedded service binds to the service address (CHURNBENCH_SERVICE_HOST) and a client given only the URLs of
`churnbench services urls` reaches it over TCP (issue 47, items 3 and 7; decision 324).

A fresh state folder's services are started with the address 127.0.0.2 (Linux routes all of 127/8 to the loopback
interface), then reached through their TCP URLs only: Postgres with the generated password (psycopg), the
MongoDB-protocol server (pymongo), the SaaS API and the local model server (`/health`). Nothing of theirs listens on
127.0.0.1; the password file is 0600 and the password is in no other file of the state folder nor in the server
log; a worker in another state folder given only those settings registers a world and materializes its ledger.
"""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import psycopg
import pytest

from churn_assets.services import (
    DAGSTER_POSTGRES_URL_ENV,
    MONGODB_URI_ENV,
    POSTGRES,
    POSTGRES_URL_ENV,
    SAAS_API_KEY_ENV,
    SAAS_URL_ENV,
    SERVICE_HOST_ENV,
    mongo_client,
    purge_embedded_data,
    start_services,
    worker_settings,
)
from churn_assets.services.base import SAAS_KEY_ISSUER_ENV, http_health
from churn_assets.services.llm import LLM, LlmServerConfig, ensure_llm_server
from churn_assets.services.process import port_open, read_record
from churn_assets.state import StatePaths

pytestmark = pytest.mark.integration
HOST = "127.0.0.2"
CliEnv = Callable[..., dict[str, str]]
# Variables that would point this test's processes at other servers or secrets.
FOREIGN_ENVS = (POSTGRES_URL_ENV, DAGSTER_POSTGRES_URL_ENV, MONGODB_URI_ENV, SAAS_URL_ENV, SAAS_API_KEY_ENV,
                SAAS_KEY_ISSUER_ENV, "CHURNBENCH_ARM_PASSWORD", "CHURNBENCH_LLM_BASE_URL")


@pytest.fixture(scope="module")
def bound(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatePaths]:
    """A fresh state folder whose services bind to 127.0.0.2; purged at the end."""
    paths = StatePaths.resolve(tmp_path_factory.mktemp("bound-state"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SERVICE_HOST_ENV, HOST)
        for name in FOREIGN_ENVS:
            mp.delenv(name, raising=False)
        try:
            start_services(paths)
            yield paths
        finally:
            purge_embedded_data(paths)


@pytest.fixture(scope="module")
def settings(bound: StatePaths) -> dict[str, str]:
    found, _notes = worker_settings(bound)
    return {s.name: s.value for s in found}


def _listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket `pid` listens on."""
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN}


def _service_pids(paths: StatePaths) -> dict[str, int]:
    return {name: int(record["pid"]) for name in ("postgres", "mongo", "saas", "llm")
            if (record := read_record(paths, name)) is not None}


def test_every_url_names_the_service_address(settings: dict[str, str]) -> None:
    for name in (POSTGRES_URL_ENV, DAGSTER_POSTGRES_URL_ENV, MONGODB_URI_ENV, SAAS_URL_ENV):
        assert urlsplit(settings[name]).hostname == HOST, name
    assert "host=" not in settings[POSTGRES_URL_ENV]  # TCP, never the socket


def test_postgres_over_tcp_asks_for_the_password(bound: StatePaths, settings: dict[str, str]) -> None:
    url = settings[POSTGRES_URL_ENV]
    with psycopg.connect(url, connect_timeout=5) as conn:
        user, address, db = conn.execute("SELECT current_user, host(inet_server_addr()), current_database()"
                                         ).fetchone() or ()
        assert (user, address, db) == ("postgres", HOST, "churnbench")
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone() == (1,)
    with psycopg.connect(settings[DAGSTER_POSTGRES_URL_ENV], connect_timeout=5) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("dagster",)
    parts = urlsplit(url)
    for wrong in (url.replace(f":{parts.password}@", ":wrong@"), url.replace(f":{parts.password}@", "@")):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(wrong, connect_timeout=5, sslmode="disable").close()


def test_mongo_and_saas_answer_on_their_tcp_urls(settings: dict[str, str]) -> None:
    client = mongo_client(settings[MONGODB_URI_ENV])
    try:
        collection = client["binding_test"]["items"]
        collection.insert_one({"_id": 1, "host": HOST})
        assert collection.find_one({"_id": 1}) == {"_id": 1, "host": HOST}
    finally:
        client.close()
    http_health(settings[SAAS_URL_ENV], 5.0)
    assert settings[SAAS_KEY_ISSUER_ENV]


def test_model_server_binds_to_the_service_address(bound: StatePaths) -> None:
    from churn_assets.arms.agents.local_models import LocalModelError, resolve_gguf

    try:
        gguf = resolve_gguf({})
    except LocalModelError:
        pytest.skip("no local model installed (bash scripts/install.sh --llm smollm2-135m)")
    base = ensure_llm_server(bound, LlmServerConfig(gguf.path, gguf.sha256, gguf.name, 2048, 1))
    assert urlsplit(base).hostname == HOST
    http_health(base.removesuffix("/v1"), 5.0)
    assert LLM.status(bound).state == "running"


def test_nothing_listens_on_127_0_0_1(bound: StatePaths, settings: dict[str, str]) -> None:
    pids = _service_pids(bound)
    assert {"postgres", "mongo", "saas"} <= pids.keys()
    for name, pid in pids.items():
        listening = _listening(pid)
        assert listening, name
        assert {address for address, _port in listening} == {HOST}, (name, listening)
        for _address, port in listening:
            assert not port_open(port, "127.0.0.1"), (name, port)
    assert POSTGRES.tcp_address(bound) == (HOST, urlsplit(settings[POSTGRES_URL_ENV]).port)


def test_password_file_is_private_and_the_password_is_logged_nowhere(bound: StatePaths, settings: dict[str, str],
                                                                      churnbench_exe: str, cli_env: CliEnv) -> None:
    secret_file = bound.postgres_password_file
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    password = secret_file.read_text().strip()
    assert len(password) >= 40 and urlsplit(settings[POSTGRES_URL_ENV]).password == password
    env = cli_env(bound.root, **{SERVICE_HOST_ENV: HOST})
    masked = subprocess.run([churnbench_exe, "services", "urls"], env=env, capture_output=True, text=True,
                            check=True, timeout=60)
    shown = subprocess.run([churnbench_exe, "services", "urls", "--show-secrets"], env=env, capture_output=True,
                           text=True, check=True, timeout=60)
    assert password not in masked.stdout + masked.stderr and f"postgres:***@{HOST}:" in masked.stdout
    assert f"export {POSTGRES_URL_ENV}=postgresql://postgres:{password}@{HOST}:" in shown.stdout
    haystacks = [p for p in bound.root.rglob("*") if p.is_file() and p != secret_file]
    haystacks += [p for p in (bound.pg_data / "log",) if p.is_file()]
    assert any(p.name == "saas.out" for p in haystacks)
    leaks = [str(p) for p in haystacks if password.encode() in p.read_bytes()]
    assert leaks == []


def test_a_worker_given_only_the_urls_materializes_a_world(bound: StatePaths, tmp_path: Path, churnbench_exe: str,
                                                           cli_env: CliEnv, settings: dict[str, str]) -> None:
    """The worker's state folder has no services of its own: every server is an 'external' one at 127.0.0.2."""
    worker = tmp_path / "worker-state"
    # No service address either: the worker binds nothing (the module's fixture set it for this process).
    env = {k: v for k, v in cli_env(worker, **settings).items() if k != SERVICE_HOST_ENV}
    status = subprocess.run([churnbench_exe, "services", "status"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    password = urlsplit(settings[POSTGRES_URL_ENV]).password
    assert password and password not in status.stdout
    assert status.stdout.count("external") >= 3
    added = subprocess.run([churnbench_exe, "worlds", "add", "--days", "30", "--materialize"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert added.returncode == 0, added.stdout[-2000:] + added.stderr[-2000:]
    assert "materialized ledger" in added.stdout
    assert not (worker / "services" / "postgres.json").exists()  # it started nothing
    with psycopg.connect(settings[DAGSTER_POSTGRES_URL_ENV], connect_timeout=5) as conn:
        runs = conn.execute("SELECT count(*) FROM runs WHERE status = 'SUCCESS'").fetchone()
    assert runs is not None and runs[0] >= 1  # its run is in the shared instance, reached over TCP
    for path in worker.rglob("*"):  # the password only in a private file (its Dagster instance config)
        if path.is_file() and password.encode() in path.read_bytes():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
