"""The dbt star schema of each world as Dagster assets (dagster-dbt), partitioned by world.

One `@dbt_assets` definition covers every model of `dbt_project/` (keys `analytics/<model>`, group
`analytics`); a partition runs `dbt build --vars '{"world": "<world id>"}'`, which reads `<world>_raw` and
writes `<world>_analytics`. dbt tests show as asset checks. Every raw source maps to the `warehouse_raw`
asset (`meta.dagster.asset_key` in `models/staging/_raw__sources.yml`), so lineage reads
`ledger -> warehouse_raw -> analytics/*`.

After the build, the content hash of every relation the arms' as-of views read (marts, `dim_date`, the views
themselves) is recorded in `<world>_analytics.warehouse_content` (`fabric/warehouse_content.py`): evaluations check
their warehouse reads against it. The record is removed before dbt starts, so a build that fails leaves none.

Before dbt runs, the read-only arm role exists and may use the world's `_analytics` and `_staging`
schemas (`fabric/roles.py`); dbt's `grants` config then grants it the as-of views on every build.

Parsing: dbt re-parses the whole project when `--vars` differ from the saved parse state, i.e. on every
build of another world. Each world keeps its own parse state (`target/partial_parse/<world>.msgpack`),
copied into the invocation's own target folder before dbt starts, so a world's second build parses
only what changed.

Concurrency (parallel cells, several processes on one state folder): every invocation gets its own target
and log folder inside the state folder (`<state>/dbt/runs/<world>-<run>-<pid>-<token>/`, dagster-dbt sets
DBT_TARGET_PATH and DBT_LOG_PATH to it), removed when the build succeeds and kept (the newest
`KEEP_FAILED_RUNS`) when it fails; the manifest `@dbt_assets` reads at import stays in
`dbt_project/target/`, and the saved parse states beside it are replaced by rename (a cache any process may
read). A world's build holds a Postgres advisory lock on its analytics schema for the whole `dbt build`:
two builds of one world would collide on dbt's `__dbt_tmp` / `__dbt_backup` relations and drop each other's
views (a table rebuild drops the views on it with CASCADE).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_dbt import DagsterDbtTranslator, DagsterDbtTranslatorSettings, DbtCliResource, dbt_assets

from churn_assets.errors import UserFacingError
from churn_assets.fabric.postgres import connection, dbt_connection_env, read_load_key, schema_name, world_prefix
from churn_assets.fabric.roles import arm_secret, ensure_arm_role
from churn_assets.fabric.warehouse_content import forget_content, record_content
from churn_assets.fabric.warehouse_raw import META_TABLE as RAW_META_TABLE
from churn_assets.files import other_process_alive
from churn_assets.freshness.scenario import DBT_BUILD  # the planner's name for a world's whole dbt build
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.routes import warehouse_views
from churn_assets.orchestration.assets.common import require_world, step_failure, step_progress, user_errors
from churn_assets.orchestration.dbt_project import (
    ANALYTICS_GROUP,
    analytics_key,
    dbt_executable,
    dbt_project,
    require_manifest,
)
from churn_assets.orchestration.partitions import world_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.seal_key import seal_key

PARTIAL_PARSE_FILE = "partial_parse.msgpack"
PARSE_STATE_DIR = Path(dbt_project.project_dir) / "target" / "partial_parse"
KEEP_FAILED_RUNS = 5


class WarehouseDbtTranslator(DagsterDbtTranslator):
    """Models are `analytics/<model>` in group `analytics`; sources keep their `meta.dagster.asset_key`."""

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> dg.AssetKey:
        if dbt_resource_props["resource_type"] == "source":
            return super().get_asset_key(dbt_resource_props)
        return analytics_key(dbt_resource_props["name"])

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        return ANALYTICS_GROUP


class WarehouseDbtCli(DbtCliResource):
    """`DbtCliResource` without dagster-dbt's in-process dbt adapter: it only serves row-count and column
    metadata (`fetch_row_counts`, `fetch_column_metadata`), which these assets do not fetch, and loading it
    costs seconds per build (dbt's imports and profile, in this process, before dbt even starts)."""

    def _initialize_dbt_core_adapter(self, args: Sequence[str]) -> Any:
        return None


# Every raw table maps to the one `warehouse_raw` asset.
TRANSLATOR = WarehouseDbtTranslator(settings=DagsterDbtTranslatorSettings(enable_duplicate_source_asset_keys=True))
# DbtCliResource's own __init__ takes a DbtProject; mypy types a pydantic subclass's __init__ from its fields
# (project_dir: str) instead.
DBT = WarehouseDbtCli(project_dir=dbt_project, dbt_executable=dbt_executable())  # type: ignore[arg-type]


@contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the dbt subprocess started inside the block, then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _parse_state(world_id: str) -> Path:
    return PARSE_STATE_DIR / f"{world_prefix(world_id)}.msgpack"


def _writer_pid(folder: Path) -> int | None:
    """The process id in a run folder's name (`<world>-<run>-<pid>-<token>`), None for other names."""
    parts = folder.name.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _in_progress(folder: Path) -> bool:
    """Whether another live process may still be running dbt in `folder` (this process runs one build at a
    time, so its own older folders are finished)."""
    pid = _writer_pid(folder)
    return pid is not None and other_process_alive(pid)


def _prepare_target(runs: Path, world_id: str, run_id: str) -> Path:
    """A fresh target (and log) folder for one invocation under `runs`, seeded with the world's saved parse
    state. Folders of failed builds are kept for their logs, only the newest `KEEP_FAILED_RUNS` of them;
    folders of builds still running in other processes are never touched."""
    if runs.is_dir():
        finished = [p for p in runs.iterdir() if p.is_dir() and not _in_progress(p)]
        for old in sorted(finished, key=lambda p: p.stat().st_mtime, reverse=True)[KEEP_FAILED_RUNS:]:
            shutil.rmtree(old, ignore_errors=True)
    target = runs / f"{world_prefix(world_id)}-{run_id[:8]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    target.mkdir(parents=True, exist_ok=True)
    saved = _parse_state(world_id)
    if saved.exists():
        shutil.copyfile(saved, target / PARTIAL_PARSE_FILE)
    return target


@contextmanager
def world_build_lock(url: str, world_id: str, on_wait: Callable[[], None]) -> Iterator[None]:
    """A session advisory lock on the world's analytics schema, held on a connection of its own while dbt runs
    (Postgres drops it if this process dies); `on_wait` is called when another build holds it."""
    name = f"churnbench dbt build {schema_name(world_id, 'analytics')}"
    with connection(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (name,)).fetchone()
        if not (row and row[0]):
            on_wait()
            conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))


def _save_parse_state(target: Path, world_id: str) -> None:
    produced = target / PARTIAL_PARSE_FILE
    if not produced.exists():
        return
    PARSE_STATE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = PARSE_STATE_DIR / f".{world_prefix(world_id)}.{uuid.uuid4().hex[:6]}.tmp"
    shutil.copyfile(produced, tmp)
    tmp.replace(_parse_state(world_id))


def prepare_world(url: str, world_id: str, secret: str) -> None:
    """What a dbt build of a world needs first: its raw layer, and the world's arm role (its password derived
    from `secret`) with its schema grants."""
    with connection(url, autocommit=True) as conn:
        if read_load_key(conn, schema_name(world_id, "raw"), RAW_META_TABLE) is None:
            raise UserFacingError(f"world {world_id} has no raw layer ({schema_name(world_id, 'raw')}): "
                                  "materialize `warehouse_raw` first")
        ensure_arm_role(conn, world_id, secret)


@dbt_assets(
    manifest=require_manifest(),
    project=dbt_project,
    partitions_def=world_partitions,
    dagster_dbt_translator=TRANSLATOR,
    name=DBT_BUILD,
)
def analytics_dbt(context: dg.AssetExecutionContext, state: StateResource) -> Iterator[Any]:
    """`dbt build` of one world: staging views, SCD2 marts, as-of views, and every dbt test."""
    world_id = context.partition_key
    require_world(state, world_id)
    with user_errors():
        url = state.service_urls().warehouse
        prepare_world(url, world_id, arm_secret(state.paths.arm_secret_file))
    target = _prepare_target(state.paths.dbt_runs_dir, world_id, context.run.run_id)

    def waiting() -> None:
        context.log.info(f"another dbt build of {world_id} is running; waiting for it")

    try:
        with world_build_lock(url, world_id, waiting):
            with connection(url) as conn:  # a build that does not finish leaves no record: nothing reads it
                forget_content(conn, world_id)
            with _environ(dbt_connection_env(url)):
                # dagster-dbt points DBT_TARGET_PATH and DBT_LOG_PATH at `target`: this invocation's own folder.
                invocation = DBT.cli(["build", "--vars", json.dumps({"world": world_id})], context=context,
                                     target_path=target)
            # dbt's own log goes to stdout (captured by the CLI for an error message): the count is the progress.
            tally = step_progress(context, DBT_BUILD, world_id, None,
                                  len(context.selected_asset_keys) + len(context.selected_asset_check_keys),
                                  "models and tests done")
            for event in invocation.stream():
                if isinstance(event, (dg.Output, dg.AssetMaterialization, dg.AssetCheckResult)):
                    tally.advance()
                yield event
            tally.finish()
            with connection(url) as conn:  # what evaluations check the as-of views' reads against
                recorded = record_content(conn, world_id, warehouse_views(load_registry()),
                                          seal_key(state.paths.root))
    except Exception as e:
        raise step_failure(f"dbt build of {world_id} failed ({type(e).__name__}: {e}); its logs and artifacts are "
                           f"kept in {target}") from e
    context.log.info(f"{world_id}: content hashes of {len(recorded)} relations the as-of views read recorded")
    _save_parse_state(target, world_id)
    shutil.rmtree(target, ignore_errors=True)
