"""What an arm sees of the MongoDB-protocol server: its own world's databases, read-only.

The embedded server (nx-27017) implements no authentication: its command handler has no `saslStart`,
`saslContinue` or `authenticate`, so a user or a role cannot be created, and any client that reaches its
loopback port may read and write every database. What can be enforced is enforced here, in the process: an
arm gets this facade instead of the pymongo client, and it opens only the databases of its world
(`<world>_<yyyymmdd>`) and offers only reads (`find`, `find_one`, `count_documents`, `distinct`). That is an
application check, not a server one (docs/decisions.md, "Security and the cluster path"); against a real MongoDB with
authentication, give arms a user with the `read` role on their world's databases instead (MONGODB_URI).
"""

from __future__ import annotations

from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.fabric.mongo import database_prefix, world_databases

READ_METHODS = ("find", "find_one", "count_documents", "distinct")


class ArmAccessDenied(UserFacingError):
    """An arm asked for a database of another world, or for a write."""


class ArmCollection:
    def __init__(self, collection: Any) -> None:
        self._collection = collection
        self.name: str = collection.name

    def __getattr__(self, name: str) -> Any:
        if name in READ_METHODS:
            return getattr(self._collection, name)
        raise ArmAccessDenied(f"arms may only read the operational store: {name} on "
                              f"{self._collection.full_name} is refused")


class ArmDatabase:
    def __init__(self, database: Any) -> None:
        self._database = database
        self.name: str = database.name

    def __getitem__(self, name: str) -> ArmCollection:
        return ArmCollection(self._database[name])

    def __getattr__(self, name: str) -> Any:
        raise ArmAccessDenied(f"arms may only read collections of {self.name}: {name} is refused")


class ArmMongo:
    """A pymongo client narrowed to one world's databases and to reads."""

    def __init__(self, client: Any, world_id: str) -> None:
        self._client = client
        self.world_id = world_id
        self._prefix = database_prefix(world_id)

    def __getitem__(self, name: str) -> ArmDatabase:
        if not name.startswith(self._prefix):
            raise ArmAccessDenied(f"the arm of world {self.world_id} may not open database {name!r} (only "
                                  f"{self._prefix}<day>)")
        return ArmDatabase(self._client[name])

    def list_database_names(self) -> list[str]:
        return world_databases(self._client, self.world_id).get(self.world_id, [])

    def __getattr__(self, name: str) -> Any:
        raise ArmAccessDenied(f"the arm of world {self.world_id} may only read its own databases: {name} is "
                              "refused")

    def close(self) -> None:
        self._client.close()
