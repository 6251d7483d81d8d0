"""In-process materialization against the persistent Dagster instance of a state folder.

The CLI (and later the scenario materializer) runs partitions here, one `execute_in_process` per
partition on the job resolved once per process: no subprocess, no code server, so the per-partition
overhead is what Dagster's run bookkeeping in Postgres costs (see bench/bench_services.py).
Runs show in the UI like any other (same instance, `DAGSTER_HOME=<state>/dagster`).

Every run is tagged with the process that runs it (`dead_runs.process_tags`), and `open_session` first records
failed the runs of processes that are gone (`dead_runs.reap_dead_runs`): a command killed outright leaves no
run STARTED and no catalog row `running` behind the next command. A partition of a world is materialized
under the world's use lock (`world_registry.using_world`), so `worlds rm` cannot remove it meanwhile; a scenario
its caller read under that lock is handed to its run with the lock (`scenario_in_hand.py`), not locked again.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.repeats import check_repeats
from churn_assets.fabric.postgres import connection
from churn_assets.faults import fault_point
from churn_assets.freshness.scenario import parse_scenario_key
from churn_assets.orchestration.dead_runs import process_tags, reap_dead_runs
from churn_assets.orchestration.partitions import (
    scenario_partitions,
    world_and_day,
    world_day_partitions,
    world_partitions,
)
from churn_assets.orchestration.run_body import BodyResult, execute_with_origins, origins_from_sweep
from churn_assets.orchestration.scenario_in_hand import ScenarioInHand, handing
from churn_assets.orchestration.world_registry import using_world
from churn_assets.services import (
    POSTGRES,
    ServiceUrls,
    ensure_services,
    raise_if_a_service_died,
    service_errors,
)
from churn_assets.state import StatePaths, require_current_format, validate_world_id

# In-process runs log to the console at DEBUG by default; the CLI prints its own summary instead, and a failed
# step's stack trace (logged at ERROR) goes to the trace file the CLI's one error line names
# (`MaterializationError.trace`; `commands/error_output.py`), never to the terminal. The run's whole log stays in
# Dagster's event log.
QUIET_RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
LAUNCHED_BY_TAG = "churnbench/launched_by"
# An `eval_run` run with this tag set to "true" re-answers the transport failures of its finished result
# (`churnbench run --retry-transport`, a sweep's `retry_transport`); without it a finished result is reused.
RETRY_TRANSPORT_TAG = "churnbench/retry_transport"
# An `eval_run` run with this tag answers (or reuses) K repeats of its experiment (`--repeats K`, a sweep's
# `repeats`; `evaluation/repeats.py`); without it, one.
REPEATS_TAG = "churnbench/repeats"


def repeats_tags(repeats: int) -> dict[str, str]:
    """The tags that ask `eval_run` for `repeats` repeats (none for one: a single run's tags are unchanged)."""
    return {REPEATS_TAG: str(check_repeats(repeats))} if repeats != 1 else {}


def repeats_of(tags: Mapping[str, str] | None) -> int:
    """The repeats a run's tags ask for (1 without the tag); a malformed value is refused in one line."""
    raw = (tags or {}).get(REPEATS_TAG, "1")
    try:
        return check_repeats(int(raw))
    except ValueError:
        raise UserFacingError(f"run tag {REPEATS_TAG}={raw!r} is not a whole number of repeats") from None
# Failure metadata of an `eval_run` whose inputs are missing: the `scenario_inputs` sensor reacts to it.
MISSING_INPUTS = "missing_inputs"
STATEMENT_TIMEOUT_MS = 120_000  # bounds any Dagster storage query, so a wedged server cannot hang a command
STORAGE_SCHEMA_LOCK = "churnbench:dagster-storage-schema"  # the advisory lock's name (`storage_schema_lock`)


class MaterializationError(UserFacingError):
    """A materialization failed for a reason the message states (unknown key, failed step, failed check)."""


@dataclass
class Session:
    """An open state folder: its paths, service URLs and persistent Dagster instance."""

    paths: StatePaths
    urls: ServiceUrls
    instance: dg.DagsterInstance = field(repr=False)


@contextmanager
def open_session(paths: StatePaths | None = None, *, require_format: bool = True) -> Iterator[Session]:
    """Start the services if needed and open the persistent instance; translate a service that dies
    inside the block into a `ServiceError` naming it. A state folder of an older format is refused first, in
    one line naming `churnbench migrate` (`migrate` itself opens it with `require_format=False`)."""
    paths = paths or StatePaths.resolve()
    if require_format:
        require_current_format(paths)
    urls = ensure_services(paths)
    with service_errors(paths), _fail_fast_storage(POSTGRES.name in urls.embedded):
        instance = open_instance(paths, urls)
        # dagster-postgres opens a new connection per statement unless told to hold a pool (which it
        # does for the webserver); a run writes ~50 events, so pooling halves the per-partition cost.
        instance.optimize_for_webserver(statement_timeout=STATEMENT_TIMEOUT_MS, pool_recycle=3600,
                                        max_overflow=5)
        try:
            _report_dead_runs(paths, instance, urls.warehouse)
            yield Session(paths, urls, instance)
        finally:
            instance.dispose()


def open_instance(paths: StatePaths, urls: ServiceUrls) -> dg.DagsterInstance:
    """The state folder's persistent Dagster instance, created under `storage_schema_lock`."""
    with storage_schema_lock(urls.dagster_storage):
        return dg.DagsterInstance.from_config(str(paths.dagster_home))


@contextmanager
def storage_schema_lock(storage_url: str) -> Iterator[None]:
    """One process at a time creates a Dagster instance on a storage database (a Postgres advisory lock, so
    processes on other hosts sharing an external database wait too). The first instance on a new database
    creates dagster-postgres' tables, and two processes doing it at once may fail: dagster-postgres retries a
    duplicate table (42P07) or a duplicate key, not Postgres' other answer to two concurrent CREATE TABLEs,
    `type "event_logs" already exists` (42710), which CI met with two commands started together on a new state
    folder. Opening an instance on an existing schema takes about 20 ms, so waiting costs little."""
    with connection(storage_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (STORAGE_SCHEMA_LOCK,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (STORAGE_SCHEMA_LOCK,))


def _report_dead_runs(paths: StatePaths, instance: dg.DagsterInstance, warehouse_url: str) -> None:
    """Record failed the runs whose process is gone, one line each on stderr. Never fails the command that
    happens to look: a problem here is left for the next one."""
    try:
        dead = reap_dead_runs(paths, instance, warehouse_url)
    except Exception as e:  # e.g. a catalog of a newer revision: the command itself reports what matters
        sys.stderr.write(f"churnbench: could not check for runs whose process is gone: {' '.join(str(e).split())}\n")
        return
    for run in dead:
        sys.stderr.write(f"churnbench: {run.line()}\n")


@contextmanager
def _fail_fast_storage(embedded_postgres: bool) -> Iterator[None]:
    """dagster-postgres retries a failed connection 5 times with exponential backoff (~6 s per
    statement, a dozen seconds per run) and logs each retry. Against the embedded server on a local
    socket a refused connection means the server is gone: retry once, quietly, and let
    `service_errors` say which service died."""
    if not embedded_postgres:
        yield
        return

    from dagster_postgres import utils as pg_utils

    def drop_retry_noise(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Retrying failed database connection")

    fn = pg_utils.retry_pg_connection_fn
    saved = fn.__defaults__
    fn.__defaults__ = (1, 0.1)  # (retry_limit, retry_wait)
    root = logging.getLogger()
    root.addFilter(drop_retry_noise)
    try:
        yield
    finally:
        fn.__defaults__ = saved
        root.removeFilter(drop_retry_noise)


@dataclass(frozen=True)
class PartitionRun:
    partition_key: str
    run_id: str
    seconds: float
    metadata: dict[str, dict[str, Any]]  # asset -> materialization metadata (plain values)


def materialize(
    session: Session,
    definitions: dg.Definitions,
    assets: Sequence[str],
    partition_keys: Sequence[str],
    *,
    on_partition: Callable[[PartitionRun], None] | None = None,
    tags: dict[str, str] | None = None,
    scenario: ScenarioInHand | None = None,
) -> list[PartitionRun]:
    """Materialize `assets` (and their checks) for each partition key, in this process, in order.

    `definitions` come from the caller (`churn_assets.orchestration.definitions.defs_for(state folder)`, which
    binds the resources to this state folder); this module sits below definitions.py.
    `scenario`: a scenario the caller has read and whose world's use lock it holds; the run of its partition is
    handed both (`scenario_in_hand.py`): no lock is taken for it here, and its steps read nothing again.
    Stops at the first failure with a `MaterializationError` that carries the step's own message.
    """
    paths, instance = session.paths, session.instance
    keys = [dg.AssetKey.from_user_string(a) for a in assets]
    partitions_def = _common_partitions_def(definitions, keys)
    for pk in partition_keys:
        _require_known_partition(instance, partitions_def, pk)
    job = definitions.resolve_implicit_global_asset_job_def()
    run_tags = {LAUNCHED_BY_TAG: "cli", **(tags or {}), **process_tags()}
    # A run started by a sweep launched from the UI, a schedule or a sensor: made with the sweep run's origin, so
    # Dagster can re-execute it (run_body.py); one started by the CLI: in process.
    origins = origins_from_sweep(instance, run_tags, job.name, paths)
    runs = []
    for pk in partition_keys:
        started = time.perf_counter()
        handed = scenario if scenario is not None and scenario.key == str(pk) else None
        world = None if handed is not None else _world_of(partitions_def, str(pk))  # handed: its holder's lock
        in_use = using_world(paths, world) if world is not None else nullcontext()
        with in_use, handing(handed), service_errors(paths), warnings.catch_warnings():
            fault_point("materialize")  # the reliability tests pause or kill a command here (its locks held)
            warnings.simplefilter("ignore", dg.PreviewWarning)
            result: dg.ExecuteInProcessResult | BodyResult
            if origins is not None:
                result = execute_with_origins(instance, keys, str(pk), QUIET_RUN_CONFIG, run_tags, origins)
            else:
                result = job.execute_in_process(
                    instance=instance, partition_key=str(pk), asset_selection=keys,
                    run_config=QUIET_RUN_CONFIG, tags=run_tags, raise_on_error=False,
                )
        if not result.success:
            if interrupted(result):  # Ctrl-C: Dagster stopped the step; say so, not "failed" with a trace file
                raise KeyboardInterrupt(f"run {result.run_id}")
            raise_if_a_service_died(paths, settle_s=0.0)  # a step that lost its database says so
            error = MaterializationError(f"materializing {', '.join(assets)} [{pk}] failed (run "
                                         f"{result.run_id}): {failure_message(result)}")
            error.trace = failure_trace(result)
            raise error
        run = PartitionRun(
            partition_key=str(pk), run_id=result.run_id, seconds=time.perf_counter() - started,
            metadata={
                event.asset_key.to_user_string(): {k: v.value for k, v in event.materialization.metadata.items()}
                for event in result.get_asset_materialization_events()
                if event.asset_key is not None
            },
        )
        runs.append(run)
        _judge_readers(session, definitions, result)
        if on_partition is not None:
            on_partition(run)
    return runs


def _judge_readers(session: Session, definitions: dg.Definitions,
                   result: dg.ExecuteInProcessResult | BodyResult) -> None:
    """A partition an evaluation read, rematerialized here with another version: that evaluation's
    `inputs_as_read` check runs again (`lineage.changed_by`), and fails. Never fails the materialization."""
    from churn_assets.orchestration.lineage import CHECK_NAME, EVAL_RUN, changed_by

    pairs = [(e.asset_key.to_user_string(), str(e.partition)) for e in result.get_asset_materialization_events()
             if e.asset_key is not None and e.partition is not None]
    try:
        check = dg.AssetCheckKey(dg.AssetKey(EVAL_RUN), CHECK_NAME)
        for partition in changed_by(session.instance, pairs):
            [evaluation] = run_checks(session, definitions, [check], partition)
            if not evaluation.passed:
                sys.stderr.write(f"churnbench: {EVAL_RUN} [{partition}]: check {CHECK_NAME} failed: "
                                 f"{evaluation.description}\n")
    except Exception as e:  # the check is judged again with the evaluation's next materialization
        sys.stderr.write(f"churnbench: could not judge the evaluations that read {len(pairs)} partition(s): "
                         f"{' '.join(str(e).split())}\n")


def run_checks(
    session: Session,
    definitions: dg.Definitions,
    checks: Sequence[dg.AssetCheckKey],
    partition_key: str,
) -> list[dg.AssetCheckEvaluation]:
    """Run asset checks alone (without re-materializing their asset) for one partition.

    Partitioned checks are a Dagster preview: a check-only run cannot take `partition_key` (no asset
    in it carries the partitions), so the partition is passed the way the UI does, as the run's
    `dagster/partition` tag.
    """
    paths, instance = session.paths, session.instance
    partitions_def = _common_partitions_def(definitions, [c.asset_key for c in checks])
    _require_known_partition(instance, partitions_def, partition_key)
    job = definitions.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection=set(checks))
    with service_errors(paths), warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        result = job.execute_in_process(
            instance=instance, run_config=QUIET_RUN_CONFIG, raise_on_error=False,
            tags={"dagster/partition": partition_key, LAUNCHED_BY_TAG: "cli", **process_tags()},
        )
    evaluations = list(result.get_asset_check_evaluations())
    if not evaluations:
        error = MaterializationError(f"checks on [{partition_key}] did not run: {failure_message(result)}")
        error.trace = failure_trace(result)
        raise error
    return evaluations


def _world_of(partitions_def: dg.PartitionsDefinition | None, key: str) -> str | None:
    """The world a partition belongs to (None: a partition of no one world, e.g. a sweep)."""
    if partitions_def == world_partitions:
        return key
    if partitions_def == world_day_partitions:
        return world_and_day(key)[0]
    if partitions_def == scenario_partitions:
        return parse_scenario_key(key).world_id
    return None


def _common_partitions_def(definitions: dg.Definitions, keys: Sequence[dg.AssetKey]
                           ) -> dg.PartitionsDefinition | None:
    specs = {spec.key: spec for spec in definitions.resolve_all_asset_specs()}
    unknown = [k.to_user_string() for k in keys if k not in specs]
    if unknown:
        raise MaterializationError(f"unknown asset(s) {', '.join(unknown)}; known: "
                                   f"{', '.join(sorted(k.to_user_string() for k in specs))}")
    parts = {specs[k].partitions_def for k in keys}
    if len(parts) != 1:
        raise MaterializationError("assets materialized together must share one partitioning")
    return parts.pop()


def _require_known_partition(instance: dg.DagsterInstance, partitions_def: dg.PartitionsDefinition | None,
                             key: str) -> None:
    """Refuse a key that is not a partition, naming the command that would make it one."""
    if partitions_def is None:
        raise MaterializationError("these assets are not partitioned; materialize them without a key")
    world, day = None, None
    if partitions_def == world_partitions:
        world = str(key)
    elif partitions_def == world_day_partitions:
        world, day = world_and_day(key)  # a key that does not parse is refused here, in one line
    if world is not None:
        validate_world_id(world)
    if world is not None and not instance.has_dynamic_partition(world_partitions.name or "", world):
        raise MaterializationError(f"world {world} is not registered in this state folder; register it "
                                   "with `churnbench worlds add` (see `churnbench worlds list`)")
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        known = partitions_def.has_partition_key(str(key))
    if not known and day is not None:
        raise MaterializationError(f"{key} is not a partition of these assets: world {world} has no day {day} "
                                   "(a world's days are its calendar's, registered by `churnbench worlds add`)")
    if not known:
        raise MaterializationError(f"{key} is not a partition of these assets")


def interrupted(result: Any) -> bool:
    """Whether a failed in-process run failed because it was interrupted (SIGINT/SIGTERM: Dagster turns the
    signal into `DagsterExecutionInterruptedError` inside the step), or a run on the run body ended canceled (an
    engine worker's cancel, caught by the body)."""
    if isinstance(result, BodyResult) and result.canceled:
        return True
    return any(event.is_step_failure and event.step_failure_data is not None
               and (getattr(event.step_failure_data.error_source, "value", None) == "INTERRUPT"
                    or (event.step_failure_data.error is not None
                        and event.step_failure_data.error.cls_name == "DagsterExecutionInterruptedError"))
               for event in result.all_events)


def failure_message(result: dg.ExecuteInProcessResult | BodyResult) -> str:
    """The failing steps' own words: a `dg.Failure` description, a failed check, or the error."""
    messages = []
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            data = event.step_failure_data
            if data.user_failure_data is not None and data.user_failure_data.description:
                messages.append(data.user_failure_data.description)
            elif data.error is not None:
                messages.append(_error_text(data.error))
    for event in result.all_events:  # a failure outside the steps (loading the job, the framework): the run's error
        if event.event_type_value == dg.DagsterEventType.RUN_FAILURE.value and event.job_failure_data.error:
            messages.append(_error_text(event.job_failure_data.error))
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            details = {k: v.value for k, v in evaluation.metadata.items()}
            messages.append(f"check {evaluation.check_name} failed: {details}")
    return "; ".join(dict.fromkeys(messages)) or "the run failed (see the run in the Dagster UI)"


def failure_trace(result: dg.ExecuteInProcessResult | BodyResult) -> str | None:
    """The failed steps' own stack traces (with their causes), for the trace file; None when none failed."""
    traces = [f"step {event.step_key}:\n{event.step_failure_data.error.to_string()}"
              for event in result.all_events
              if event.is_step_failure and event.step_failure_data is not None
              and event.step_failure_data.error is not None]
    return "\n".join(traces) or None


def _error_text(error: Any) -> str:
    cause = error
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause
    return " ".join(str(cause.message).split())[:500]
