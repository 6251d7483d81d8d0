"""Schedules of the code location; `definitions.py` registers `SCHEDULES`.

`nightly_regression` launches the `regression` job (the regression sweep preset and its gate) once a day: at the
deployment config's `regression.schedule` (default 02:00) in `regression.timezone` (default UTC). It starts
STOPPED unless `regression.running` is true, so opening `churnbench ui` starts nothing on a clock; switch it on in
the UI (Automation) for a long-running deployment. Each tick's run key is its scheduled day, so a tick is launched
once. Wall-clock automation stays off the simulated calendar's assets (docs/rules.md, "No wall clock"): the schedule
launches a job whose cells are keyed by simulated days, it never times a simulated asset.
"""

# No `from __future__ import annotations`: Dagster reads the context annotation at decoration time.
import dagster as dg

from churn_assets.deployment import regression_settings
from churn_assets.orchestration.jobs import regression_job

_SETTINGS = regression_settings()
NIGHTLY_TAG = "churnbench/scheduled_for"


@dg.schedule(name="nightly_regression", job=regression_job, cron_schedule=_SETTINGS.cron,
             execution_timezone=_SETTINGS.timezone,
             default_status=dg.DefaultScheduleStatus.RUNNING if _SETTINGS.running else dg.DefaultScheduleStatus.STOPPED,
             description=f"The nightly regression: the `regression` job at `{_SETTINGS.cron}` ({_SETTINGS.timezone}); "
                         "deployment config `regression.schedule`, `regression.timezone`, `regression.running`.")
def nightly_regression(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    when = context.scheduled_execution_time
    day = when.date().isoformat() if when is not None else "manual"
    return dg.RunRequest(run_key=f"nightly-regression-{day}",
                         tags={NIGHTLY_TAG: day, "churnbench/regression": "nightly"})


SCHEDULES: tuple[dg.ScheduleDefinition, ...] = (nightly_regression,)
