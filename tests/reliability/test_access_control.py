"""Access control against the real embedded services (issue 22, items 14, 15 and 17).

- Postgres: an arm connects as its world's role, with that world's password, and can read nothing of another
  world, nothing of its own world but the as-of views and staged tables, nothing in another database, and can
  write nothing, even after switching its session's read-only default off.
- The MongoDB-protocol server has no authentication (shown here: it does not know `saslStart`); an arm's
  connection (`ArmMongo`) opens only its world's databases and offers only reads.
- The SaaS API: a key reads its own tenant only (403 for any other), unknown and forged keys are 401.
- The SaaS client puts ids into URL paths percent-encoded.

Every refusal below is one entry of a list (`refused`, `attempts`), so the figures of
docs/guarantees.md are these lists' lengths; each test also shows that the refused thing exists and is
reachable for its rightful owner (no vacuous refusals).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from integration.warehouse_world import AT, Projected, projected_world

from churn_assets.fabric.arm_mongo import ArmAccessDenied, ArmMongo
from churn_assets.fabric.postgres import connection, drop_world_schemas, schema_name
from churn_assets.fabric.roles import (
    arm_password,
    arm_role,
    arm_secret,
    arm_url,
    connect_arm,
    drop_arm_role,
    ensure_arm_role,
)
from churn_assets.fabric.saas_client import SaasClient
from churn_assets.orchestration.materialize import Session
from churn_assets.services import mongo_client, saas_api_key
from churn_assets.services.base import DAGSTER_DATABASE, with_database

pytestmark = pytest.mark.integration

OTHER = "other-s7-0abcde"  # a second world, made by hand: schemas, one staged table, its own role
OTHER_DAY = dt.date(2024, 1, 3)


@pytest.fixture(scope="module")
def world(session: Session, small_world: str) -> Projected:
    return projected_world(session, small_world)


@pytest.fixture(scope="module")
def secret(session: Session) -> str:
    return arm_secret(session.paths.arm_secret_file)


@pytest.fixture(scope="module")
def other(session: Session, secret: str) -> Iterator[str]:
    """World OTHER with a staged table holding one row, readable by OTHER's role."""
    staging = schema_name(OTHER, "staging")
    with connection(session.urls.warehouse, autocommit=True) as conn:
        ensure_arm_role(conn, OTHER, secret)  # creates its schemas and grants, as a dbt build would
        conn.execute(psycopg.sql.SQL("CREATE TABLE {} (secret_fact text)").format(
            psycopg.sql.Identifier(staging, "probe")))
        conn.execute(psycopg.sql.SQL("INSERT INTO {} VALUES ('of the other world')").format(
            psycopg.sql.Identifier(staging, "probe")))
    try:
        yield OTHER
    finally:
        with connection(session.urls.warehouse, autocommit=True) as conn:
            drop_world_schemas(conn, OTHER)
            drop_arm_role(conn, OTHER)


def _refused(conn: psycopg.Connection[Any], statement: str) -> bool:
    try:
        conn.execute(statement.encode())  # statements of this test, written out in full
    except psycopg.errors.InsufficientPrivilege:
        return True
    return False


def test_an_arm_reads_its_own_world_and_nothing_of_another(session: Session, world: Projected, other: str,
                                                           secret: str) -> None:
    mine, theirs = world.world_id, other
    with connect_arm(session.urls.warehouse, theirs, secret) as owner:  # the other world's table is there
        assert owner.execute(f'SELECT secret_fact FROM "{schema_name(theirs, "staging")}".probe'.encode()
                             ).fetchall() == [("of the other world",)]
    with connect_arm(session.urls.warehouse, mine, secret) as arm:
        assert arm.execute("SELECT current_user").fetchone() == (arm_role(mine),)
        n = arm.execute(f'SELECT count(*) FROM "{world.schema("analytics")}".active_users_as_of '
                        "WHERE as_of_day = %s".encode(), (AT,)).fetchone()
        assert n is not None and n[0] > 0
        refused = [
            f'SELECT * FROM "{schema_name(theirs, "staging")}".probe',
            f'SELECT 1 FROM "{world.schema("truth")}".events LIMIT 1',
            f'SELECT 1 FROM "{world.schema("raw")}".users LIMIT 1',
            f'SELECT 1 FROM "{world.schema("analytics")}".dim_user LIMIT 1',  # an SCD2 mart: runs past as-of days
            f'SELECT 1 FROM "{world.schema("analytics")}".stg_users LIMIT 1',
        ]
        assert [s for s in refused if not _refused(arm, s)] == []


def test_an_arm_writes_nothing_even_with_its_read_only_default_off(session: Session, world: Projected,
                                                                   secret: str) -> None:
    staging = world.schema("staging")
    with connection(session.urls.warehouse, autocommit=True) as conn:  # a staged table of the arm's own world
        conn.execute(f'CREATE TABLE IF NOT EXISTS "{staging}".write_probe (x int)'.encode())
    try:
        with connect_arm(session.urls.warehouse, world.world_id, secret) as arm:
            assert arm.execute(f'SELECT count(*) FROM "{staging}".write_probe'.encode()).fetchone() == (0,)
            # The session default is a second line only: privileges must refuse with it switched off.
            arm.execute("SET default_transaction_read_only = off")
            arm.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
            assert arm.execute("SHOW transaction_read_only").fetchone() == ("off",)
            refused = [
                f'INSERT INTO "{staging}".write_probe VALUES (1)',
                f'UPDATE "{staging}".write_probe SET x = 2',
                f'DELETE FROM "{staging}".write_probe',
                f'TRUNCATE "{staging}".write_probe',
                f'CREATE TABLE "{staging}".arm_table (x int)',
                f'CREATE VIEW "{staging}".arm_view AS SELECT 1 AS x',
                f'DROP TABLE "{staging}".write_probe',
                'CREATE TABLE public.arm_table (x int)',
                'CREATE TEMP TABLE arm_temp (x int)',
                'CREATE SCHEMA arm_schema',
                'SELECT lo_create(0)',
                'SELECT lo_from_bytea(0, \'\\x00\'::bytea)',
                'CREATE FUNCTION public.arm_fn() RETURNS int LANGUAGE sql AS \'SELECT 1\'',
            ]
            assert [s for s in refused if not _refused(arm, s)] == []
        with connection(session.urls.warehouse) as conn:
            assert conn.execute(f'SELECT count(*) FROM "{staging}".write_probe'.encode()).fetchone() == (0,)
    finally:
        with connection(session.urls.warehouse, autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{staging}".write_probe'.encode())


def test_an_arm_role_logs_in_only_with_its_own_worlds_password(session: Session, world: Projected, other: str,
                                                                secret: str) -> None:
    url, mine = session.urls.warehouse, world.world_id
    attempts = [
        (arm_url(url, mine), None),  # no password (the embedded server trusted every local connection before)
        (arm_url(url, mine), "wrong-password"),
        (arm_url(url, mine), arm_password(other, secret)),  # another world's password
        (arm_url(url, other), arm_password(mine, secret)),  # another world's role with mine
        (arm_url(url, mine), arm_password(mine, "another secret")),
        (with_database(arm_url(url, mine), DAGSTER_DATABASE), arm_password(mine, secret)),  # Dagster's database
        (with_database(arm_url(url, mine), "postgres"), arm_password(mine, secret)),
    ]
    failed = []
    for target, password in attempts:
        try:
            psycopg.connect(target, password=password, connect_timeout=10).close()
        except psycopg.OperationalError as e:
            failed.append("password authentication failed" in str(e) or "permission denied for database" in str(e)
                          or "no password supplied" in str(e))
        else:
            failed.append(False)
    assert failed == [True] * len(attempts), failed
    psycopg.connect(arm_url(url, mine), password=arm_password(mine, secret), connect_timeout=10).close()


def test_the_shared_role_of_an_older_state_folder_is_replaced_without_losing_a_grant(
        session: Session, world: Projected, secret: str) -> None:
    """A view built by an older churnbench is granted to `churnbench_arm` only; its world's role inherits the
    grant when the old role goes (the world is not rebuilt for it)."""
    from psycopg import sql

    from churn_assets.fabric.roles import LEGACY_ARM_ROLE

    view = sql.Identifier(world.schema("analytics"), "products_as_of")
    mine = sql.Identifier(arm_role(world.world_id))
    with connection(session.urls.warehouse, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(LEGACY_ARM_ROLE)))
        conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(view, sql.Identifier(LEGACY_ARM_ROLE)))
        conn.execute(sql.SQL("REVOKE SELECT ON {} FROM {}").format(view, mine))
        with connect_arm(session.urls.warehouse, world.world_id, secret) as arm, \
                pytest.raises(psycopg.errors.InsufficientPrivilege):
            arm.execute(sql.SQL("SELECT count(*) FROM {}").format(view))
        ensure_arm_role(conn, world.world_id, secret)
        assert conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (LEGACY_ARM_ROLE,)).fetchone() is None
    with connect_arm(session.urls.warehouse, world.world_id, secret) as arm:
        assert arm.execute(sql.SQL("SELECT count(*) FROM {}").format(view)).fetchone() is not None


def test_the_mongo_server_has_no_authentication_and_an_arm_sees_only_its_worlds_reads(
        session: Session, world: Projected) -> None:
    client = mongo_client(session.urls.mongodb)
    mine = f"{world.world_id.replace('-', '_')}_20240103"
    theirs = f"{OTHER.replace('-', '_')}_{OTHER_DAY:%Y%m%d}"
    try:
        # Why the server cannot scope a connection: it answers any command it does not implement with
        # {ok: 1, result: []}, so a SCRAM handshake gets no conversation and `createUser` creates nobody.
        answer = client.admin.command("saslStart", mechanism="SCRAM-SHA-256", payload=b"n,,n=arm,r=abc",
                                      autoAuthorize=1)
        assert "conversationId" not in answer and "payload" not in answer
        assert client.admin.command("createUser", "arm", pwd="secret-pw", roles=["read"]).get("result") == []
        assert client.admin.command("usersInfo", "arm").get("users") in (None, [])
        client[mine]["probe"].insert_one({"_id": 1, "x": "mine"})
        client[theirs]["probe"].insert_one({"_id": 1, "x": "theirs"})
        arm = ArmMongo(client, world.world_id)
        assert arm[mine]["probe"].find_one({"_id": 1}) == {"_id": 1, "x": "mine"}
        assert theirs not in arm.list_database_names() and mine in arm.list_database_names()
        refused = [
            lambda: arm[theirs],
            lambda: arm["admin"],
            lambda: arm[mine]["probe"].insert_one({"_id": 2}),
            lambda: arm[mine]["probe"].update_one({"_id": 1}, {"$set": {"x": "changed"}}),
            lambda: arm[mine]["probe"].delete_many({}),
            lambda: arm[mine]["probe"].drop(),
            lambda: arm[mine].drop_collection("probe"),
            lambda: arm.drop_database(mine),
            lambda: arm[mine]["probe"].aggregate([{"$out": "copied"}]),
        ]
        outcomes = []
        for attempt in refused:
            try:
                attempt()
            except ArmAccessDenied:
                outcomes.append(True)
            else:
                outcomes.append(False)
        assert outcomes == [True] * len(refused)
        assert client[mine]["probe"].find_one({"_id": 1}) == {"_id": 1, "x": "mine"}
    finally:
        client.drop_database(mine)
        client.drop_database(theirs)
        client.close()


def test_a_saas_key_reads_its_own_tenant_only(session: Session, world: Projected, other: str) -> None:
    base = session.urls.saas
    assert base is not None
    mine = world.world_id
    my_key, their_key = (saas_api_key(session.paths, world_id=w) for w in (mine, other))
    with SaasClient(base, my_key) as client:
        assert client.prices(mine, as_of=AT.isoformat())  # the key works for its tenant

    def status(tenant: str, key: str | None) -> int:
        headers = {} if key is None else {"X-API-Key": key}
        return httpx.get(f"{base}/v1/tenants/{tenant}/prices", params={"as_of": AT.isoformat()}, headers=headers,
                         timeout=10).status_code

    issuer = next(e["key"] for e in _keys_file(session)["keys"] if e["profile"] == "default")
    refused = [
        (other, my_key, 403),  # my key for another tenant (one that exists or not: 403 before any lookup)
        (mine, their_key, 403),  # another tenant's key for mine
        (mine, saas_api_key(session.paths, "reference", world_id=other), 403),  # another profile, same rule
        (mine, None, 401),
        (mine, "x" * 32, 401),
        (mine, f"{mine}.{'A' * 43}", 401),  # a forged tenant key
        (mine, issuer, 401),  # the issuer secret is not a key itself
    ]
    assert [(t, s) for t, k, s in refused if status(t, k) != s] == []


def _keys_file(session: Session) -> dict[str, Any]:
    import json

    from churn_assets.services import saas_keys_file

    path = saas_keys_file(session.paths)
    assert path.stat().st_mode & 0o077 == 0
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_the_saas_client_percent_encodes_ids_in_paths() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"entitlements": [], "items": [], "licenses": []})

    with SaasClient("http://saas.test", "k" * 20, transport=httpx.MockTransport(handle)) as client:
        client.entitlements("default-s42-3f9a1c", "../other-s1-000000/prices?as_of=x#", as_of="2024-01-03")
        client.utilization("default-s42-3f9a1c", "p/../../x", as_of="2024-01-03")
        client.entitlements("default-s42-3f9a1c", "..", as_of="2024-01-03")
    paths = [r.url.raw_path.decode() for r in seen]
    assert paths == [
        "/v1/tenants/default-s42-3f9a1c/entitlements/..%2Fother-s1-000000%2Fprices%3Fas_of%3Dx%23?as_of=2024-01-03",
        "/v1/tenants/default-s42-3f9a1c/products/p%2F..%2F..%2Fx/utilization?as_of=2024-01-03&window_days=30",
        "/v1/tenants/default-s42-3f9a1c/entitlements/%2E%2E?as_of=2024-01-03",
    ]

