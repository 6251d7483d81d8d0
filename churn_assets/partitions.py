"""The partitions every asset uses, defined once (ARCHITECTURE.md sections 3 and 10).

- `world_partitions`: one dynamic partition per registered world (`churnbench worlds add` adds it).
- `day_partitions`: the deployment calendar's days, with an explicit `end_date` so that the set of days
  is fixed by config, not by how far the wall clock has moved.
- `world_day_partitions`: world x day, for everything that is "a world as of a day".
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from churn_assets.deployment import deployment

WORLD_PARTITIONS_NAME = "world"
WORLD_DIMENSION = "world"
DAY_DIMENSION = "day"

CALENDAR = deployment().calendar

world_partitions = dg.DynamicPartitionsDefinition(name=WORLD_PARTITIONS_NAME)

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


def world_day_key(world_id: str, day: dt.date | str) -> dg.MultiPartitionKey:
    """The world x day partition key of `world_id` as of `day`."""
    day_key = day.isoformat() if isinstance(day, dt.date) else day
    return dg.MultiPartitionKey({WORLD_DIMENSION: world_id, DAY_DIMENSION: day_key})


def is_world_keyed(partitions_def: dg.PartitionsDefinition | None) -> bool:
    """Whether assets with this partitioning are keyed by world (alone or as one dimension)."""
    if partitions_def is None:
        return False
    if partitions_def == world_partitions:
        return True
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return any(d.partitions_def == world_partitions for d in partitions_def.partitions_defs)
    return False
