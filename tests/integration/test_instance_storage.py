"""The Dagster instance of a state folder is created by one process at a time (`storage_schema_lock`).

CI met two commands started together on a new state folder both creating dagster-postgres' tables, one of
them failing with `type "event_logs" already exists` (a Postgres answer to concurrent CREATE TABLEs that
dagster-postgres does not retry). The race itself is rare (none in 41 rounds of 2, 4 and 8 processes
opening an instance at once on a new database, on this machine), so the first test checks the mechanism
deterministically: while the lock is held elsewhere, `open_instance` waits (it fails without the lock: tried).
The second opens instances at once on a new database, as the two batches did.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from churn_assets.fabric.postgres import connection
from churn_assets.orchestration.materialize import STORAGE_SCHEMA_LOCK, open_instance
from churn_assets.services import ServiceUrls, with_database, write_dagster_yaml
from churn_assets.state import StatePaths

pytestmark = pytest.mark.integration


@pytest.fixture
def new_storage(services: ServiceUrls, tmp_path: Path) -> Iterator[tuple[StatePaths, ServiceUrls]]:
    """A state folder whose Dagster storage is a database of its own with no tables yet (dropped at the end)."""
    db = f"dagster_{uuid.uuid4().hex[:10]}"
    with connection(services.postgres_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    urls = dataclasses.replace(services, dagster_storage=with_database(services.postgres_server, db))
    paths = StatePaths.resolve(tmp_path / "state").ensure()
    write_dagster_yaml(paths, urls)
    try:
        yield paths, urls
    finally:
        with connection(services.postgres_server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def _tables(url: str) -> set[str]:
    with connection(url) as conn:
        return {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def test_an_instance_waits_while_another_process_creates_the_schema(
        new_storage: tuple[StatePaths, ServiceUrls]) -> None:
    paths, urls = new_storage
    opened: list[object] = []
    with connection(urls.dagster_storage, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext(%s))", (STORAGE_SCHEMA_LOCK,))
        opener = threading.Thread(target=lambda: opened.append(open_instance(paths, urls)), daemon=True)
        opener.start()
        opener.join(3.0)
        assert opener.is_alive() and not opened, "open_instance did not wait for the storage schema lock"
        assert "event_logs" not in _tables(urls.dagster_storage)  # nothing created meanwhile
        holder.execute("SELECT pg_advisory_unlock(hashtext(%s))", (STORAGE_SCHEMA_LOCK,))
    opener.join(60.0)
    assert not opener.is_alive() and len(opened) == 1
    opened[0].dispose()  # type: ignore[attr-defined]
    assert {"event_logs", "runs", "jobs"} <= _tables(urls.dagster_storage)


def test_instances_created_at_once_on_a_new_database_all_open(new_storage: tuple[StatePaths, ServiceUrls]) -> None:
    paths, urls = new_storage
    go = threading.Barrier(4)
    outcomes: list[str] = []

    def open_one() -> None:
        go.wait()
        try:
            open_instance(paths, urls).dispose()
            outcomes.append("ok")
        except Exception as e:  # the outcome is the assertion below
            outcomes.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120.0)
    assert outcomes == ["ok"] * 4, outcomes
