"""Schedules of the code location. None yet (section 10 keeps wall-clock automation off the simulated
calendar's assets); the nightly regression of a later issue is defined here, and `definitions.py`
registers `SCHEDULES`."""

from __future__ import annotations

import dagster as dg

SCHEDULES: tuple[dg.ScheduleDefinition, ...] = ()
