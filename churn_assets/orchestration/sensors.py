"""Sensors of the code location; `definitions.py` registers `SENSORS`.

`scenario_inputs`: an `eval_run` partition launched from the UI fails fast when its inputs are missing (it never
builds them: docs/rules.md, "Evaluation wiring"), with the count in its failure metadata. This run-failure sensor
sees that failure and launches `build_scenario` for the partition, which builds the inputs and materializes the
partition again: the mechanism by which a defined scenario gets its inputs from the UI (decision 99). It reacts
only to a user's launch (runs the CLI made carry `churnbench/launched_by` and build their inputs themselves), once
per failed run (the run key), and runs by default so that `churnbench ui` (whose daemon evaluates sensors) needs
no switch; it requests nothing on a clock.

`unbacked_partitions`: removes the world, world-day and scenario partitions nothing backs (keys typed into the
UI's "Add a partition"), five minutes after it first saw each (`orchestration/unbacked.py`).

`evaluation_inputs`: judges again the `inputs_as_read` check of the evaluations that read a partition rematerialized
by a run launched from the UI (`orchestration/lineage.py`).

`dead_runs`: every minute while the daemon runs (`churnbench ui`), records failed the Dagster runs and catalog rows
whose process is gone (`dead_runs.reap_dead_runs`, what every CLI command does when it opens the state folder): a
run killed while the UI is up shows failed there without waiting for the next command. It requests nothing.
"""

# No `from __future__ import annotations`: Dagster reads the context annotation at decoration time.
import json
import time
from collections.abc import Iterator

import dagster as dg

from churn_assets.orchestration.dead_runs import reap_dead_runs
from churn_assets.orchestration.jobs import build_scenario_job
from churn_assets.orchestration.materialize import LAUNCHED_BY_TAG, MISSING_INPUTS
from churn_assets.orchestration.resources import StateResource
from churn_assets.orchestration.unbacked import find_unbacked, remove


def _missing_inputs(context: dg.RunFailureSensorContext) -> bool:
    for event in context.get_step_failure_events():
        if event.step_key != "eval_run":
            continue
        data = event.step_failure_data.user_failure_data
        if data is not None and MISSING_INPUTS in (data.metadata or {}):
            return True
    return False


@dg.run_failure_sensor(name="scenario_inputs", request_job=build_scenario_job, minimum_interval_seconds=5,
                       default_status=dg.DefaultSensorStatus.RUNNING,
                       description="Launches `build_scenario` for an eval_run partition that a user launched with "
                                   "inputs missing: the inputs are built, then the partition is evaluated.")
def scenario_inputs(context: dg.RunFailureSensorContext) -> Iterator[dg.RunRequest]:
    run = context.dagster_run
    if LAUNCHED_BY_TAG in run.tags or not _missing_inputs(context):
        return
    key = run.tags.get("dagster/partition")
    if not key:
        return
    yield dg.RunRequest(run_key=f"inputs-for-{run.run_id}",
                        run_config={"ops": {"build_scenario_inputs": {"config": {"scenario": key}}}},
                        tags={"churnbench/after_run": run.run_id, "churnbench/scenario": key})


@dg.sensor(name="dead_runs", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Records failed the runs (Dagster runs and results-catalog rows) whose process is gone: "
                       "killed or crashed. Requests nothing.")
def dead_runs(context: dg.SensorEvaluationContext, state: StateResource) -> dg.SkipReason:
    paths = state.paths
    dead = reap_dead_runs(paths, context.instance, state.service_urls().warehouse)
    for run in dead:
        context.log.info(run.line())
    return dg.SkipReason(f"{len(dead)} run(s) whose process is gone recorded" if dead else "no dead runs")


UNBACKED_GRACE_S = 300  # a key typed in is left this long first: a run launched on it says why it is refused


@dg.sensor(name="unbacked_partitions", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Removes world, world-day and scenario partitions that no registered world or defined "
                       "scenario backs (keys typed into \"Add a partition\"), five minutes after it first saw "
                       "them; its tick says which and names the command that registers a world. Requests nothing.")
def unbacked_partitions(context: dg.SensorEvaluationContext, state: StateResource) -> dg.SensorResult:
    first_seen: dict[str, float] = json.loads(context.cursor) if context.cursor else {}
    if not isinstance(first_seen, dict):  # a cursor of the form before
        first_seen = {}
    now = time.time()
    waiting: dict[str, float] = {}
    removed = []
    for item in find_unbacked(state.paths, context.instance):
        key = f"{item.partitions}:{item.key}"
        seen = first_seen.get(key, now)
        # Left alone for a while, so that a run launched on it right after it was added fails naming the fix
        # (launched on a key removed meanwhile, the run would fail with Dagster's own "partition not found").
        if now - seen >= UNBACKED_GRACE_S and remove(context.instance, item):
            context.log.info(f"removed {item.line()}")
            removed.append(item.line())
        else:
            waiting[key] = seen
    return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(f"removed {line}" for line in removed)
                                                     or f"{len(waiting)} unbacked partition(s) seen"),
                           cursor=json.dumps(waiting))


@dg.sensor(name="evaluation_inputs", minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING,
           asset_selection=dg.AssetSelection.checks(dg.AssetCheckKey(dg.AssetKey("eval_run"), "inputs_as_read")),
           description="When a partition that evaluations read is rematerialized with another data version (a run "
                       "launched from the UI; the CLI's own runs do this themselves), runs those evaluations' "
                       "`inputs_as_read` check again (it fails naming the input that changed).")
def evaluation_inputs(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    from churn_assets.orchestration.lineage import CHECK_NAME, EVAL_RUN, NOT_INPUTS, changed_by

    instance = context.instance
    after = int(context.cursor) if context.cursor else None
    latest = after or 0
    materialized: list[tuple[str, str]] = []
    launched_here: dict[str, bool] = {}
    repository = context.repository_def
    assert repository is not None  # a sensor of a code location always has its repository
    keys = [k for k in repository.asset_graph.get_all_asset_keys() if k.to_user_string() not in NOT_INPUTS]
    for key in keys:
        page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, after_storage_id=after),
                                               limit=1 if after is None else 1000, ascending=after is not None)
        for record in page.records:
            latest = max(latest, record.storage_id)
            partition = record.asset_materialization.partition if record.asset_materialization else None
            if after is None or partition is None:  # the first tick only finds where the history ends
                continue
            if record.run_id not in launched_here:
                run = instance.get_run_by_id(record.run_id)
                launched_here[record.run_id] = run is not None and LAUNCHED_BY_TAG in run.tags
            if not launched_here[record.run_id]:  # `materialize` judged its own runs' partitions already
                materialized.append((key.to_user_string(), partition))
    readers = changed_by(instance, materialized)
    check = dg.AssetCheckKey(dg.AssetKey(EVAL_RUN), CHECK_NAME)
    requests = [dg.RunRequest(run_key=f"{CHECK_NAME}-{partition}-{latest}", asset_selection=[],
                              asset_check_keys=[check], tags={"dagster/partition": partition})
                for partition in readers]
    return dg.SensorResult(run_requests=requests, cursor=str(latest), skip_reason=None if requests else dg.SkipReason(
        f"{len(materialized)} new materialization(s) of inputs; no evaluation read one at another version"))


SENSORS: tuple[dg.SensorDefinition, ...] = (scenario_inputs, dead_runs, unbacked_partitions, evaluation_inputs)
