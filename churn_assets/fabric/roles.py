"""The read-only roles arms connect with, one per world (docs/rules.md, "Arm isolation").

World `default-s42-3f9a1c` has the role `default_s42_3f9a1c_arm` (`arm_role`), which may read:

- in `<world>_analytics`: the as-of views (dbt folder `models/as_of/`, granted to the world's role by dbt's
  `grants` config on every build) and `dim_date`; never the SCD2 marts themselves, whose rows run past any
  as-of day;
- in `<world>_staging`: every table (present and future: default privileges).

Nothing else: no other world, no `_truth`, no `_raw`, no other database, and no write anywhere. Writes are
refused by privileges, not by the session's read-only default (which a session may switch off): the role
owns nothing, has no CREATE on any schema, no TEMPORARY on the warehouse, and may not call the large-object
functions that write (`harden_warehouse`).

Each role logs in with a password (scram-sha-256; the embedded server asks every role but its superuser for
one, `services/postgres.py`). The password of a world's role is HMAC-SHA256 of the world id under one secret
(`arm_password`), so knowing one world's password tells nothing about another's. The secret is
`CHURNBENCH_ARM_PASSWORD` when set (an external server, `docker/compose.yaml`), else the 0600 file
`<state>/services/postgres-arm-secret`, generated on first use (`arm_secret`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from churn_assets.fabric.postgres import (
    CONNECT_TIMEOUT_S,
    connection,
    ident,
    parse_schema_name,
    schema_name,
    world_prefix,
)

if TYPE_CHECKING:
    from pathlib import Path

    import psycopg

ARM_ROLE_SUFFIX = "_arm"
ARM_PASSWORD_ENV = "CHURNBENCH_ARM_PASSWORD"
LEGACY_ARM_ROLE = "churnbench_arm"  # the one role all worlds shared before decision "per-world arm roles"
# Large-object functions that create or change data: callable by PUBLIC by default, even from a role that owns
# nothing (a read-only session default can be switched off by the session itself).
_REVOKE_LARGE_OBJECT_WRITERS = (
    "REVOKE EXECUTE ON FUNCTION pg_catalog.lo_create(oid), pg_catalog.lo_creat(integer), "
    "pg_catalog.lo_from_bytea(oid, bytea), pg_catalog.lo_put(oid, bigint, bytea), pg_catalog.lo_open(oid, integer), "
    "pg_catalog.lo_unlink(oid), pg_catalog.lo_truncate(integer, integer), pg_catalog.lo_truncate64(integer, bigint), "
    "pg_catalog.lowrite(integer, bytea) FROM PUBLIC")


def arm_role(world_id: str) -> str:
    """`default-s42-3f9a1c` -> `default_s42_3f9a1c_arm` (the same rule as `dbt_project.yml`'s grants)."""
    return world_prefix(world_id) + ARM_ROLE_SUFFIX


def arm_secret(secret_file: Path) -> str:
    """`CHURNBENCH_ARM_PASSWORD`, else the state folder's generated 0600 secret file
    (`StatePaths.arm_secret_file`)."""
    from_env = os.environ.get(ARM_PASSWORD_ENV)
    if from_env:
        return from_env
    from churn_assets.credentials import ensure_secret_file

    return ensure_secret_file(secret_file)


def arm_password(world_id: str, secret: str) -> str:
    """The password of the world's arm role: HMAC-SHA256(secret, world id), URL-safe base64."""
    from churn_assets.credentials import derived_secret

    return derived_secret(secret, f"churnbench arm {world_id}")


def harden_warehouse(conn: psycopg.Connection[Any]) -> None:
    """What PUBLIC may do in the warehouse database by default and an arm must not: connect (each world's
    role is granted CONNECT instead), create temporary tables, write large objects. Idempotent."""
    from psycopg import sql

    # Checked first: GRANT and REVOKE rewrite the catalog row even when nothing changes, and two sessions
    # rewriting one row fail with "tuple concurrently updated" (parallel cells of other worlds).
    row = conn.execute("SELECT current_database(), has_database_privilege('public', current_database(), 'CONNECT') "
                       "OR has_database_privilege('public', current_database(), 'TEMPORARY'), "
                       "has_function_privilege('public', 'pg_catalog.lo_create(oid)', 'EXECUTE')").fetchone()
    assert row is not None
    db, public_connects, public_writes_objects = row
    if public_connects:
        conn.execute(sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(ident(db)))
    if public_writes_objects:
        conn.execute(_REVOKE_LARGE_OBJECT_WRITERS)


def ensure_arm_role(conn: psycopg.Connection[Any], world_id: str, secret: str) -> bool:
    """Create the world's arm role when missing, (re)set its password from `secret`, harden the warehouse and
    grant the world's schemas (idempotent); True when the role was created.

    Safe when several processes race: the cluster-wide steps run under one advisory lock, the world's role
    under the world's (the lock `grant_arm_access` takes)."""
    from psycopg import sql

    role = arm_role(world_id)
    password = sql.Literal(arm_password(world_id, secret))
    conn.autocommit = True  # so that each `transaction()` below is a real transaction
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('churnbench arm roles'))")
        _drop_legacy_role(conn)
        harden_warehouse(conn)
    with conn.transaction():
        _lock_role(conn, role)
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None
        verb = "ALTER" if exists else "CREATE"
        conn.execute(sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION "
                             "NOBYPASSRLS PASSWORD {}").format(ident(role), password))
        # Every session starts read-only (a second line of defence: the privileges are the first).
        conn.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(ident(role)))
    grant_arm_access(conn, world_id)
    return not exists


def grant_arm_access(conn: psycopg.Connection[Any], world_id: str) -> None:
    """Let the world's arm role into the warehouse, its `_analytics` (schema usage; the views are granted by
    dbt) and `_staging` (every table, now and later). Creates both schemas when missing, so the grants exist
    before the tables do, and the role without a password when `ensure_arm_role` has not run yet (it cannot
    log in until then)."""
    from psycopg import sql

    role = arm_role(world_id)
    analytics, staging = schema_name(world_id, "analytics"), schema_name(world_id, "staging")
    with conn.transaction():
        _lock_role(conn, role)
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT "
                                 "NOREPLICATION NOBYPASSRLS").format(ident(role)))
            conn.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(ident(role)))
        # The role's own grant, not what it has through PUBLIC (which `harden_warehouse` revokes).
        row = conn.execute(
            """SELECT current_database(), EXISTS (
                   SELECT 1 FROM pg_database d, aclexplode(d.datacl) a JOIN pg_roles r ON r.oid = a.grantee
                   WHERE d.datname = current_database() AND r.rolname = %s AND a.privilege_type = 'CONNECT')""",
            (role,)).fetchone()
        assert row is not None
        if not row[1]:  # the database's row is shared by every world: one writer at a time (see harden_warehouse)
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('churnbench arm roles'))")
            conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(ident(row[0]), ident(role)))
        for schema in (analytics, staging):
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(schema)))
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ident(schema), ident(role)))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(ident(staging), ident(role)))
        conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA {} GRANT SELECT ON TABLES TO {}").format(
            ident(staging), ident(role)))


def _lock_role(conn: psycopg.Connection[Any], role: str) -> None:
    """One creator of a role at a time (CREATE ROLE of one name in two sessions: one fails)."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"churnbench arm role {role}",))


def drop_arm_role(conn: psycopg.Connection[Any], world_id: str) -> bool:
    """Drop the world's arm role and every privilege it holds in this database (`worlds rm`); True when it
    existed."""
    return _drop_role(conn, arm_role(world_id))


def worlds_with_arm_roles(conn: psycopg.Connection[Any]) -> set[str]:
    """Worlds whose arm role exists in the cluster."""
    found = set()
    for (role,) in conn.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE %s", ("%" + ARM_ROLE_SUFFIX,)):
        parsed = parse_schema_name(role[: -len(ARM_ROLE_SUFFIX)] + "_truth")
        if parsed is not None:
            found.add(parsed[0])
    return found


def _drop_legacy_role(conn: psycopg.Connection[Any]) -> None:
    """The shared role of older state folders, through which every world could be read: each world it could
    read gets its own role first, with the same SELECT grants (an as-of view built before this change is granted
    to the old role only, and its world may not be rebuilt), then the old role goes."""
    from psycopg import sql

    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (LEGACY_ARM_ROLE,)).fetchone() is None:
        return
    rows = conn.execute(
        """SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relkind IN ('r', 'v', 'm', 'p') AND has_table_privilege(%s, c.oid, 'SELECT')""",
        (LEGACY_ARM_ROLE,)).fetchall()
    worlds: set[str] = set()
    for schema, relation in rows:
        parsed = parse_schema_name(schema)
        if parsed is None or parsed[1] not in ("analytics", "staging"):
            continue
        if parsed[0] not in worlds:
            grant_arm_access(conn, parsed[0])  # creates the role (no password yet: it cannot log in until set)
            worlds.add(parsed[0])
        conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(ident(schema, relation), ident(arm_role(parsed[0]))))
    _drop_role(conn, LEGACY_ARM_ROLE)


def prepare_arm(warehouse_url: str, world_id: str, secret: str) -> None:
    """Make sure the world's arm role exists with its current password before an arm connects (a world built
    by an older churnbench, or with another secret, is not rebuilt just for that). A few statements."""
    with connection(warehouse_url, autocommit=True) as conn:
        ensure_arm_role(conn, world_id, secret)


def _drop_role(conn: psycopg.Connection[Any], role: str) -> bool:
    from psycopg import sql

    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
        return False
    with conn.transaction():
        conn.execute(sql.SQL("DROP OWNED BY {}").format(ident(role)))  # its grants and default privileges
        conn.execute(sql.SQL("DROP ROLE {}").format(ident(role)))
    return True


def arm_readable(conn: psycopg.Connection[Any], world_id: str, role: str | None = None) -> dict[str, list[str]]:
    """Schema -> relations of this world `role` (the world's arm role) may SELECT (what an audit or a test
    compares)."""
    role = role or arm_role(world_id)
    rows = conn.execute(
        """
        SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'v', 'm', 'p')
          AND has_schema_privilege(%s, n.oid, 'USAGE') AND has_table_privilege(%s, c.oid, 'SELECT')
        ORDER BY 1, 2
        """,
        ([schema_name(world_id, layer) for layer in ("truth", "raw", "analytics", "staging")], role, role),
    ).fetchall()
    out: dict[str, list[str]] = {}
    for schema, rel in rows:
        out.setdefault(schema, []).append(rel)
    return out


def arm_url(warehouse_url: str, world_id: str) -> str:
    """The warehouse URL with the world's arm role as its user and no password (`connect_arm` passes the
    password as a connection parameter, so that no URL that could be printed ever holds it)."""
    parts = urlsplit(warehouse_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{quote(arm_role(world_id))}@{host}", parts.path, parts.query,
                       parts.fragment))


def connect_arm(warehouse_url: str, world_id: str, secret: str) -> psycopg.Connection[Any]:
    """An autocommit connection as the world's arm role (what every arm reads the warehouse through)."""
    import psycopg

    return psycopg.connect(arm_url(warehouse_url, world_id), password=arm_password(world_id, secret),
                           autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
