"""Every partitions definition and partition mapping of the code location, defined once (ARCHITECTURE.md
sections 3 and 10).

- `world_partitions`: one dynamic partition per registered world (`churnbench worlds add` adds it).
- `day_partitions`: the deployment calendar's days, with an explicit `end_date` so that the set of days
  is fixed by config, not by how far the wall clock has moved.
- `world_day_partitions`: world x day, for everything that is "a world as of a day".
- `scenario_partitions`: one dynamic partition per defined scenario (the `eval_run` asset).
- `sweep_partitions`: one dynamic partition per launched sweep (the `sweep_report` asset).

Mappings:

- `OF_THE_WORLD`: a (world, day) partition reads the world's partition of a per-world asset (its ledger,
  its dbt build).
- `ANY_PARTITION`: an edge that needs no matching keys (an `eval_run` scenario reads partitions of many
  days; its inputs are checked at run time, section 10 "Evaluation wiring").
"""

from __future__ import annotations

import datetime as dt
import warnings

import dagster as dg

from churn_assets.deployment import deployment
from churn_assets.world.calendar import Day

WORLD_PARTITIONS_NAME = "world"
SCENARIO_PARTITIONS_NAME = "scenario"
SWEEP_PARTITIONS_NAME = "sweep"
WORLD_DIMENSION = "world"
DAY_DIMENSION = "day"

CALENDAR = deployment().calendar

world_partitions = dg.DynamicPartitionsDefinition(name=WORLD_PARTITIONS_NAME)
scenario_partitions = dg.DynamicPartitionsDefinition(name=SCENARIO_PARTITIONS_NAME)
sweep_partitions = dg.DynamicPartitionsDefinition(name=SWEEP_PARTITIONS_NAME)

# end_date is exclusive in Dagster. Note: Dagster never shows day partitions later than the wall clock,
# so a calendar must lie in the past (the default, 2024, does).
day_partitions = dg.DailyPartitionsDefinition(
    start_date=CALENDAR.start.isoformat(),
    end_date=CALENDAR.end_exclusive.isoformat(),
    timezone="UTC",
)

world_day_partitions = dg.MultiPartitionsDefinition(
    {WORLD_DIMENSION: world_partitions, DAY_DIMENSION: day_partitions}
)

with warnings.catch_warnings():
    # Both mappings are beta in Dagster 1.13, and exactly the edges wanted.
    warnings.simplefilter("ignore", dg.BetaWarning)
    OF_THE_WORLD = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name=WORLD_DIMENSION)
    ANY_PARTITION = dg.AllPartitionMapping()


def world_day_key(world_id: str, day: Day | str) -> dg.MultiPartitionKey:
    """The world x day partition key of `world_id` as of `day`."""
    day_key = day.isoformat() if isinstance(day, dt.date) else day
    return dg.MultiPartitionKey({WORLD_DIMENSION: world_id, DAY_DIMENSION: day_key})


def world_and_day(partition_key: str | dg.MultiPartitionKey) -> tuple[str, Day]:
    """(world, day) of a world x day partition key (a `MultiPartitionKey` or its string form)."""
    key = partition_key if isinstance(partition_key, dg.MultiPartitionKey) \
        else world_day_partitions.get_partition_key_from_str(partition_key)
    dims = key.keys_by_dimension
    return dims[WORLD_DIMENSION], dt.date.fromisoformat(dims[DAY_DIMENSION])


def is_world_keyed(partitions_def: dg.PartitionsDefinition | None) -> bool:
    """Whether assets with this partitioning are keyed by world (alone or as one dimension)."""
    if partitions_def is None:
        return False
    if partitions_def == world_partitions:
        return True
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return any(d.partitions_def == world_partitions for d in partitions_def.partitions_defs)
    return False
