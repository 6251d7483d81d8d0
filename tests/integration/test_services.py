"""Embedded services against the real servers: Postgres 16 + pgvector, nx-27017, the Dagster instance,
found again by a second `up`, isolated per state folder, failing fast when killed or hung."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg2
import pytest

from churn_assets.services import (
    MONGO,
    MONGODB_URI_ENV,
    POSTGRES,
    POSTGRES_URL_ENV,
    SAAS_URL_ENV,
    ServiceError,
    ServiceUrls,
    ensure_services,
    libpq_url,
    mongo_client,
    purge_embedded_data,
    service_errors,
    services_status,
    start_services,
    stop_services,
    with_driver,
)
from churn_assets.state import StatePaths

pytestmark = pytest.mark.integration
CliEnv = Callable[..., dict[str, str]]


def _scalar(url: str, sql: str) -> object:
    conn = psycopg2.connect(libpq_url(url), connect_timeout=3)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()[0]
    finally:
        conn.close()


@pytest.fixture(scope="module")
def other_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatePaths]:
    """A second state folder with its own services (for isolation and kill tests); purged at the end."""
    paths = StatePaths.resolve(tmp_path_factory.mktemp("other-state"))
    try:
        start_services(paths)
        yield paths
    finally:
        purge_embedded_data(paths)


# ---------------------------------------------------------------------------------------------------


def test_postgres_is_16_with_pgvector_similarity(services: ServiceUrls) -> None:
    version = str(_scalar(services.warehouse, "SELECT version()"))
    assert version.startswith("PostgreSQL 16."), version
    conn = psycopg2.connect(services.warehouse)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
            cur.execute("CREATE TEMP TABLE items (id int, embedding vector(3))")
            cur.execute("INSERT INTO items VALUES (1, '[1,0,0]'), (2, '[0,1,0]'), (3, '[0.9,0.1,0]')")
            cur.execute("SELECT id FROM items ORDER BY embedding <=> '[1,0.05,0]' LIMIT 2")
            assert [r[0] for r in cur.fetchall()] == [1, 3]
    finally:
        conn.close()


def test_dagster_and_warehouse_are_separate_databases(services: ServiceUrls) -> None:
    assert _scalar(services.dagster_storage, "SELECT current_database()") == "dagster"
    assert _scalar(services.warehouse, "SELECT current_database()") == "churnbench"


def test_mongo_round_trip_and_databases_stay_isolated(services: ServiceUrls) -> None:
    client = mongo_client(services.mongodb)
    a, b = f"iso_a_{uuid.uuid4().hex[:6]}", f"iso_b_{uuid.uuid4().hex[:6]}"
    try:
        client[a].users.insert_many([{"_id": "usr_1", "cc": "cc_001"}, {"_id": "usr_2", "cc": "cc_002"}])
        client[b].users.insert_one({"_id": "usr_1", "cc": "cc_999"})
        assert client[a].users.find_one({"_id": "usr_1"})["cc"] == "cc_001"
        assert client[b].users.count_documents({}) == 1
        client[b].users.delete_many({})  # in single-file mode this would empty `a` too
        assert client[a].users.count_documents({}) == 2
        assert client[b].users.count_documents({}) == 0
    finally:
        client.drop_database(a)
        client.drop_database(b)
        client.close()


def test_second_up_finds_the_running_services(services: ServiceUrls, state_paths: StatePaths,
                                              churnbench_exe: str, cli_env: CliEnv) -> None:
    before = {s.name: s.pid for s in services_status(state_paths)}
    again = start_services(state_paths)
    assert {s.name: s.action for s in again} == {"postgres": "already running", "mongo": "already running",
                                                 "saas": "already running"}
    assert {s.name: s.pid for s in again} == before
    # The real CLI, warm: finds them through the state folder only (how fast: bench/bench_services.py).
    out = subprocess.run([churnbench_exe, "services", "up"], env=cli_env(state_paths.root),
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.count("already running") == 3, out
    assert str(before["mongo"]) in out and str(before["postgres"]) in out


def test_instance_stores_runs_in_postgres(small_world: str, state_paths: StatePaths,
                                          services: ServiceUrls) -> None:
    import dagster as dg
    from dagster_postgres import PostgresRunStorage

    # A fresh instance from DAGSTER_HOME, as `dagster dev` would open it.
    os.environ["DAGSTER_HOME"] = str(state_paths.dagster_home)
    try:
        instance = dg.DagsterInstance.get()
    finally:
        del os.environ["DAGSTER_HOME"]
    try:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        runs = instance.get_runs(dg.RunsFilter(tags={"dagster/partition": small_world}))
        # Other modules' negative tests fail runs of this world on purpose: some succeeded, all are readable.
        assert runs and any(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        # Read back through the instance (other modules may have materialized other worlds since).
        assert small_world in instance.get_materialized_partitions(dg.AssetKey("ledger"))
    finally:
        instance.dispose()
    stored = _scalar(services.dagster_storage, "SELECT count(*) FROM runs")
    assert isinstance(stored, int) and stored >= 1


def test_two_state_folders_run_side_by_side(services: ServiceUrls, state_paths: StatePaths,
                                            other_state: StatePaths) -> None:
    other = ensure_services(other_state)
    assert other.mongodb != services.mongodb
    assert other_state.pg_data != state_paths.pg_data
    assert _scalar(other.postgres_server, "SHOW data_directory") == str(other_state.pg_data)
    assert _scalar(services.postgres_server, "SHOW data_directory") == str(state_paths.pg_data)
    mine, theirs = mongo_client(services.mongodb), mongo_client(other.mongodb)
    try:
        theirs.side.marker.insert_one({"_id": "only-in-other"})
        assert mine.side.marker.count_documents({}) == 0
        assert theirs.side.marker.count_documents({}) == 1
    finally:
        theirs.drop_database("side")
        mine.drop_database("side")  # nx-27017 creates a database file on first read too
        mine.close()
        theirs.close()
    # Stopping the other folder's services leaves ours running.
    stop_services(other_state)
    assert all(s.state == "stopped" for s in services_status(other_state))
    assert all(s.running for s in services_status(state_paths))
    ensure_services(other_state)


def test_external_urls_start_and_stop_nothing(services: ServiceUrls, state_paths: StatePaths, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POSTGRES_URL_ENV, services.warehouse)
    monkeypatch.setenv(MONGODB_URI_ENV, services.mongodb)
    monkeypatch.setenv(SAAS_URL_ENV, services.saas or "")
    paths = StatePaths.resolve(tmp_path / "external-state")
    urls = ensure_services(paths)
    assert urls.embedded == frozenset()
    assert urls.warehouse == services.warehouse and urls.mongodb == services.mongodb
    assert not paths.pg_home.exists() and not paths.service_record("mongo").exists()
    assert urls.saas == services.saas and not paths.service_record("saas").exists()
    assert "postgresql+psycopg2://" in paths.dagster_yaml.read_text()
    assert {s.action for s in stop_services(paths)} == {"left alone (external)"}
    assert all(s.running for s in services_status(state_paths))


def test_external_url_that_does_not_answer_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POSTGRES_URL_ENV, "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv(MONGODB_URI_ENV, "mongodb://127.0.0.1:1/")
    paths = StatePaths.resolve(tmp_path / "bad-external")
    started = time.monotonic()
    with pytest.raises(ServiceError, match=r"CHURNBENCH_(POSTGRES_URL|MONGODB_URI)"):
        ensure_services(paths)
    assert time.monotonic() - started < 10
    assert not paths.pg_home.exists() and not paths.service_record("mongo").exists()


def test_down_stops_only_processes_churnbench_started(tmp_path: Path) -> None:
    """A record whose pid now belongs to another process (pid reuse) must not get that process killed."""
    paths = StatePaths.resolve(tmp_path / "foreign").ensure()
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        paths.services_dir.mkdir(parents=True, exist_ok=True)
        paths.service_record("mongo").write_text(
            f'{{"pid": {stranger.pid}, "create_time": 1.0, "url": "mongodb://127.0.0.1:1/", '
            '"started_by": "churnbench", "port": 1}')
        assert MONGO.status(paths).state == "dead"  # same pid, different process start time
        stop_services(paths)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_killed_mongo_is_reported_and_restarted(other_state: StatePaths, churnbench_exe: str,
                                                cli_env: CliEnv) -> None:
    urls = ensure_services(other_state)
    pid = MONGO.status(other_state).pid
    assert pid is not None
    client = mongo_client(urls.mongodb, timeout=2)
    client.kill_test.c.insert_one({"_id": 1})
    os.kill(pid, signal.SIGKILL)
    # Mid-command: the next operation fails within seconds with a message naming the service.
    started = time.monotonic()
    with pytest.raises(ServiceError, match=r"MongoDB-protocol server.*gone"), service_errors(other_state):
        client.kill_test.c.insert_one({"_id": 2})
    assert time.monotonic() - started < 10
    client.close()
    # The CLI says so, and `up` brings it back.
    status = subprocess.run([churnbench_exe, "services", "status"], env=cli_env(other_state.root),
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 1 and "mongo (dead)" in status.stderr
    again = {s.name: s for s in start_services(other_state)}
    assert again["mongo"].action == "restarted" and again["mongo"].pid != pid
    assert again["postgres"].action == "already running"


def test_postgres_killed_mid_materialization_gives_a_clear_error(other_state: StatePaths, churnbench_exe: str,
                                                                 cli_env: CliEnv) -> None:
    """`churnbench worlds materialize` of a 60-day world; Postgres is killed while the ledger is being
    written (its temporary file exists): the command exits 1 within seconds naming Postgres."""
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import add_world
    from churn_assets.world.config import load_config

    config = load_config(days=60, seed=9)
    world_id = config.world_id
    with open_session(other_state) as session:
        add_world(other_state, session.instance, config)
    env = cli_env(other_state.root)
    ledger_dir = other_state.ledger_dir(world_id)
    proc = subprocess.Popen([churnbench_exe, "worlds", "materialize", world_id], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Waiting for the writer to start is not what is timed (the command's imports and the services: over a
        # minute at load 9), only the exit after the kill below is.
        deadline = time.monotonic() + 240
        while not any(ledger_dir.glob(".ledger.jsonl.*.tmp")):  # the writer's own temporary file
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the ledger never started"
            time.sleep(0.01)
        pid = POSTGRES.status(other_state, check_health=False).pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    # Exits instead of waiting on the dead server: 17 s alone, 21 s at load 10 (decision 280); a hang is minutes.
    assert time.monotonic() - killed < 60
    last = err.strip().splitlines()[-1]
    assert last.startswith("churnbench: error:") and "Postgres" in last and "churnbench services up" in last
    assert ensure_services(other_state)  # restarts it for whoever comes next


def test_unresponsive_service_fails_fast_instead_of_hanging(other_state: StatePaths) -> None:
    ensure_services(other_state)
    pid = MONGO.status(other_state).pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # alive, accepting nothing
    try:
        started = time.monotonic()
        with pytest.raises(ServiceError, match="does not answer"):
            ensure_services(other_state)
        assert time.monotonic() - started < 10
    finally:
        os.kill(pid, signal.SIGCONT)
    assert ensure_services(other_state)


def test_url_helpers() -> None:
    url = "postgresql://u:secret@db:5432/x"
    assert with_driver(url) == "postgresql+psycopg2://u:secret@db:5432/x"
    assert libpq_url("postgres+psycopg://u@db/x") == "postgresql://u@db/x"
    with pytest.raises(ServiceError):
        libpq_url("mysql://u@db/x")
