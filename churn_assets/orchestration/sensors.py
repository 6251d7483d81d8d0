"""Sensors of the code location. None yet; sensors that request runs (a sweep's cells, a scenario's missing
inputs) are defined here, and `definitions.py` registers `SENSORS`."""

from __future__ import annotations

import dagster as dg

SENSORS: tuple[dg.SensorDefinition, ...] = ()
