"""The `task_set` asset: one partition per world x day, the day being T (the anchor of every question).

Thin: the generator (pure core) samples the tasks from the world's ledger at T with the deployment's
task count and seed; this module finds the ledger, writes `tasks.jsonl` and attaches the counts.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import datetime as dt
import warnings
from pathlib import Path

import dagster as dg

from churn_assets.assets.ledger import ledger
from churn_assets.deployment import task_settings
from churn_assets.errors import UserFacingError
from churn_assets.partitions import DAY_DIMENSION, WORLD_DIMENSION, world_day_partitions
from churn_assets.resources import StateResource
from churn_assets.state import StatePaths
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.task_set import TASKS_FILE, task_set_counts, write_tasks
from churn_assets.world.ledger import LEDGER_FILE, LedgerError, load_ledger

TASKS_DIRNAME = "tasks"


def task_set_file(paths: StatePaths, world_id: str, day: dt.date | str) -> Path:
    """`<state>/worlds/<world>/tasks/<T>/tasks.jsonl` (removed with the world folder)."""
    key = day if isinstance(day, str) else day.isoformat()
    return paths.world_dir(world_id) / TASKS_DIRNAME / key / TASKS_FILE


with warnings.catch_warnings():
    # Beta in Dagster 1.13, and exactly the edge wanted: partition (world, T) reads the world's ledger.
    warnings.simplefilter("ignore", dg.BetaWarning)
    _LEDGER_OF_THE_WORLD = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name=WORLD_DIMENSION)


@dg.asset(
    partitions_def=world_day_partitions,
    deps=[dg.AssetDep(ledger, partition_mapping=_LEDGER_OF_THE_WORLD)],
    group_name="tasks",
    kinds={"python", "json"},
    description="The world's task set asked at T (the day partition): question texts, templates, parameters "
                "sampled from the world at T; task count and seed from the deployment config.",
)
def task_set(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    keys = context.partition_key.keys_by_dimension  # type: ignore[attr-defined]
    world_id, day = keys[WORLD_DIMENSION], keys[DAY_DIMENSION]
    settings = task_settings()
    ledger_dir = state.ledger_dir(world_id)
    try:
        state.world_config(world_id)  # a world key without a stored config fails clearly, as the ledger does
        if not (ledger_dir / LEDGER_FILE).exists():
            raise UserFacingError(f"world {world_id} has no ledger at {ledger_dir}: materialize its `ledger` "
                                  "partition first (`churnbench worlds materialize`)")
        loaded = load_ledger(ledger_dir)
        generated = generate_task_set(loaded.records, world_id=world_id, anchor=day, n=settings.count,
                                      task_seed=settings.seed, format_version=loaded.format_version)
    except (LedgerError, UserFacingError) as e:
        raise dg.Failure(description=f"task set {world_id} at {day}: {e}", allow_retries=False) from None
    path = task_set_file(state.paths, world_id, day)
    digest = write_tasks(generated.tasks, path)
    counts = task_set_counts(generated.tasks)
    context.log.info(f"{world_id} at {day}: {len(generated.tasks)} tasks, hash {digest[:16]}")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(generated.tasks),
        "task_set_hash": dg.MetadataValue.text(digest),
        "tasks_per_task_tier": dg.MetadataValue.json(counts["task_tier"]),
        "tasks_per_intent": dg.MetadataValue.json(counts["intent"]),
        "tasks_per_template": dg.MetadataValue.json(counts["template"]),
        "degenerate_answers": generated.degenerate,
        "anchor": dg.MetadataValue.text(day),
        "task_seed": settings.seed,
        "seed": dg.MetadataValue.text(str(generated.seed)),
        "path": dg.MetadataValue.path(str(path)),
    })
