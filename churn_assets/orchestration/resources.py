"""Dagster resources: thin handles on the state folder and the services found through it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from churn_assets.orchestration.world_registry import load_world_config
from churn_assets.services import ServiceUrls, ensure_services
from churn_assets.state import StatePaths, require_current_format
from churn_assets.world.config import WorldConfig


class StateResource(dg.ConfigurableResource):
    """The state folder of this deployment. Empty `state_dir` means `CHURNBENCH_STATE_DIR` or
    `./.churnbench`, resolved when a run starts (so the UI's code server and the CLI agree as long
    as they share the environment, which `churnbench ui` arranges)."""

    state_dir: str = ""

    @property
    def paths(self) -> StatePaths:
        """The state folder; one of an older format is refused in one line naming `churnbench migrate` (a run
        launched from the UI on an unmigrated folder fails clearly instead of mixing key forms)."""
        paths = StatePaths.resolve(self.state_dir or None)
        require_current_format(paths)
        return paths

    def world_config(self, world_id: str) -> WorldConfig:
        """The stored config of a registered world; a clear `WorldNotFoundError` otherwise."""
        return load_world_config(self.paths, world_id)

    def ledger_dir(self, world_id: str) -> Path:
        return self.paths.ledger_dir(world_id)

    def service_urls(self) -> ServiceUrls:
        """URLs of Postgres, Mongo (and later the SaaS API), starting embedded ones if they are down."""
        return ensure_services(self.paths)
