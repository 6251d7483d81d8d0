"""What every asset module does before it calls the core: turn user errors into a clean step failure, find
a partition's world (and day) with its stored config, and read the world's verified ledger once per process.

- `user_errors()`: a `UserFacingError` fails the step with its own message and no retry (no traceback).
- `step_failure(message)`: the step failure every asset and job raises for a user error: its description is the
  one line the CLI prints for it, and a run launched from the UI shows that line alone as its failure, with no
  class name and no stack (`orchestration/refusal.py`).
- `require_world(state, world_id)`: the stored config of a registered world, or such a failure (a world key
  added by hand in the UI, without a stored config, fails clearly, never by guessing, naming the command that
  registers a world, and is removed from the partition list: `orchestration/unbacked.py`).
- `require_world_day(state, partition_key)`: the world, day and config of a world-day partition: a key that does
  not parse, of a world without a stored config, or of a day outside the world's calendar (all of which can be
  typed into the UI's "add partition" dialog) fails the step in one line and is removed from the list.
- `world_ledger(state, world_id)`: the world's `LoadedLedger`, verified by the loader, kept per process while
  the files are unchanged (size and mtime of the ledger, mtime of the manifest): loading and verifying a
  180-day ledger costs more than folding and writing a day, so a backfill of many days, or the checks right
  after an asset, read it once.
- `world_as_of(loaded, day)`: the fold of that ledger as of the day, the last one kept per process: an asset and
  its checks in one run (the operational store and its parity check) fold the day once.
- `step_progress(context, what, world, day, total, unit)`: a long step's `progress.Tally`, its lines in the run's
  log and on this process's stderr (a CLI run's console logger is quiet, `materialize.QUIET_RUN_CONFIG`, and a
  dbt step's stdout is captured for its error message; stderr is what a terminal or a log shows live, also from
  a pool worker, which inherits it).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from churn_assets.errors import UserFacingError, one_line
from churn_assets.memo import Memo, memo
from churn_assets.orchestration.partitions import (
    WORLD_DAY_PARTITIONS_NAME,
    WORLD_PARTITIONS_NAME,
    PartitionKeyError,
    world_and_day,
)
from churn_assets.orchestration.refusal import StepRefusal
from churn_assets.orchestration.resources import StateResource
from churn_assets.orchestration.unbacked import Unbacked, refusal, world_problem
from churn_assets.progress import Tally, partition_label
from churn_assets.world.calendar import Day, outside_calendar
from churn_assets.world.config import WorldConfig
from churn_assets.world.fold import fold_ledger
from churn_assets.world.ledger import LEDGER_FILE, MANIFEST_FILE, LedgerError, LoadedLedger, load_ledger
from churn_assets.world.packed import records_key
from churn_assets.world.state import WorldState


def step_failure(message: object, metadata: dict[str, Any] | None = None) -> StepRefusal:
    """A step failure for an error the user can act on: its description and its recorded error are its one line
    (the CLI's error line; a UI-launched run shows it alone as its failure), no retry. The line is no longer
    repeated as a metadata entry `error` (decision 323): the UI printed it twice in the failure's row."""
    return StepRefusal(one_line(message), metadata)


@contextmanager
def user_errors(prefix: str = "") -> Iterator[None]:
    """A `UserFacingError` fails the step with its own message (after `prefix`) and no retry (no traceback to
    read)."""
    try:
        yield
    except UserFacingError as e:
        raise step_failure(f"{prefix}{e}") from None


def step_progress(context: dg.AssetExecutionContext, what: str, world_id: str, day: Day | None, total: int,
                  unit: str) -> Tally:
    """A `Tally` of the step's work, labelled with its world and day (`progress.partition_label`)."""
    def echo(line: str) -> None:
        context.log.info(line)
        print(f"  {line}", file=sys.stderr, flush=True)

    return Tally(partition_label(what, world_id, day), total, unit, echo)


def require_world(state: StateResource, world_id: str, partitions: str = WORLD_PARTITIONS_NAME,
                  key: str | None = None) -> WorldConfig:
    """The stored config of `world_id`; when there is none (a key typed into the UI's "Add a partition"), a step
    failure naming the command that registers a world, the partition (`partitions`, `key`: the world's by default)
    removed from the list (`unbacked.refusal`)."""
    problem = world_problem(state.paths, world_id)
    if problem is not None and not state.paths.world_config_file(world_id).exists():
        raise refusal(Unbacked(partitions, key or world_id, problem))
    with user_errors():  # a stored config that no longer matches its id: refused, never removed
        return state.world_config(world_id)


def require_world_day(state: StateResource, partition_key: str) -> tuple[str, Day, WorldConfig]:
    """(world, day, the world's stored config) of a world-day partition, or a one-line step failure; a key that
    does not parse, of an unregistered world or of a day outside its calendar (typed into "Add a partition") is
    removed from the list too."""
    try:
        world_id, day = world_and_day(partition_key)
    except PartitionKeyError as e:
        raise refusal(Unbacked(WORLD_DAY_PARTITIONS_NAME, partition_key, str(e))) from None
    config = require_world(state, world_id, WORLD_DAY_PARTITIONS_NAME, partition_key)
    if not config.start <= day <= config.end:
        raise refusal(Unbacked(WORLD_DAY_PARTITIONS_NAME, partition_key, str(outside_calendar(
            "the day", day, config.start, config.end, f"world {config.world_id}"))))
    return world_id, day, config


class MissingLedgerError(UserFacingError):
    """A world whose ledger has not been materialized."""


# (path) -> ((ledger size, ledger mtime, manifest mtime), the ledger read then): a backfill's days read it once
LEDGERS: Memo[tuple[tuple[int, int, int], LoadedLedger]] = memo("assets.world_ledger", 2)
_LEDGER_LOCK = threading.Lock()  # one read at a time: two threads asking for a ledger wait for one read


def load_world_ledger(ledger_dir: Path, world_id: str) -> LoadedLedger:
    """The world's verified ledger, read once per process while its files are unchanged (the last two
    worlds read are kept). Raises `MissingLedgerError` / `LedgerError`."""
    try:
        stat, mstat = (ledger_dir / LEDGER_FILE).stat(), (ledger_dir / MANIFEST_FILE).stat()
    except FileNotFoundError:
        raise MissingLedgerError(f"world {world_id} has no ledger at {ledger_dir}: materialize its `ledger` "
                                 f"partition first (`churnbench worlds materialize {world_id}`)") from None
    stamp = (stat.st_size, stat.st_mtime_ns, mstat.st_mtime_ns)
    key = str(ledger_dir)
    with _LEDGER_LOCK:
        cached = LEDGERS.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        loaded = load_ledger(ledger_dir)
        LEDGERS.put(key, (stamp, loaded))
        return loaded


def world_ledger(state: StateResource, world_id: str) -> LoadedLedger:
    """The world's verified ledger for an asset or check: a missing or invalid ledger fails the step."""
    try:
        return load_world_ledger(state.ledger_dir(world_id), world_id)
    except LedgerError as e:
        raise step_failure(f"world {world_id}: the ledger is invalid: {e}") from None
    except UserFacingError as e:
        raise step_failure(e) from None


# (records, day, format) -> the fold: an asset's checks run right after it; more would hold a large world's
# states for nothing
FOLDS: Memo[WorldState] = memo("assets.world_as_of", 1)


def world_as_of(loaded: LoadedLedger, day: Day) -> WorldState:
    """`fold_ledger(loaded.records, day)`, kept for the last (ledger records, day) of the process (by value:
    `records_key`). Callers only read the state (as every projection and check does): it is shared."""
    key = (records_key(loaded.records), day, loaded.format_version)
    return FOLDS.get_or_compute(key, lambda: fold_ledger(loaded.records, day, format_version=loaded.format_version))


def problems_description(problems: list[str], shown: int = 3) -> str | None:
    """A check's one-line description: the first problems, and how many more (None when there are none)."""
    if not problems:
        return None
    more = f" (and {len(problems) - shown} more)" if len(problems) > shown else ""
    return "; ".join(problems[:shown]) + more

