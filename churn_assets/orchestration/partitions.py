"""Every partitions definition and partition mapping of the code location, defined once (docs/rules.md,
"Partitions" and "Calendar"; decisions 115-117).

- `world_partitions`: one dynamic partition per registered world (`churnbench worlds add` adds it).
- `world_day_partitions`: one dynamic partition per (world, day) of a registered world's own calendar, for
  everything that is "a world as of a day". `world_registry.add_world` registers a world's days with it, so a
  30-day world has 30 day partitions (the world x 180-day product of before showed 150 that could never exist,
  and a backfill of "missing" launched them). Key: `<YYYY-MM-DD>|<world id>` (`world_day_key`), the string
  form of the multi-partition key of before, so that materializations recorded under it keep matching.
- `scenario_partitions`: one dynamic partition per defined scenario (the `eval_run` asset).
- `sweep_partitions`: one dynamic partition per launched sweep (the `sweep_report` asset).
- `regression_partitions`: one dynamic partition per regression sweep (the `regression_report` asset and its
  gate). A set of its own (issue 46): sharing `sweep_partitions`, each report listed the other's sweeps as
  "Missing", and materializing `regression_report` for an ordinary sweep gated it against the regression
  baseline.

Mappings (built-in ones only: Dagster 1.13 drops any other from what the webserver sees and warns that it
is deprecated):

- `OF_THE_WORLD`: a (world, day) partition reads its world's partition of a per-world asset (the ledger, the
  dbt build). No built-in mapping maps one dynamic set onto another by a part of the key, so the edge is
  declared on all partitions, and each asset checks at run time that its world's upstream data is there (the
  ledger through `assets.common.world_ledger`, a mart through `grounding.staging.source_columns`), failing in
  one line that names the fix.
- `ANY_PARTITION`: an edge that needs no matching keys (an `eval_run` scenario reads partitions of many
  days; its inputs are checked at run time, docs/rules.md, "Evaluation wiring").
"""

from __future__ import annotations

import datetime as dt
import re
import warnings

import dagster as dg

from churn_assets.errors import UserFacingError
from churn_assets.world.calendar import Day, typed_day
from churn_assets.world.config import WORLD_ID_RE, WorldConfig

WORLD_PARTITIONS_NAME = "world"
WORLD_DAY_PARTITIONS_NAME = "world_day"
SCENARIO_PARTITIONS_NAME = "scenario"
SWEEP_PARTITIONS_NAME = "sweep"
REGRESSION_PARTITIONS_NAME = "regression_sweep"
WORLD_DAY_SEPARATOR = "|"  # Dagster's own separator of multi-partition keys (the key form of before)
WORLD_DAY_KEY_FORM = "<YYYY-MM-DD>|<world id>"
_DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

world_partitions = dg.DynamicPartitionsDefinition(name=WORLD_PARTITIONS_NAME)
world_day_partitions = dg.DynamicPartitionsDefinition(name=WORLD_DAY_PARTITIONS_NAME)
scenario_partitions = dg.DynamicPartitionsDefinition(name=SCENARIO_PARTITIONS_NAME)
sweep_partitions = dg.DynamicPartitionsDefinition(name=SWEEP_PARTITIONS_NAME)
regression_partitions = dg.DynamicPartitionsDefinition(name=REGRESSION_PARTITIONS_NAME)

with warnings.catch_warnings():
    # AllPartitionMapping is beta in Dagster 1.13, and exactly the edges wanted.
    warnings.simplefilter("ignore", dg.BetaWarning)
    OF_THE_WORLD = dg.AllPartitionMapping()
    ANY_PARTITION = dg.AllPartitionMapping()


class PartitionKeyError(UserFacingError):
    """A partition key that does not parse (typed by hand in the UI, say); the message names the form."""


def world_day_key(world_id: str, day: Day | str) -> str:
    """The world-day partition key of `world_id` as of `day`: `<YYYY-MM-DD>|<world id>`."""
    day_key = day.isoformat() if isinstance(day, dt.date) else day
    return f"{day_key}{WORLD_DAY_SEPARATOR}{world_id}"


def world_and_day(partition_key: str) -> tuple[str, Day]:
    """(world, day) of a world-day partition key; a `PartitionKeyError` naming the expected form otherwise."""
    day_text, separator, world_id = str(partition_key).partition(WORLD_DAY_SEPARATOR)
    problem = None
    if not separator:
        problem = f"no {WORLD_DAY_SEPARATOR!r}"
    elif not WORLD_ID_RE.match(world_id):
        problem = f"{world_id!r} is not a world id (<name>-s<seed>-<hash6>)"
    elif not _DAY_RE.match(day_text):
        problem = f"{day_text!r} is not a day"
    else:
        try:
            return world_id, typed_day(day_text)
        except ValueError as e:
            problem = str(e)
    raise PartitionKeyError(f"{partition_key!r} is not a world-day partition key ({problem}; expected "
                            f"{WORLD_DAY_KEY_FORM}, e.g. 2024-01-30|default-s42-3f9a1c)")


def world_day_keys(config: WorldConfig) -> list[str]:
    """The world-day partitions of a world: every day of its own calendar, in order."""
    return [world_day_key(config.world_id, config.start + dt.timedelta(days=i)) for i in range(config.days)]


def world_of_key(partition_key: str) -> str | None:
    """The world of a world-day key, None when the key does not parse (for listing, never for running)."""
    try:
        return world_and_day(partition_key)[0]
    except PartitionKeyError:
        return None


def is_world_keyed(partitions_def: dg.PartitionsDefinition | None) -> bool:
    """Whether assets with this partitioning are keyed by world (alone or with a day)."""
    return partitions_def is not None and partitions_def in (world_partitions, world_day_partitions)
