"""The connections an arm reads through, opened and closed in one place.

    sources = connect_sources(world_id, warehouse_url=..., mongo_url=..., saas_url=..., saas_key=...,
                              documents_root=<state>/worlds/<world>/contracts)
    ...
    close_sources(sources)

Postgres is opened as the world's read-only arm role (`fabric/roles.py`, with its password), autocommit (every
read is a statement of its own); Mongo through pymongo, narrowed to the world's databases and to reads
(`fabric/arm_mongo.py`); the SaaS API through the resilient client, with a key scoped to the world. Every field
is optional: a router mode or a test uses only some.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.errors import UserFacingError
from churn_assets.fabric.arm_mongo import ArmMongo
from churn_assets.fabric.roles import connect_arm
from churn_assets.fabric.saas_client import SaasClient

if TYPE_CHECKING:
    import psycopg

    from churn_assets.fabric.saas_client import SaasClient

MONGO_TIMEOUT_MS = 5000


class SourcesError(UserFacingError):
    """The arm's sources cannot be opened as asked (a SaaS URL without its key, ...)."""


@dataclass
class Sources:
    """The connections a router reads through (all optional: a mode uses only some)."""

    world_id: str
    pg: psycopg.Connection[Any] | None = None  # the world's read-only arm role
    mongo: ArmMongo | None = None  # the world's databases, read-only
    saas: SaasClient | None = None
    documents_root: Path | None = None  # <state>/worlds/<world>/contracts
    # as-of view -> the hash of what it reads, verified against the dbt build's record before the arm answers
    # (`fabric/warehouse_content.py`); None: not verified, and the warehouse reader refuses to read.
    warehouse_content: Mapping[str, str] | None = None


def connect_sources(world_id: str, *, warehouse_url: str | None = None, mongo_url: str | None = None,
                    saas_url: str | None = None, saas_key: str | None = None,
                    documents_root: Path | None = None, warehouse_secret: str | None = None) -> Sources:
    """Open what an arm reads through. Close with `close_sources`. `warehouse_secret` is what the world's arm
    role's password derives from (`fabric.roles.arm_secret`)."""
    if saas_url and not saas_key:
        raise SourcesError("a SaaS URL needs its API key")
    if warehouse_url and not warehouse_secret:
        raise SourcesError("a warehouse URL needs the arm roles' secret (fabric.roles.arm_secret)")
    pg = connect_arm(warehouse_url, world_id, warehouse_secret) if warehouse_url and warehouse_secret else None
    mongo = None
    if mongo_url:
        import pymongo

        mongo = ArmMongo(pymongo.MongoClient(mongo_url, serverSelectionTimeoutMS=MONGO_TIMEOUT_MS,
                                             connectTimeoutMS=MONGO_TIMEOUT_MS, directConnection=True), world_id)
    saas = None
    if saas_url and saas_key:
        saas = SaasClient(saas_url, saas_key)
    return Sources(world_id, pg, mongo, saas, documents_root)


def close_sources(sources: Sources) -> None:
    for thing in (sources.pg, sources.mongo, sources.saas):
        if thing is not None:
            thing.close()
