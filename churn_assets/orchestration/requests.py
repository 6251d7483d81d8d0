"""The request checks (`evaluation/requests.py`, `sweeps/checks.py`) fed from a state folder: the stored config
of each world given by id is read from its file, so these run before any service is opened or anything is
registered. `churnbench run` and `churnbench sweep` call them first; `run_scenario`, `run_sweep` and the cell pool
call them again before they register (the jobs go through those), so a refusal leaves no world, scenario, sweep
or partition behind.

Whether the world is also a Dagster partition is the authoritative check that needs the instance: the
materializations refuse an unregistered world (`materialize._require_known_partition`).
"""

from __future__ import annotations

from typing import Any

from churn_assets.deployment import deployment
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.requests import (
    CLI_FIELDS,
    LAUNCHPAD_FIELDS,
    Fields,
    Request,
    RequestError,
    check_request,
    not_registered,
)
from churn_assets.state import StatePaths, load_world_config, require_current_format
from churn_assets.sweeps.checks import check_sweep, resolved_worlds
from churn_assets.sweeps.spec import Cell, SweepSpec
from churn_assets.world.config import WORLD_ID_RE, WorldConfig


def stored_config(paths: StatePaths, world_id: str, field: str) -> WorldConfig | None:
    """The stored config of a world (None when it has none: not registered here); a malformed id or a config
    edited after registration is refused naming the field."""
    if not _is_world_id(world_id):
        raise not_registered(world_id, field)
    if not paths.world_config_file(world_id).exists():
        return None
    try:
        return load_world_config(paths, world_id)
    except UserFacingError as e:
        raise RequestError(f"{field}: {e}") from None


def _is_world_id(world_id: str) -> bool:
    return bool(WORLD_ID_RE.match(world_id))


def check_run(paths: StatePaths, request: Request, fields: Fields = CLI_FIELDS) -> Any:
    """The checked `Scenario` of one request on this state folder (`churnbench run`, `run_scenario`); a folder of an
    older format is refused first (its files are not where this code looks)."""
    require_current_format(paths)
    return check_request(request, stored_config(paths, request.world_id, fields.world), fields)


def check_sweep_request(paths: StatePaths, spec: SweepSpec, fields: Fields = LAUNCHPAD_FIELDS
                        ) -> tuple[list[Cell], list[Cell]]:
    """The checked cells of a sweep on this state folder (`churnbench sweep`, `run_sweep`): worlds given by id
    must have a stored config, worlds made from recipes must fit the deployment's calendar (a folder of an older
    format is refused first)."""
    require_current_format(paths)
    stored: dict[str, WorldConfig | None] = {}
    calendar = deployment().calendar
    for w in resolved_worlds(spec, fields):
        if w.config is None:
            stored[w.world_id] = stored_config(paths, w.world_id, fields.world)
        else:
            try:
                calendar.require_fit(w.config)
            except UserFacingError as e:
                raise RequestError(f"{fields.world}: {e}") from None
    return check_sweep(spec, stored, fields)
