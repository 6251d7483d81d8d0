"""Removing what a state folder leaves on the machine: `churnbench services purge` and `churnbench services gc`.

The embedded Postgres cluster of a state folder lives outside it, in `<pg root>/churnbench-pg-<hash of the
folder's path>/` (`StatePaths.pg_home`; `/var/tmp` unless `CHURNBENCH_PG_ROOT` says otherwise: see `state.py`
for why), with an `owner.json` naming the state folder and its id. Deleting a state folder by hand, or moving
it, leaves that cluster behind (84-227 MB each, measured), possibly still running.

- `purge_plan` / `purge_state_folder`: everything of one state folder: its services stopped (external ones are
  never touched), its cluster and the folder itself removed.
- `find_clusters`: every cluster under the Postgres root, with its owner, size and whether it is an orphan
  (its state folder is gone, or holds another id now: a folder made anew at the same path); `remove_cluster`
  stops an orphan's processes (found by their data folder and command lines) and deletes it. A cluster without
  `owner.json` is listed and never removed: nothing says whose it is.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from churn_assets.errors import UserFacingError
from churn_assets.services.base import ServiceError
from churn_assets.services.postgres import CLUSTER_OWNER_FILE as OWNER_FILE
from churn_assets.services.process import terminate
from churn_assets.services.supervisor import MONGO, POSTGRES, SAAS, stop_services
from churn_assets.state import PG_HOME_PREFIX, StatePaths, pg_root
from churn_assets.unique_keys import load_json


class PurgeError(UserFacingError):
    """A purge refused: the folder is not a churnbench state folder, or something could not be removed."""


def disk_usage(path: Path) -> int:
    """Bytes `path` occupies on disk (files, recursively; symlinks not followed; 0 when missing)."""
    total = 0
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):
        try:
            return Path(path).lstat().st_blocks * 512
        except FileNotFoundError:
            return 0
    except PermissionError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += disk_usage(Path(entry.path))
            else:
                total += entry.stat(follow_symlinks=False).st_blocks * 512
        except (FileNotFoundError, PermissionError):
            continue
    return total


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


# ---------------------------------------------------------------------------------------------------
# purge: one state folder
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PurgeItem:
    what: str
    path: Path
    bytes: int


def is_state_folder(paths: StatePaths) -> bool:
    """Whether `paths.root` is a folder churnbench made (it has an id or a format file)."""
    return paths.state_id_file.exists() or paths.state_format_file.exists()


def purge_plan(paths: StatePaths) -> list[PurgeItem]:
    """What `purge_state_folder` removes, with sizes. Refuses a folder that is not a state folder (a mistyped
    CHURNBENCH_STATE_DIR must never get a home folder deleted)."""
    items = []
    if paths.root.exists():
        if not paths.root.is_dir() or not is_state_folder(paths):
            raise PurgeError(f"{paths.root} is not a churnbench state folder (no {paths.state_id_file.name}): "
                             "nothing removed")
        items.append(PurgeItem("state folder", paths.root, disk_usage(paths.root)))
    if paths.pg_home.exists():
        items.append(PurgeItem("embedded Postgres cluster", paths.pg_home, disk_usage(paths.pg_home)))
    return items


def purge_state_folder(paths: StatePaths) -> list[PurgeItem]:
    """Stop the state folder's embedded services and remove its cluster and the folder; returns what it removed.
    External services (URLs in the environment) are left alone, with their data."""
    items = purge_plan(paths)
    stop_services(paths)
    for item in reversed(items):  # the cluster first: a purge cut short leaves a folder `purge` finds again
        shutil.rmtree(item.path, ignore_errors=True)
        if item.path.exists():
            raise PurgeError(f"could not remove {item.path} completely; remove it by hand")
    return items


# ---------------------------------------------------------------------------------------------------
# gc: clusters of every state folder of this machine
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    path: Path
    state_dir: Path | None  # from owner.json (None: no owner recorded)
    bytes: int
    orphan: bool
    reason: str  # why it is (or is not) an orphan

    @property
    def pg_data(self) -> Path:
        return self.path / "data"


def find_clusters(root: Path | None = None) -> list[Cluster]:
    """Every `churnbench-pg-*` cluster under `root` (default `pg_root()`), orphans marked."""
    root = root or pg_root()
    out = []
    for path in sorted(root.glob(f"{PG_HOME_PREFIX}*")) if root.is_dir() else []:
        if not path.is_dir() or path.is_symlink():
            continue
        out.append(_cluster(path))
    return out


def _cluster(path: Path) -> Cluster:
    size = disk_usage(path)
    try:
        owner = load_json((path / OWNER_FILE).read_text(), str(path / OWNER_FILE))
        state_dir, state_id = Path(owner["state_dir"]), str(owner["state_id"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
        return Cluster(path, None, size, False, f"no readable {OWNER_FILE}: whose it is is unknown; left alone")
    paths = StatePaths(state_dir)
    if not state_dir.is_dir():
        return Cluster(path, state_dir, size, True, f"its state folder {state_dir} is gone")
    try:
        current_id = paths.state_id
    except UserFacingError:
        return Cluster(path, state_dir, size, True, f"{state_dir} is no state folder any more (no .state-id)")
    if current_id != state_id:
        return Cluster(path, state_dir, size, True, f"{state_dir} was made anew (another state id)")
    return Cluster(path, state_dir, size, False, f"in use by {state_dir}")


def remove_cluster(cluster: Cluster) -> None:
    """Stop what still runs for an orphan cluster (its postmaster; the Mongo and SaaS servers of its gone state
    folder) and delete it."""
    if not cluster.orphan:
        raise ServiceError(f"{cluster.path} is not an orphan ({cluster.reason}); not removed")
    POSTGRES.stop_cluster(cluster.pg_data)
    if cluster.state_dir is not None and not cluster.state_dir.exists():
        gone = StatePaths(cluster.state_dir)
        for owner in (SAAS, MONGO):
            for proc in owner.owned_processes(gone):
                terminate(proc.pid, proc.create_time())
    shutil.rmtree(cluster.path, ignore_errors=True)
    if cluster.path.exists():
        raise ServiceError(f"could not remove {cluster.path} completely; remove it by hand")
