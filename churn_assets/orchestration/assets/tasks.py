"""The `task_set` asset: one partition per (world, day), the day being T (the anchor of every question).

Thin: the generator (pure core) samples the tasks from the world's ledger at T with the deployment's
task count and seed; this module finds the ledger, writes `tasks.jsonl` and attaches the counts.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at
# decoration time and needs real types, not strings.
import dagster as dg

from churn_assets.deployment import task_settings
from churn_assets.errors import UserFacingError
from churn_assets.orchestration.assets.common import require_world_day, step_failure, world_ledger
from churn_assets.orchestration.assets.ledger import ledger
from churn_assets.orchestration.partitions import OF_THE_WORLD, world_day_partitions
from churn_assets.orchestration.resources import StateResource
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.task_set import drawn_of, task_set_counts, write_drawn_with, write_tasks


@dg.asset(
    partitions_def=world_day_partitions,
    deps=[dg.AssetDep(ledger, partition_mapping=OF_THE_WORLD)],
    group_name="tasks",
    kinds={"python", "json"},
    description="The world's task set asked at T (the day partition): question texts, templates, parameters "
                "sampled from the world at T; task count and seed from the deployment config.",
)
def task_set(context: dg.AssetExecutionContext, state: StateResource) -> dg.MaterializeResult:
    world_id, day, _ = require_world_day(state, context.partition_key)
    settings = task_settings()
    drawn = drawn_of(settings.count, settings.seed, settings.per_template)
    loaded = world_ledger(state, world_id)
    try:
        generated = generate_task_set(loaded.records, world_id=world_id, anchor=day, n=drawn[0],
                                      task_seed=settings.seed, format_version=loaded.format_version,
                                      per_template=settings.per_template)
    except UserFacingError as e:
        raise step_failure(f"task set {world_id} at {day}: {e}") from None
    path = state.paths.task_set_file(world_id, day)
    digest = write_tasks(generated.tasks, path)
    write_drawn_with(path, drawn)
    counts = task_set_counts(generated.tasks)
    context.log.info(f"{world_id} at {day}: {len(generated.tasks)} tasks, hash {digest[:16]}")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(generated.tasks),
        "task_set_hash": dg.MetadataValue.text(digest),
        "tasks_per_task_tier": dg.MetadataValue.json(counts["task_tier"]),
        "tasks_per_intent": dg.MetadataValue.json(counts["intent"]),
        "tasks_per_template": dg.MetadataValue.json(counts["template"]),
        "degenerate_answers": generated.degenerate,
        "anchor": dg.MetadataValue.text(day.isoformat()),
        "task_seed": settings.seed,
        **({"tasks_per_template_drawn": settings.per_template} if settings.per_template is not None else {}),
        "seed": dg.MetadataValue.text(str(generated.seed)),
        "path": dg.MetadataValue.path(str(path)),
    }, data_version=dg.DataVersion(digest))  # the task set's content hash: the same questions are the same data
