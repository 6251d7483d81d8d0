"""Shared fixtures: one temporary state folder whose embedded services start once per session.

Integration tests (marked `integration`) ask for `services`, `session`, `dagster_instance` or
`small_world`; the services are stopped and their data deleted at the end of the session, also when
tests fail. Unit tests that ask for none of these start nothing.

Later issues build on these: `small_world` is a registered 30-day world (the test budget of
docs/rules.md, "Test budget") with its ledger materialized; `session_defs` are the definitions bound
to the session's state folder, for `churn_assets.orchestration.materialize.materialize`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from churn_assets.services import (
    DAGSTER_POSTGRES_URL_ENV,
    MONGODB_URI_ENV,
    POSTGRES_URL_ENV,
    SAAS_URL_ENV,
    ServiceUrls,
    ensure_services,
    purge_embedded_data,
)
from churn_assets.state import STATE_DIR_ENV, StatePaths

if TYPE_CHECKING:  # Dagster is imported by the fixtures that need it, not by every unit test run
    import dagster as dg

    from churn_assets.orchestration.materialize import Session

SMALL_WORLD_DAYS = 30
EXTERNAL_ENVS = (POSTGRES_URL_ENV, MONGODB_URI_ENV, SAAS_URL_ENV, DAGSTER_POSTGRES_URL_ENV)


@pytest.fixture(scope="session")
def churnbench_exe() -> str:
    """The console script of this venv (subprocess tests run the real CLI)."""
    return str(Path(sys.executable).parent / "churnbench")


@pytest.fixture(scope="session")
def cli_env() -> Callable[..., dict[str, str]]:
    """`cli_env(state_dir, **extra)`: environment for a CLI subprocess bound to `state_dir`, with no
    external service URLs."""
    def make(state_dir: Path, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in EXTERNAL_ENVS}
        return {**env, STATE_DIR_ENV: str(state_dir), **extra}
    return make


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh state folder for the session, exported as CHURNBENCH_STATE_DIR while it lasts."""
    root = tmp_path_factory.mktemp("churnbench-state")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(STATE_DIR_ENV, str(root))
        for name in EXTERNAL_ENVS:  # the session tests the embedded services
            mp.delenv(name, raising=False)
        yield root


@pytest.fixture(scope="session")
def state_paths(state_dir: Path) -> StatePaths:
    return StatePaths.resolve(state_dir)


@pytest.fixture(scope="session")
def services(state_paths: StatePaths) -> Iterator[ServiceUrls]:
    """The session's embedded Postgres and Mongo (URLs); stopped and deleted at session end."""
    try:
        yield ensure_services(state_paths)
    finally:
        purge_embedded_data(state_paths)


@pytest.fixture(scope="session")
def session(services: ServiceUrls, state_paths: StatePaths) -> Iterator[Session]:
    """The persistent Dagster instance of the session's state folder, open for the whole session."""
    from churn_assets.orchestration.materialize import open_session

    with open_session(state_paths) as opened:
        yield opened


@pytest.fixture(scope="session")
def dagster_instance(session: Session) -> dg.DagsterInstance:
    return session.instance


@pytest.fixture(scope="session")
def session_defs(state_paths: StatePaths) -> dg.Definitions:
    """Definitions bound to the session's state folder (what the CLI materializes with)."""
    from churn_assets.orchestration.definitions import defs_for

    return defs_for(str(state_paths.root))


@pytest.fixture(scope="session")
def small_world(session: Session, session_defs: dg.Definitions) -> str:
    """A registered 30-day world (default config, seed 42) with its ledger materialized."""
    from churn_assets.orchestration.materialize import materialize
    from churn_assets.orchestration.world_registry import add_world
    from churn_assets.world.config import load_config

    config = load_config(days=SMALL_WORLD_DAYS)
    add_world(session.paths, session.instance, config)
    materialize(session, session_defs, ["ledger"], [config.world_id])
    return config.world_id
