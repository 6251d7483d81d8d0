"""The read-only role arms connect with (ARCHITECTURE.md section 10, "Arm isolation").

`churnbench_arm` may read, per world:

- in `<world>_analytics`: the as-of views (dbt folder `models/as_of/`, granted by dbt's `grants` config
  on every build) and `dim_date`; never the SCD2 marts themselves, whose rows run past any as-of day;
- in `<world>_staging`: every table (present and future: default privileges).

Nothing else: no `_truth`, no `_raw`, no write anywhere (every session of the role is read-only).
The role is cluster-wide; per-world grants are made by `grant_arm_access` when a world is projected.

Embedded Postgres trusts local connections, so the role needs no password; with an external server set
`CHURNBENCH_ARM_PASSWORD` before the role is first created (and give arms the URL `arm_url` builds).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from churn_assets.fabric.postgres import ident, schema_name

if TYPE_CHECKING:
    import psycopg

ARM_ROLE = "churnbench_arm"
ARM_PASSWORD_ENV = "CHURNBENCH_ARM_PASSWORD"


def ensure_arm_role(conn: psycopg.Connection[Any], role: str = ARM_ROLE) -> bool:
    """Create the arm role when missing (idempotent); True when it was created.

    Safe when several processes race: creation happens under an advisory lock.
    """
    from psycopg import sql

    password = os.environ.get(ARM_PASSWORD_ENV) or None
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('churnbench arm role'))")
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT "
                                 "NOREPLICATION {}").format(
                ident(role), sql.SQL("PASSWORD {}").format(sql.Literal(password)) if password else sql.SQL("")))
        # Every session of the role is read-only, whatever it has been granted.
        conn.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(ident(role)))
    return not exists


def grant_arm_access(conn: psycopg.Connection[Any], world_id: str, role: str = ARM_ROLE) -> None:
    """Let the arm role into a world's `_analytics` (schema usage; the views are granted by dbt) and
    `_staging` (every table, now and later). Creates both schemas when missing, so the grants exist
    before the tables do."""
    from psycopg import sql

    analytics, staging = schema_name(world_id, "analytics"), schema_name(world_id, "staging")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"grants {world_id}",))
        for schema in (analytics, staging):
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(schema)))
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ident(schema), ident(role)))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(ident(staging), ident(role)))
        conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA {} GRANT SELECT ON TABLES TO {}").format(
            ident(staging), ident(role)))


def arm_readable(conn: psycopg.Connection[Any], world_id: str, role: str = ARM_ROLE) -> dict[str, list[str]]:
    """Schema -> relations of this world the role may SELECT (what an audit or a test compares)."""
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


def arm_url(warehouse_url: str, role: str = ARM_ROLE) -> str:
    """The warehouse URL with the arm role as its user (and `CHURNBENCH_ARM_PASSWORD` when set)."""
    parts = urlsplit(warehouse_url)
    password = os.environ.get(ARM_PASSWORD_ENV)
    userinfo = quote(role) + (f":{quote(password)}" if password else "")
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{userinfo}@{host}", parts.path, parts.query, parts.fragment))
