"""Dagster's own run body, for runs that carry a job origin: a run launched from the UI, a schedule or a sensor
(executed in the engine's run worker, `run_launcher.py`), and every run that such a sweep or regression starts
(its input builds and cells, executed in the cell workers, `materialize.py`).

Dagster's "Re-execute" on a run needs the run's job origin: the code location and repository it came from, which
only runs made by the webserver or the daemon have; an in-process run (`execute_in_process`) has none, and
Dagster refuses to re-execute it (`CheckError: Expected non-None value`). A run that a launched sweep starts gets
its origin from the sweep's own run (the same code location and repository, the implicit asset job), is made with
it by the instance (`create_run_for_job`), and is executed by the body that `dagster api execute_run` runs, in the
worker's process (its steps in the caller's thread: `in_process_executor`, so what the caller hands a step
reaches it, `scenario_in_hand.py`). Re-executing it from its run page then launches the same asset and partition
as any launch from the UI. A run started by the CLI has no launched run above it and stays in process.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import dagster as dg

from churn_assets.orchestration.code_location import CODE_LOCATION_MODULE
from churn_assets.state import StatePaths

SWEEP_RUN_TAG = "churnbench/sweep_run"  # the id of the sweep's own run, on every run it starts
# Set by the engine in a worker process whose job it canceled (`engine.CANCEL_SIGNAL`); the process leaves when the
# job returns. Dagster's run body catches the interrupt, and a run interrupted before its step started ends FAILURE,
# not CANCELED: a body run in a canceled process is an interrupt whatever its status.
PROCESS_CANCELED = threading.Event()


def execute_run_body(instance: dg.DagsterInstance, run_id: str,
                     on_event: Callable[[dg.DagsterEvent], object] = lambda _event: None) -> None:
    """Execute the created run `run_id` in this process with Dagster's run worker body, which hands `on_event`
    each of its events in order (they are in the instance's event log too)."""
    from dagster._cli.api import _execute_run_command_body

    _execute_run_command_body(run_id, instance, on_event, set_exit_code_on_failure=False)


@dataclass(frozen=True)
class Origins:
    """Where a run comes from, for Dagster: the remote origin (what the UI re-executes) and the code origin (what
    the run body imports)."""

    remote: Any
    code: Any


def origins_from_sweep(instance: dg.DagsterInstance, tags: Mapping[str, str], job_name: str,
                       paths: StatePaths) -> Origins | None:
    """The origins of job `job_name` in the code location of the sweep run named by `tags` (None: no sweep run,
    or one made in process by the CLI). None too when this process's environment names another state folder than
    `paths`: the run body builds the job from the code location, which binds the environment's state folder."""
    parent_id = tags.get(SWEEP_RUN_TAG)
    parent = instance.get_run_by_id(parent_id) if parent_id else None
    if parent is None or parent.remote_job_origin is None or parent.job_code_origin is None:
        return None
    if StatePaths.resolve(None).root != paths.root:
        return None
    return Origins(parent.remote_job_origin.repository_origin.get_job_origin(job_name),
                   parent.job_code_origin.repository_origin.get_job_origin(job_name))


@dataclass(frozen=True)
class BodyResult:
    """What `execute_in_process` would have returned, read from the events of a run executed by the run body:
    the parts this package reads (success, run id, events, materializations, check evaluations)."""

    run_id: str
    success: bool
    all_events: Sequence[dg.DagsterEvent]
    # Ended canceled: interrupted. Dagster's run body catches the interrupt its step re-raises (where
    # `execute_in_process` lets it out), so the caller learns of it from here.
    canceled: bool = False

    def get_asset_materialization_events(self) -> list[dg.DagsterEvent]:
        return [event for event in self.all_events if event.is_step_materialization]

    def get_asset_check_evaluations(self) -> list[dg.AssetCheckEvaluation]:
        return [cast("dg.AssetCheckEvaluation", event.event_specific_data) for event in self.all_events
                if event.event_type_value == dg.DagsterEventType.ASSET_CHECK_EVALUATION.value]


def execute_with_origins(instance: dg.DagsterInstance, keys: Sequence[dg.AssetKey], partition_key: str,
                         run_config: Mapping[str, Any], tags: Mapping[str, str], origins: Origins) -> BodyResult:
    """Make the run of `keys` for `partition_key` with `origins` and execute it here with the run body. The run is
    made from the job the body executes, the code location's (the UI compares a run's job snapshot with its code
    location's before it re-executes it; loaded by name, as the body loads it, so no import ranks this module above
    the definitions)."""
    job = importlib.import_module(CODE_LOCATION_MODULE).defs.resolve_implicit_global_asset_job_def()
    run = instance.create_run_for_job(
        job_def=job, asset_selection=set(keys), run_config=dict(run_config),
        tags={**tags, **job.get_tags_for_partition_key(partition_key, selected_asset_keys=keys)},
        remote_job_origin=origins.remote, job_code_origin=origins.code)
    events: list[dg.DagsterEvent] = []
    execute_run_body(instance, run.run_id, events.append)
    status = getattr(instance.get_run_by_id(run.run_id), "status", None)
    return BodyResult(run.run_id, status == dg.DagsterRunStatus.SUCCESS, events,
                      canceled=PROCESS_CANCELED.is_set()
                      or status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.CANCELING))
