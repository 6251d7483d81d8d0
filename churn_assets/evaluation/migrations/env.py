"""Alembic's environment for the results catalog. `catalog_schema.ensure_catalog` runs it with its connection in
`config.attributes["connection"]`, inside its transaction and advisory lock; offline mode (SQL scripts) is
not supported: revision 0001 inspects the database to adopt a catalog made before migrations."""

from __future__ import annotations

from typing import Any

from alembic import context

from churn_assets.evaluation.catalog_schema import CATALOG_SCHEMA, VERSION_TABLE, catalog_metadata


def _include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Autogenerate compares the catalog's schema and tables only, never the worlds' schemas beside it."""
    if type_ == "schema":
        return name == CATALOG_SCHEMA
    if type_ == "table":
        return name != VERSION_TABLE
    return True


def run_migrations() -> None:
    if context.is_offline_mode():
        raise RuntimeError("the results catalog's migrations run online only (catalog_schema.ensure_catalog)")
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("no connection in config.attributes['connection']: run the migrations through "
                           "churn_assets.evaluation.catalog_schema.ensure_catalog")
    context.configure(
        connection=connection,
        target_metadata=catalog_metadata(),
        version_table=VERSION_TABLE,
        version_table_schema=CATALOG_SCHEMA,
        include_schemas=True,
        include_name=_include_name,
    )
    with context.begin_transaction():  # joins the caller's transaction when it has begun one
        context.run_migrations()


run_migrations()
