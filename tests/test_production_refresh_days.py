"""One policy, two clocks, the same refresh days (docs/rules.md, "Production and simulated
refresh days agree"): for every TTL k in 0..30, over 90 days, the days Dagster re-materializes a wall-clock cache
carrying the production adapter's policy (warn k days, fail k + 1 days) and automation (re-materialize when the
policy fails) are the simulated planner's refresh days (`freshness.schedule.ttl_schedule`: refresh when age > k).

Dagster computes everything: its FreshnessDaemon evaluates the policies (the time-window evaluator, `>=`) and
records the freshness state; `evaluate_automation_conditions` reads that state and requests the refreshes; the
test only freezes the clock, records the requested materializations and never writes freshness state.

The clock models the daemon and the automation sensor running continuously (every 30 s) with a run that takes
`RUN_LAG`: day n's tick is one day after day n-1's materializations (plus the poll), so the state the daemon
finds on each tick is the one it finds the first time a cache's age reaches a whole number of days; right after
each run the daemon and the sensor tick once more (the cache is fresh again, and nothing is requested twice).
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import freshness_ttl_defs as ttl_defs
import pytest
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import freeze_time
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.freshness import FreshnessDaemon

from churn_assets.freshness.schedule import ttl_schedule

DAYS = 90
START = dt.datetime(2024, 1, 1, 2, 0, tzinfo=dt.UTC)  # the first materializations (the nightly hour)
RUN_LAG = dt.timedelta(minutes=7)  # a refresh run's duration: its materialization is stamped this after the tick
POLL = dt.timedelta(seconds=30)  # the daemon's and the automation sensor's interval


@pytest.fixture
def workspace() -> Iterator[tuple[dg.DagsterInstance, WorkspaceProcessContext]]:
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(python_file=str(Path(ttl_defs.__file__)), attribute="defs",
                             working_directory=str(Path(__file__).resolve().parents[1])),
        location_name="ttl_caches")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dg.instance_for_test() as instance, \
                WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as context:
            yield instance, context


def _ttl_of(key: dg.AssetKey) -> int:
    return int(key.path[-1].rsplit("_", 1)[1])


def test_production_refresh_days_equal_the_simulated_planners(workspace: tuple[dg.DagsterInstance,
                                                                               WorkspaceProcessContext]) -> None:
    instance, context = workspace
    daemon = FreshnessDaemon()
    cursor = None
    refreshed: dict[int, list[int]] = {k: [] for k in ttl_defs.TTLS}

    def tick(at: dt.datetime) -> list[dg.AssetKey]:
        nonlocal cursor
        with freeze_time(at):
            list(daemon.run_iteration(context))  # Dagster's own evaluation of every policy, recorded by Dagster
            result = dg.evaluate_automation_conditions(defs=ttl_defs.defs, instance=instance, cursor=cursor,
                                                       evaluation_time=at)
        cursor = result.cursor
        return [r.key for r in result.results if r.true_subset.size > 0]  # type: ignore[misc]

    for day in range(DAYS):
        now = START + day * (dt.timedelta(days=1) + RUN_LAG + POLL)
        due = tick(now)
        if not due:
            continue
        with freeze_time(now + RUN_LAG):  # the refresh run finishes RUN_LAG after the tick
            for key in due:
                instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key))
        for key in due:
            refreshed[_ttl_of(key)].append(day)
        assert tick(now + RUN_LAG + POLL) == []  # fresh again: nothing requested twice

    t_prime, t = dt.date(2024, 1, 1), dt.date(2024, 1, 1) + dt.timedelta(days=DAYS - 1)
    for k in ttl_defs.TTLS:
        planned = [0] + [(d - t_prime).days for d in ttl_schedule(t_prime, t, k)]
        assert refreshed[k] == planned, f"TTL {k}: Dagster refreshed on days {refreshed[k]}, the planner {planned}"
