"""Sensors of the code location; `definitions.py` registers `SENSORS`.

`scenario_inputs`: an `eval_run` partition launched from the UI fails fast when its inputs are missing (it never
builds them: section 10, "Evaluation wiring"), with the count in its failure metadata. This run-failure sensor
sees that failure and launches `build_scenario` for the partition, which builds the inputs and materializes the
partition again: the mechanism by which a defined scenario gets its inputs from the UI (decision 99). It reacts
only to a user's launch (runs the CLI made carry `churnbench/launched_by` and build their inputs themselves), once
per failed run (the run key), and runs by default so that `churnbench ui` (whose daemon evaluates sensors) needs
no switch; it requests nothing on a clock.

`dead_runs`: every minute while the daemon runs (`churnbench ui`), records failed the Dagster runs and catalog rows
whose process is gone (`dead_runs.reap_dead_runs`, what every CLI command does when it opens the state folder): a
run killed while the UI is up shows failed there without waiting for the next command. It requests nothing.
"""

# No `from __future__ import annotations`: Dagster reads the context annotation at decoration time.
from collections.abc import Iterator

import dagster as dg

from churn_assets.orchestration.dead_runs import reap_dead_runs
from churn_assets.orchestration.jobs import build_scenario_job
from churn_assets.orchestration.materialize import LAUNCHED_BY_TAG, MISSING_INPUTS
from churn_assets.orchestration.resources import StateResource


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


SENSORS: tuple[dg.SensorDefinition, ...] = (scenario_inputs, dead_runs)
