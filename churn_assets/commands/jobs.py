"""The `sweep` and `regression` jobs run by the command line in its own process: `churnbench sweep` and
`churnbench regression` execute the job the Launchpad and the schedule launch, so each sweep is one run in the
Dagster UI whoever launched it (tagged `churnbench/launched_by: cli`), and the runs it starts are filed under it
(`orchestration/launches.py`). Its progress lines are printed here as they come."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.state import StatePaths


@dataclass(frozen=True)
class JobOutcome:
    run_id: str
    sweep_id: str | None  # the sweep the run ran (its `churnbench/sweep` tag); None when it stopped before
    failure: str  # the op's failure in one line; "" when it succeeded


def run_job(paths: StatePaths, job_name: str, ops_config: dict[str, Any], echo: Callable[[str], None]) -> JobOutcome:
    """Execute `job_name` in this process on the state folder's instance, its op configured by `ops_config`;
    a run that stopped before it had a sweep (a refused request) raises the user's one line."""
    from churn_assets.orchestration.dead_runs import process_tags
    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.jobs import console
    from churn_assets.orchestration.launches import CLI, SWEEP_TAG
    from churn_assets.orchestration.materialize import LAUNCHED_BY_TAG, QUIET_RUN_CONFIG, failure_message, open_session

    with open_session(paths) as session, console(echo):
        job = defs_for(str(paths.root)).resolve_job_def(job_name)
        result = job.execute_in_process(run_config={**QUIET_RUN_CONFIG, "ops": ops_config},
                                        instance=session.instance, raise_on_error=False,
                                        tags={LAUNCHED_BY_TAG: CLI, **process_tags()})
        run = session.instance.get_run_by_id(result.run_id)
        sweep_id = None if run is None else run.tags.get(SWEEP_TAG)
    failure = "" if result.success else failure_message(result)
    if sweep_id is None:
        raise UserFacingError(failure or f"the {job_name} run {result.run_id} ran no sweep")
    return JobOutcome(result.run_id, sweep_id, failure)
