"""Who launched a sweep, and where the runs it starts are filed in the Dagster UI (decision 262).

A sweep is one run: the `sweep` (or `regression`) job's run, launched from the Launchpad, by the schedule, or in
process by `churnbench sweep` / `churnbench regression`. That run builds inputs and evaluates cells through
in-process runs of their own (one per input partition and per cell: `cells.run_cells`), which Dagster would list
beside it, 65 of them for a 4-cell sweep. Dagster's Runs list groups runs in one way only, a backfill: a run
created with the `dagster/backfill` tag is listed inside its backfill, not at the top. The tag is read when the
run is created (Dagster stores it in a column of its runs table then), so the sweep's own run, which the
Launchpad or the schedule creates, cannot be put inside a backfill it makes later. So:

- the sweep's run stays the one entry of the sweep in the Runs list; it carries `churnbench/sweep` (added when
  it starts, its id being made from its config) and `churnbench/launched_by` (`ui`, `schedule`, `cli`);
- every run it starts is created with those two tags and with `dagster/backfill` = `SWEEP_RUNS` (plus
  `churnbench/sweep_run`, the sweep run's id): Dagster files them in one backfill record, made once per state
  folder (`ensure_sweep_runs`), whose page lists them (filter by `churnbench/sweep` for one sweep's). That record
  shows as one more entry, the same for every sweep; it is marked succeeded at creation, so Dagster's backfill
  daemon, which works only on requested backfills, never launches anything for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from churn_assets.orchestration.materialize import LAUNCHED_BY_TAG
from churn_assets.orchestration.run_body import SWEEP_RUN_TAG

if TYPE_CHECKING:
    import dagster as dg

SWEEP_TAG = "churnbench/sweep"
BACKFILL_TAG = "dagster/backfill"  # Dagster's own (BACKFILL_ID_TAG)
SWEEP_RUNS = "sweep-runs"  # the backfill record that holds the runs sweeps start
UI, CLI, SCHEDULE, SENSOR = "ui", "cli", "schedule", "sensor"


def launcher_of(tags: dict[str, str]) -> str:
    """Who launched a run, from its tags: ours when set (the CLI's in-process runs), a schedule's or a sensor's
    (Dagster tags them), else a person in the UI (the Launchpad)."""
    if LAUNCHED_BY_TAG in tags:
        return tags[LAUNCHED_BY_TAG]
    if "dagster/schedule_name" in tags:
        return SCHEDULE
    if "dagster/sensor_name" in tags:
        return SENSOR
    return UI


@dataclass(frozen=True)
class Launch:
    """A sweep's launch: who launched it and its own run (None: no run of its own, e.g. a test calling
    `run_sweep` directly; its runs are then tagged but not filed in the backfill record)."""

    launched_by: str = CLI
    run_id: str | None = None

    def run_tags(self, sweep_id: str) -> dict[str, str]:
        """The tags of every run the sweep starts."""
        tags = {SWEEP_TAG: sweep_id, LAUNCHED_BY_TAG: self.launched_by}
        if self.run_id is not None:
            tags.update({SWEEP_RUN_TAG: self.run_id, BACKFILL_TAG: SWEEP_RUNS})
        return tags


def ensure_sweep_runs(instance: dg.DagsterInstance) -> None:
    """Make the backfill record that holds the runs sweeps start, once per instance (two processes making it at
    once: the second finds the first's)."""
    if instance.get_backfill(SWEEP_RUNS) is not None:
        return
    from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
    from dagster._core.execution.asset_backfill import AssetBackfillData
    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill

    now = time.time()
    record = PartitionBackfill(
        backfill_id=SWEEP_RUNS, status=BulkActionStatus.COMPLETED_SUCCESS, from_failure=False,
        tags={"churnbench/holds": "runs started by sweeps"}, backfill_timestamp=now, asset_selection=[],
        title="Runs started by sweeps and regressions",
        description="The input builds, cell evaluations and reports that each `sweep` and `regression` run starts, "
                    "tagged churnbench/sweep with the sweep's id; the sweep's own run is its entry in the Runs list.",
        # (Dagster's serdes decorator hides the NamedTuple's defaults from mypy: every field given)
        asset_backfill_data=AssetBackfillData.empty(AssetGraphSubset({}, set()), now, instance),  # type: ignore[call-arg]
        backfill_end_timestamp=now)
    try:
        instance.add_backfill(record)
    except Exception:  # made meanwhile by another process (a unique key): nothing to do if it is there now
        if instance.get_backfill(SWEEP_RUNS) is None:
            raise


def tag_sweep_run(instance: dg.DagsterInstance, run_id: str, sweep_id: str, launched_by: str) -> None:
    """Add the sweep's id and its launcher to the sweep's own run (a Launchpad or schedule run gets its sweep id
    only once its config is read), so filtering the Runs list by `churnbench/sweep` finds it too."""
    instance.add_run_tags(run_id, {SWEEP_TAG: sweep_id, LAUNCHED_BY_TAG: launched_by})
