"""The state folder: where one deployment keeps its worlds, its Dagster home and its service records.

Default `.churnbench/` in the working directory; `CHURNBENCH_STATE_DIR` overrides it. Everything a
command needs is found through this folder only (docs/rules.md, "State folder"), so two
clones never touch each other's services or data.

Layout::

    <state>/
      .state-id                 random id of this state folder (ties the embedded Postgres data to it)
      state-format              the format of what the folder holds (`STATE_FORMAT`; see "Format" below)
      seal-key                  the key results seals are MACs under (0600, made on first use; `seal_key.py`;
                                back it up with the folder: without it no seal here can be checked)
      services/                 one <service>.json record per embedded service, logs, the Mongo data
      dagster/                  DAGSTER_HOME (generated dagster.yaml: storage on the embedded Postgres)
      worlds/<world>/           config.json (the registered world config), ledger/, contracts/<day>/,
                                tasks/<T>/tasks.jsonl
      scenarios/<key>.json      defined scenarios (the `eval_run` partitions) and their plans
      results/<world>/          evaluation results
      locks/<world>/            lock files of builds that processes sharing the folder must not run at once
      dbt/runs/                 each dbt invocation's own target and log folder (removed when it succeeds)
      logs/errors/              the full trace of each error a command printed as one line (the newest kept)

The embedded Postgres data directory is NOT inside the state folder: the embedded server, run as root,
opens the permissions of every parent of its data directory (and runs as a system user that must
traverse them). It lives under `/var/tmp/churnbench-pg-<hash of the state folder's absolute path>/`,
whose parents are world-traversable already, and two state folders never share it.

Format: what the folder holds (files, and what the Dagster instance and the results catalog of its services
key by) changes with the code now and then. `state-format` records the format; a folder with a `.state-id` but
without it was made before formats were recorded (format 1), and one with neither has never had its services
started, so nothing of an older churnbench is in it (`ensure` stamps it). `require_current_format` is the cheap
gate every command that reads worlds, scenarios or results passes (one small file read): a folder of an older
format that holds anything is refused in one line naming `churnbench migrate`, which brings it to
`STATE_FORMAT` (an empty one is simply stamped). Formats:

- 1: before issue 20 (no `state-format` file);
- 2: world-day partitions hold only each world's own days; scenario keys put the world last (issue 20);
- 3: every world's ledger manifest records its passed meaning check, which loaders require (issue 35);
- 4: the catalog's results seals are MACs under the state folder's key, `seal-key` (issue 46; plain seals that
  still match their files re-sealed, the others named);
- 5: ledger manifests' meaning checks and the warehouses' content records are sealed under that key too (issue 46;
  a ledger is checked again, a warehouse record sealed if the warehouse still matches it, else named).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from churn_assets.errors import UserFacingError

# `atomic_write_text` is re-exported: the services and the Dagster wing have always imported it from here.
from churn_assets.files import atomic_write_text as atomic_write_text
from churn_assets.files import temporary_name
from churn_assets.unique_keys import load_json
from churn_assets.world.config import WORLD_ID_RE, WorldConfig, WorldConfigError, config_from_data

STATE_DIR_ENV = "CHURNBENCH_STATE_DIR"
DEFAULT_STATE_DIRNAME = ".churnbench"
# Where embedded Postgres data directories go; its parents must already be world-traversable.
PG_ROOT_ENV = "CHURNBENCH_PG_ROOT"
DEFAULT_PG_ROOT = Path("/var/tmp")
PG_HOME_PREFIX = "churnbench-pg-"

STATE_FORMAT = 5
STATE_FORMAT_FILE = "state-format"
MIGRATE_COMMAND = "churnbench migrate"

WORLD_CONFIG_FILE = "config.json"
LEDGER_DIRNAME = "ledger"
TASKS_DIRNAME = "tasks"



class StateError(UserFacingError):
    """The state folder or a path inside it is unusable; the message names it."""


class StateFormatError(StateError):
    """The state folder holds data of another format than this code's (`STATE_FORMAT`)."""


def validate_world_id(world_id: str) -> str:
    """World ids become folder names, partition keys and SQL identifiers: refuse anything else."""
    if not WORLD_ID_RE.match(world_id):
        raise StateError(f"{world_id!r} is not a world id (expected <name>-s<seed>-<hash6>, "
                         "e.g. default-s42-3f9a1c; see `churnbench worlds list`)")
    return world_id


def sql_identifier(world_id: str) -> str:
    """The world id as a SQL identifier prefix (`default-s42-3f9a1c` -> `default_s42_3f9a1c`)."""
    return validate_world_id(world_id).replace("-", "_")


@dataclass(frozen=True)
class StatePaths:
    """Absolute paths of one state folder. Creating this object touches nothing on disk."""

    root: Path

    @classmethod
    def resolve(cls, root: str | Path | None = None) -> StatePaths:
        """`root`, else `CHURNBENCH_STATE_DIR`, else `./.churnbench`; always made absolute."""
        chosen = root or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIRNAME
        return cls(Path(chosen).expanduser().resolve())

    # -- the folder itself ----------------------------------------------------------------------

    def ensure(self) -> StatePaths:
        """Create the folder (and its id) if missing; refuse a path that is not a directory."""
        if self.root.exists() and not self.root.is_dir():
            raise StateError(f"state folder {self.root} exists and is not a directory")
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.state_id_file.exists():
            # Every churnbench that wrote into a folder started its services here first, which wrote the id: a
            # folder without one holds nothing an older churnbench wrote, so it is of today's format.
            if not self.state_format_file.exists():
                write_state_format(self)
            # Linked into place, not renamed: two processes creating the folder at once must agree on one id
            # (a rename would let the second overwrite the id the first has already recorded elsewhere).
            tmp = temporary_name(self.state_id_file)
            tmp.write_text(secrets.token_hex(8) + "\n")
            try:
                os.link(tmp, self.state_id_file)
            except FileExistsError:
                pass
            finally:
                tmp.unlink(missing_ok=True)
        return self

    @property
    def state_format_file(self) -> Path:
        return self.root / STATE_FORMAT_FILE

    def holds_data(self) -> bool:
        """Whether the folder holds worlds, scenarios, results or sweeps (what a migration would have to touch)."""
        for folder in (self.worlds_dir, self.root / "scenarios", self.results_root, self.root / "sweeps"):
            if folder.is_dir() and any(folder.iterdir()):
                return True
        return False

    @property
    def state_id_file(self) -> Path:
        return self.root / ".state-id"

    @property
    def state_id(self) -> str:
        """Random id written when the folder is created: a new folder at an old path gets a new id."""
        try:
            return self.state_id_file.read_text().strip()
        except FileNotFoundError:
            raise StateError(f"state folder {self.root} is not initialised (no .state-id)") from None

    @property
    def error_traces_dir(self) -> Path:
        """Where the CLI writes the full trace of an error it printed as one line (`commands/error_output.py`)."""
        return self.root / "logs" / "errors"

    # -- services -------------------------------------------------------------------------------

    @property
    def services_dir(self) -> Path:
        return self.root / "services"

    def service_record(self, name: str) -> Path:
        return self.services_dir / f"{name}.json"

    @property
    def services_lock(self) -> Path:
        return self.services_dir / ".lock"

    @property
    def arm_secret_file(self) -> Path:
        """The generated secret the arms' Postgres passwords derive from (`fabric/roles.py`), mode 0600."""
        return self.services_dir / "postgres-arm-secret"

    @property
    def postgres_password_file(self) -> Path:
        """The generated password of the embedded Postgres superuser over TCP (`services/postgres.py`), mode 0600."""
        return self.services_dir / "postgres-password"

    @property
    def mongo_dir(self) -> Path:
        return self.services_dir / "mongo"

    @property
    def path_hash(self) -> str:
        return hashlib.sha256(str(self.root).encode()).hexdigest()[:16]

    @property
    def pg_home(self) -> Path:
        """Folder made for the embedded Postgres of this state folder (outside it, see module doc)."""
        return pg_root() / f"{PG_HOME_PREFIX}{self.path_hash}"

    @property
    def pg_data(self) -> Path:
        return self.pg_home / "data"

    # -- Dagster --------------------------------------------------------------------------------

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster"

    @property
    def dagster_yaml(self) -> Path:
        return self.dagster_home / "dagster.yaml"

    # -- worlds ---------------------------------------------------------------------------------

    @property
    def worlds_dir(self) -> Path:
        return self.root / "worlds"

    def world_dir(self, world_id: str) -> Path:
        return self.worlds_dir / validate_world_id(world_id)

    def world_config_file(self, world_id: str) -> Path:
        return self.world_dir(world_id) / WORLD_CONFIG_FILE

    def ledger_dir(self, world_id: str) -> Path:
        return self.world_dir(world_id) / LEDGER_DIRNAME

    def contracts_root(self, world_id: str) -> Path:
        """`<state>/worlds/<world>/contracts`: one sub-folder per materialized day of contract documents."""
        from contracts.store import CONTRACTS_DIRNAME

        return self.world_dir(world_id) / CONTRACTS_DIRNAME

    def task_set_file(self, world_id: str, day: dt.date | str) -> Path:
        """`<state>/worlds/<world>/tasks/<T>/tasks.jsonl`, the `task_set` partition (world, T)."""
        from churn_assets.tasks.task_set import TASKS_FILE

        key = day if isinstance(day, str) else day.isoformat()
        return self.world_dir(world_id) / TASKS_DIRNAME / key / TASKS_FILE

    def written_tasks_file(self, name: str, day: dt.date, n: int, seed: int) -> Path:
        """`<state>/task-files/<name>/<T>-n<N>-seed<S>.jsonl`: where `churnbench tasks` writes without `--out` (a
        file of the user's, beside the state it came from; never the `task_set` asset's partition folder, and
        never the working directory, where it would land in a git clone)."""
        return self.root / "task-files" / name / f"{day.isoformat()}-n{n}-seed{seed}.jsonl"

    def scenario_file(self, key: str) -> Path:
        """`<state>/scenarios/<scenario key>.json`: a defined scenario and its plan."""
        return self.root / "scenarios" / f"{key}.json"

    @property
    def results_root(self) -> Path:
        """`<state>/results/`: every world's results folder and `sweeps/` (the sweep reports)."""
        return self.root / "results"

    def results_dir(self, world_id: str) -> Path:
        return self.results_root / validate_world_id(world_id)

    # -- concurrency ----------------------------------------------------------------------------

    @property
    def locks_dir(self) -> Path:
        """`<state>/locks`: the lock files of before decision 332 (`worlds rm` removes a world's leftovers)."""
        return self.root / "locks"

    def world_locks_dir(self, world_id: str) -> Path:
        return self.locks_dir / validate_world_id(world_id)

    def lock_name(self, world_id: str, kind: str, name: str) -> str:
        """`<world>/<kind>/<name>`: the lock of one build of a world (a Postgres advisory lock, `state_locks.py`)."""
        for part in (kind, name):
            if not part or "/" in part or part.startswith("."):
                raise StateError(f"{part!r} cannot name a lock of world {world_id}")
        return f"{validate_world_id(world_id)}/{kind}/{name}"

    def world_use_lock(self, world_id: str) -> str:
        """`<world>/in-use`: held shared by every command building or evaluating the world, exclusively by its
        removal (`orchestration/world_registry.using_world`)."""
        return f"{validate_world_id(world_id)}/in-use"

    @property
    def dbt_runs_dir(self) -> Path:
        """`<state>/dbt/runs`: one target + log folder per dbt invocation."""
        return self.root / "dbt" / "runs"

    def world_ids_on_disk(self) -> set[str]:
        """Worlds with a folder under `worlds/` (registered or not)."""
        if not self.worlds_dir.is_dir():
            return set()
        return {p.name for p in self.worlds_dir.iterdir() if p.is_dir() and WORLD_ID_RE.match(p.name)}


def stored_state_format(paths: StatePaths) -> int:
    """The format recorded in the folder: 1 when it records none but has an id (its services were started by a
    churnbench from before formats were recorded); today's when it has neither (nothing old ever wrote there)."""
    try:
        text = paths.state_format_file.read_text().strip()
    except FileNotFoundError:
        return 1 if paths.state_id_file.exists() else STATE_FORMAT
    try:
        return int(text)
    except ValueError:
        raise StateFormatError(f"{paths.state_format_file} holds {text[:40]!r}, not a state format number") from None


def write_state_format(paths: StatePaths, version: int = STATE_FORMAT) -> None:
    atomic_write_text(paths.state_format_file, f"{version}\n")


_CURRENT: set[Path] = set()  # folders found current in this process (the check runs once per folder)


def require_current_format(paths: StatePaths) -> None:
    """Refuse, in one line naming `churnbench migrate`, a state folder whose data is of an older format; stamp
    an older folder that holds nothing (there is nothing to migrate). Cheap: one small file read per process."""
    if paths.root in _CURRENT:
        return
    found = stored_state_format(paths)
    if found > STATE_FORMAT:
        raise StateFormatError(f"state folder {paths.root} is of format {found}, newer than this churnbench's "
                               f"{STATE_FORMAT}: a newer churnbench wrote it; use that version")
    if found < STATE_FORMAT:
        if paths.holds_data():
            raise StateFormatError(f"state folder {paths.root} holds data of an older churnbench (state format "
                                   f"{found}, this one reads {STATE_FORMAT}): run `{MIGRATE_COMMAND}` first")
        write_state_format(paths)
    _CURRENT.add(paths.root)


class WorldNotFoundError(UserFacingError):
    """A world id that is not registered, or registered without a stored config."""


def write_world_config(paths: StatePaths, config: WorldConfig) -> Path:
    """Store a world's config (`worlds add`; `orchestration/world_registry.py` registers it in Dagster)."""
    target = paths.world_config_file(config.world_id)
    text = json.dumps(config.data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_text(target, text)
    return target


def load_world_config(paths: StatePaths, world_id: str) -> WorldConfig:
    """The stored config of `world_id`, checked to still hash to that id. A file read, no service and no Dagster:
    commands check a request against it before they open anything (`orchestration/requests.py`)."""
    validate_world_id(world_id)
    path = paths.world_config_file(world_id)
    try:
        data = load_json(path.read_text(), f"world config {path}")
    except FileNotFoundError:
        raise WorldNotFoundError(
            f"world {world_id} has no stored config ({path} is missing): register it with "
            "`churnbench worlds add` (see `churnbench worlds list`)") from None
    except json.JSONDecodeError as e:
        raise WorldNotFoundError(f"world config {path} is not valid JSON ({e.msg})") from None
    try:
        config = config_from_data(data)
    except WorldConfigError as e:
        raise WorldNotFoundError(f"world config {path}: {e}") from None
    if config.world_id != world_id:
        raise WorldNotFoundError(f"world config {path} hashes to {config.world_id}, not {world_id}: "
                                 "it was edited after registration; remove the world and add it again")
    return config


def pg_root() -> Path:
    """The folder every state folder's embedded Postgres cluster lives in (`churnbench services gc` scans it)."""
    return Path(os.environ.get(PG_ROOT_ENV) or _default_pg_root())


def _default_pg_root() -> Path:
    # /var/tmp survives reboots (unlike /tmp on many systems) and is world-traversable already.
    return DEFAULT_PG_ROOT if DEFAULT_PG_ROOT.is_dir() else Path(tempfile.gettempdir())

