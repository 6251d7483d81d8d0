"""Registered worlds: stored configs, the Dagster `world` dynamic partition, and every per-world artefact.

A world is *registered* when its id is a partition of the `world` dynamic partitions definition in the
Dagster instance; `add_world` writes its config to `<state>/worlds/<world>/config.json` first, then adds one
`world_day` partition per day of the world's own calendar, and registers it last, so a registered world always
has its config and its days (unless someone deleted them).

Removal (`remove_world`, `churnbench worlds rm`) unregisters first and then removes every artefact in
`WORLD_ARTEFACTS`; `collect_garbage` (`churnbench gc`) removes the artefacts of any world that is not
registered. Unregistering first means a removal that fails half-way leaves only garbage that `gc`
finds later, never a registered world with half its data.

**Every issue that creates a per-world artefact appends a `WorldArtefact` to `WORLD_ARTEFACTS`** (how to
find the worlds that have one, how to remove one world's) and extends `tests/integration/test_worlds.py`
(`populate_world` there materializes what creates it).

Removal and use exclude each other: every command that builds or evaluates a world holds its use lock shared
(`using_world`: `materialize`, `run_scenario`, `churnbench project`), and `remove_world` takes it exclusively
without waiting, so `worlds rm` during a run refuses in one line and removes nothing; a command that starts
while a removal runs waits for it, then finds the world gone and says so.

Dagster materialization history of a removed world is kept: the event log is an append-only audit
record, and Dagster's SQL event storage cannot wipe single partitions (`wipe_asset_partitions` raises
NotImplementedError in OSS). Re-adding the same world (same config, same id) shows its old
materializations until it is materialized again, which regenerates byte-identical files.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.deployment import deployment
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.catalog_removal import catalog_worlds, delete_world_runs
from churn_assets.fabric.mongo import drop_world_databases, world_databases
from churn_assets.fabric.postgres import connection, drop_world_schemas, worlds_with_schemas
from churn_assets.fabric.roles import drop_arm_role, worlds_with_arm_roles
from churn_assets.files import LockTimeoutError
from churn_assets.grounding.vector_index import drop_world_vectors, worlds_with_vectors
from churn_assets.orchestration.partitions import (
    SCENARIO_PARTITIONS_NAME,
    WORLD_DAY_PARTITIONS_NAME,
    WORLD_PARTITIONS_NAME,
    world_day_keys,
    world_of_key,
)
from churn_assets.orchestration.scenarios import scenarios_of_world, stored_scenario_keys
from churn_assets.services import ensure_services, mongo_client
from churn_assets.state import WORLD_ID_RE, StatePaths, validate_world_id
from churn_assets.state import WorldNotFoundError as WorldNotFoundError  # re-exported: the registry's callers
from churn_assets.state import load_world_config as load_world_config
from churn_assets.state import write_world_config as write_world_config
from churn_assets.state_locks import state_locks
from churn_assets.unique_keys import load_json
from churn_assets.world.config import WorldConfig
from churn_assets.world.ledger import LEDGER_FILE, MANIFEST_FILE
from contracts.store import CONTRACTS_DIRNAME

if TYPE_CHECKING:
    import dagster as dg

    from churn_assets.services import ServiceUrls


class WorldInUseError(UserFacingError):
    """A world that another command is building or evaluating cannot be removed now."""


@dataclass(frozen=True)
class WorldInUse:
    """What `using_world` yields: the holder has the world's use lock for its block, and hands this on to what it
    calls inside the block so that they do not take the lock again (`orchestration/scenario_in_hand.py`)."""

    world_id: str


@contextlib.contextmanager
def using_world(paths: StatePaths, world_id: str) -> Iterator[WorldInUse]:
    """Hold the world's use lock shared for the block (any number of users at once; waits only while a removal
    of the world runs). Re-entrant within a process: each holder takes the lock on a connection of its own."""
    with state_locks(paths).hold(paths.world_use_lock(world_id), shared=True, what=f"world {world_id}"):
        yield WorldInUse(world_id)


# ---------------------------------------------------------------------------------------------------
# Stored configs
# ---------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------
# Per-world artefacts (extended by every issue that creates one)
# ---------------------------------------------------------------------------------------------------


@dataclass
class ArtefactContext:
    """What a cleanup hook may need. Services are started only when a hook asks for `urls`."""

    paths: StatePaths
    instance: dg.DagsterInstance

    @cached_property
    def urls(self) -> ServiceUrls:
        return ensure_services(self.paths)


@dataclass(frozen=True)
class WorldArtefact:
    """One kind of per-world artefact: `find` lists the worlds that have one; `remove` deletes one
    world's (a no-op when it has none)."""

    name: str
    find: Callable[[ArtefactContext], set[str]]
    remove: Callable[[ArtefactContext, str], None]


def _worlds_with(relative: str) -> Callable[[ArtefactContext], set[str]]:
    def find(ctx: ArtefactContext) -> set[str]:
        return {w for w in ctx.paths.world_ids_on_disk() if (ctx.paths.world_dir(w) / relative).exists()}
    return find


def _remove_path(relative: str) -> Callable[[ArtefactContext, str], None]:
    def remove(ctx: ArtefactContext, world_id: str) -> None:
        target = ctx.paths.world_dir(world_id) / relative
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    return remove


def _remove_world_folder(ctx: ArtefactContext, world_id: str) -> None:
    folder = ctx.paths.world_dir(world_id)
    if folder.exists():
        shutil.rmtree(folder)


def _with_mongo(fn: Callable[..., Any]) -> Any:
    """Run `fn(client)` on a pymongo client of the state folder's Mongo server (started if needed)."""
    def run(ctx: ArtefactContext, *args: Any) -> Any:
        client = mongo_client(ctx.urls.mongodb)
        try:
            return fn(client, *args)
        finally:
            client.close()
    return run


def _with_warehouse(fn: Callable[..., Any]) -> Any:
    """Run `fn(conn, ...)` on a connection to the state folder's warehouse database (started if needed)."""
    def run(ctx: ArtefactContext, *args: Any) -> Any:
        with connection(ctx.urls.warehouse, autocommit=True) as conn:
            return fn(conn, *args)
    return run


# In creation order; removal runs in reverse. The world folder comes first so that removing it last
# takes anything a later issue wrote under it without a hook of its own.
WORLD_ARTEFACTS: list[WorldArtefact] = [
    WorldArtefact("world folder", lambda ctx: ctx.paths.world_ids_on_disk(), _remove_world_folder),
    WorldArtefact("world config", _worlds_with("config.json"), _remove_path("config.json")),
    WorldArtefact("ledger files", _worlds_with("ledger"), _remove_path("ledger")),
    # issue 5: the Postgres schemas <world>_truth, _raw, _analytics, _staging (removed after everything in them)
    WorldArtefact("warehouse schemas", _with_warehouse(worlds_with_schemas), _with_warehouse(drop_world_schemas)),
    # issue 22: the world's read-only arm role (cluster-wide; its grants go with it)
    WorldArtefact("warehouse arm role", _with_warehouse(worlds_with_arm_roles), _with_warehouse(drop_arm_role)),
    WorldArtefact("contract documents", _worlds_with(CONTRACTS_DIRNAME), _remove_path(CONTRACTS_DIRNAME)),
    # issue 6: one MongoDB database per (world, as-of day), `<world>_<yyyymmdd>`
    WorldArtefact("operational store", _with_mongo(lambda client: set(world_databases(client))),
                  _with_mongo(drop_world_databases)),
    # issue 8: the vector index and RAG corpus tables (and their embeddings) in `<world>_staging`
    WorldArtefact("vector index and RAG corpus", _with_warehouse(worlds_with_vectors),
                  _with_warehouse(drop_world_vectors)),
]


def _worlds_with_results(ctx: ArtefactContext) -> set[str]:
    base = ctx.paths.results_root  # a world's folder, beside `sweeps/` (the sweep reports)
    return {p.name for p in base.iterdir() if p.is_dir() and WORLD_ID_RE.match(p.name)} if base.exists() else set()


def _remove_results(ctx: ArtefactContext, world_id: str) -> None:
    shutil.rmtree(ctx.paths.results_dir(world_id), ignore_errors=True)


def _worlds_with_scenarios(ctx: ArtefactContext) -> set[str]:
    return set(stored_scenario_keys(ctx.paths).values())


def _remove_scenarios(ctx: ArtefactContext, world_id: str) -> None:
    """The world's stored scenario definitions and their `eval_run` partitions."""
    for key in scenarios_of_world(ctx.paths, world_id):
        ctx.paths.scenario_file(key).unlink(missing_ok=True)
        if ctx.instance.has_dynamic_partition(SCENARIO_PARTITIONS_NAME, key):
            ctx.instance.delete_dynamic_partition(SCENARIO_PARTITIONS_NAME, key)


# issue 13: evaluation results (`<state>/results/<world>/`) and scenario definitions (`<state>/scenarios/`)
WORLD_ARTEFACTS.append(WorldArtefact("evaluation results", _worlds_with_results, _remove_results))
WORLD_ARTEFACTS.append(WorldArtefact("scenarios", _worlds_with_scenarios, _remove_scenarios))


def _catalog_worlds(conn: Any) -> set[str]:
    return catalog_worlds(conn)


def _delete_catalog_rows(conn: Any, world_id: str) -> None:
    delete_world_runs(conn, world_id)


def world_day_partition_keys(instance: dg.DagsterInstance, world_id: str | None = None) -> dict[str, list[str]]:
    """{world: its `world_day` partition keys} (of one world, or of every world that has any)."""
    out: dict[str, list[str]] = {}
    for key in instance.get_dynamic_partitions(WORLD_DAY_PARTITIONS_NAME):
        world = world_of_key(key)
        if world is not None and world_id in (None, world):
            out.setdefault(world, []).append(key)
    return out


def _remove_world_days(ctx: ArtefactContext, world_id: str) -> None:
    for key in world_day_partition_keys(ctx.instance, world_id).get(world_id, []):
        ctx.instance.delete_dynamic_partition(WORLD_DAY_PARTITIONS_NAME, key)


# issue 20: the world's `world_day` partitions (one per day of its calendar); removed first of all, so that a
# half-done removal never leaves days that look buildable. Their materialization history stays (see above).
WORLD_ARTEFACTS.append(WorldArtefact("Dagster world-day partitions",
                                     lambda ctx: set(world_day_partition_keys(ctx.instance)), _remove_world_days))


# issue 13: the world's rows in the results catalog (`churnbench.results_runs`, outside the world's schemas);
# removed before the results files they point at
WORLD_ARTEFACTS.append(WorldArtefact("results catalog rows", _with_warehouse(_catalog_worlds),
                                     _with_warehouse(_delete_catalog_rows)))


_DBT_RUN_RE = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)_s(?P<seed>\d+)_(?P<hash>[0-9a-f]{6})-")


def _dbt_run_folders(paths: StatePaths) -> dict[str, list[Path]]:
    """World -> the dbt run folders kept for it (`<state>/dbt/runs/<world as identifier>-<run>-<pid>-<token>`)."""
    out: dict[str, list[Path]] = {}
    if paths.dbt_runs_dir.is_dir():
        for folder in paths.dbt_runs_dir.iterdir():
            m = _DBT_RUN_RE.match(folder.name)
            if m and folder.is_dir():
                out.setdefault(f"{m['name']}-s{m['seed']}-{m['hash']}", []).append(folder)
    return out


def _worlds_with_locks(ctx: ArtefactContext) -> set[str]:
    locks = ctx.paths.locks_dir
    worlds = {p.name for p in locks.iterdir() if p.is_dir() and WORLD_ID_RE.match(p.name)} if locks.is_dir() else set()
    return worlds | set(_dbt_run_folders(ctx.paths))


def _remove_locks(ctx: ArtefactContext, world_id: str) -> None:
    """The world's lock files left by a churnbench of before decision 332 and its kept dbt run folders."""
    shutil.rmtree(ctx.paths.world_locks_dir(world_id), ignore_errors=True)
    for folder in _dbt_run_folders(ctx.paths).get(world_id, []):
        shutil.rmtree(folder, ignore_errors=True)


# issue 20: lock files of the builds parallel cells share (`<state>/locks/<world>/`, left by a churnbench of before
# decision 332, whose locks are advisory locks in Postgres) and the folders of failed dbt builds (`<state>/dbt/runs/`);
# removal runs in reverse, so these go first
LOCKS_ARTEFACT = "lock files and kept dbt builds"
WORLD_ARTEFACTS.append(WorldArtefact(LOCKS_ARTEFACT, _worlds_with_locks, _remove_locks))


# ---------------------------------------------------------------------------------------------------
# Registry operations
# ---------------------------------------------------------------------------------------------------


def registered_worlds(instance: dg.DagsterInstance) -> list[str]:
    return sorted(instance.get_dynamic_partitions(WORLD_PARTITIONS_NAME))


def is_registered(instance: dg.DagsterInstance, world_id: str) -> bool:
    return instance.has_dynamic_partition(WORLD_PARTITIONS_NAME, world_id)


def add_world(paths: StatePaths, instance: dg.DagsterInstance, config: WorldConfig) -> bool:
    """Store the config, add the world's days and register the world; False when it was registered already
    (idempotent: the days are added again if any is missing)."""
    deployment().calendar.require_fit(config)
    world_id = config.world_id
    config_file = paths.world_config_file(world_id)
    if config_file.exists():
        load_world_config(paths, world_id)  # refuses a stored config that no longer matches its id
    else:
        write_world_config(paths, config)
    register_world_days(instance, config)
    if is_registered(instance, world_id):
        return False
    instance.add_dynamic_partitions(WORLD_PARTITIONS_NAME, [world_id])
    return True


def register_world_days(instance: dg.DagsterInstance, config: WorldConfig) -> None:
    """Add a `world_day` partition for every day of the world's calendar (those it has already are kept)."""
    instance.add_dynamic_partitions(WORLD_DAY_PARTITIONS_NAME, world_day_keys(config))


@dataclass(frozen=True)
class WorldInfo:
    world_id: str
    registered: bool
    config: WorldConfig | None
    problem: str  # why the config could not be read, "" when it could
    ledger_events: int | None  # events in the materialized ledger, None when not materialized


def list_worlds(paths: StatePaths, instance: dg.DagsterInstance) -> list[WorldInfo]:
    """Registered worlds, plus unregistered ones that still have artefacts on disk (gc removes those)."""
    import dagster as dg

    registered = set(registered_worlds(instance))
    materialized = instance.get_materialized_partitions(dg.AssetKey("ledger"))
    out = []
    for world_id in sorted(registered | paths.world_ids_on_disk()):
        config, problem = None, ""
        try:
            config = load_world_config(paths, world_id)
        except UserFacingError as e:
            problem = str(e)
        events = None
        if world_id in materialized:
            events = _ledger_count(paths.ledger_dir(world_id))
        out.append(WorldInfo(world_id, world_id in registered, config, problem, events))
    return out


def _ledger_count(ledger_dir: Path) -> int | None:
    """Events in the manifest, when the ledger files are there (Dagster history may outlive them)."""
    try:
        manifest = load_json((ledger_dir / MANIFEST_FILE).read_text(), str(ledger_dir / MANIFEST_FILE))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return int(manifest["count"]) if (ledger_dir / LEDGER_FILE).exists() else None


def remove_world(paths: StatePaths, instance: dg.DagsterInstance, world_id: str) -> list[str]:
    """Unregister `world_id` and remove its artefacts; returns what was removed."""
    validate_world_id(world_id)
    ctx = ArtefactContext(paths, instance)
    removed: list[str] = []
    try:
        with state_locks(paths).hold(paths.world_use_lock(world_id), timeout=0, what=f"world {world_id}"):
            if is_registered(instance, world_id):
                instance.delete_dynamic_partition(WORLD_PARTITIONS_NAME, world_id)
                removed.append("Dagster partition")
            removed += _remove_artefacts(ctx, world_id)
    except LockTimeoutError:
        raise WorldInUseError(f"world {world_id} is in use by another churnbench command (a run, project or "
                              "materialize of it): nothing was removed; try again when it is done") from None
    if not removed:
        raise WorldNotFoundError(f"no world {world_id} in state folder {paths.root} "
                                 "(see `churnbench worlds list`)")
    return removed


def _remove_artefacts(ctx: ArtefactContext, world_id: str) -> list[str]:
    removed = []
    for artefact in reversed(WORLD_ARTEFACTS):
        if world_id in artefact.find(ctx):
            artefact.remove(ctx, world_id)
            removed.append(artefact.name)
    return removed


def world_artefacts(paths: StatePaths, instance: dg.DagsterInstance, world_id: str) -> list[str]:
    """Names of the artefacts `world_id` has right now (tests assert this is empty after removal)."""
    ctx = ArtefactContext(paths, instance)
    return [a.name for a in WORLD_ARTEFACTS if world_id in a.find(ctx)]


def collect_garbage(paths: StatePaths, instance: dg.DagsterInstance) -> dict[str, list[str]]:
    """Remove the artefacts of every world that is not registered; {world: artefacts removed}."""
    ctx = ArtefactContext(paths, instance)
    registered = set(registered_worlds(instance))
    found: set[str] = set()
    for artefact in WORLD_ARTEFACTS:
        found |= artefact.find(ctx)
    return {w: _remove_artefacts(ctx, w) for w in sorted(found - registered)}
