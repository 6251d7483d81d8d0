"""A sweep checked before anything is registered: every cell through the one request check
(`evaluation/requests.check_request`), so a bad arm, policy, T, T' or gap is refused naming the field (the
Launchpad's or the command line's) and the valid range, before a world, scenario or partition is added.

Pure: the configs of worlds given by id come from the caller (`orchestration/requests.py` reads the stored
ones); recipes (seeds, overrides) build theirs here without writing anything.
"""

from __future__ import annotations

from collections.abc import Mapping

from churn_assets.arms.registry import ARMS
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.requests import (
    LAUNCHPAD_FIELDS,
    Fields,
    Request,
    RequestError,
    check_request,
    not_registered,
)
from churn_assets.sweeps.spec import Cell, ResolvedWorld, SweepSpec, cells, resolve_worlds
from churn_assets.world.config import WorldConfig


def resolved_worlds(spec: SweepSpec, fields: Fields = LAUNCHPAD_FIELDS) -> list[ResolvedWorld]:
    """The spec's worlds with their ids; a recipe whose config cannot be made (a bad override) is refused
    naming the worlds' field."""
    try:
        return resolve_worlds(spec)
    except UserFacingError as e:
        raise RequestError(f"{fields.world}: {e}") from None


def check_sweep(spec: SweepSpec, stored: Mapping[str, WorldConfig | None], fields: Fields = LAUNCHPAD_FIELDS
                ) -> tuple[list[Cell], list[Cell]]:
    """(evaluated cells, exposure-only cells) of `spec`, every one checked; `stored`: the config of each world
    given by id (None: not registered). Raises `RequestError` on the first cell at fault."""
    worlds = resolved_worlds(spec, fields)
    configs: dict[str, WorldConfig | None] = {}
    for w in worlds:
        configs[w.world_id] = w.config if w.config is not None else stored.get(w.world_id)
        if configs[w.world_id] is None:
            raise not_registered(w.world_id, fields.world)
    unknown = [a for a in spec.arms if a not in ARMS]
    if unknown:
        raise RequestError(f"{fields.arm}: unknown arm {unknown[0]!r} (arms: {', '.join(ARMS)})")
    evaluated, exposure = cells(spec, worlds, {name: a.only_policy for name, a in ARMS.items()})
    # Every policy of the spec, even one that only arms with a fixed policy were given (a typo is still a typo),
    # checked on an arm that takes any policy (not one that reads its own vintage: it refuses all but the default).
    first = worlds[0]
    probe = [Cell(first.world_id, next(a for a in ARMS if ARMS[a].only_policy is None), p, spec.t, spec.t)
             for p in spec.policies]
    seen: set[tuple[str, str, str, object, object]] = set()
    for cell in [*probe, *evaluated, *exposure]:
        identity = (cell.world_id, cell.arm, cell.policy, cell.t_prime, cell.t)
        if identity in seen:
            continue
        seen.add(identity)
        request = Request(cell.world_id, cell.arm, cell.policy, cell.t_prime, cell.t,
                          saas_profile=cell.saas_profile, via_gap=cell.t_prime not in spec.t_primes)
        # An LLM sweep's agent id is made from the endpoint's settings when it runs (`with_llm_settings`); its
        # cells are checked as the deterministic agent's: the agent does not change what is valid.
        check_request(request, configs[cell.world_id], fields)
    return evaluated, exposure
