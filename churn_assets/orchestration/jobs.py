"""Jobs of the code location. None yet: every run so far is an asset materialization (the CLI's in-process
runs and the UI's launches). The sweep and regression jobs of later issues are defined here, and
`definitions.py` registers `JOBS`."""

from __future__ import annotations

import dagster as dg

JOBS: tuple[dg.JobDefinition | dg.UnresolvedAssetJobDefinition, ...] = ()
