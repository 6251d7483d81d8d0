"""What a user asks to evaluate, checked before anything is written: the one validation of `churnbench run`,
`churnbench sweep`, the `sweep`, `regression` and `build_scenario` jobs and the cell pool.

    scenario = check_request(Request(world_id, "grounding", "tiered", t_prime, t), config, CLI_FIELDS)

A `Request` is one scenario as a user gave it; `check_request` takes it and the world's config (None: the
world is not registered) and returns the checked `Scenario`, or raises a `RequestError` of one line that names
the field as the caller spells it (`--t` on the command line, `t` in the Launchpad: `Fields`) and the valid
values or range: the world's calendar for a day, the largest gap for a gap, the spelling and ranges of a
policy, the registered arms, SaaS profiles and agents. It is pure (no services, no Dagster, no state folder):
its callers find the world's config first (stored configs are files; `orchestration/requests.py`), so a
command refuses before it opens a service and a job before it registers a world or adds a partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from churn_assets.arms.registry import ARMS, define_scenario
from churn_assets.errors import UserFacingError
from churn_assets.fabric.saas_profiles import SAAS_PROFILES
from churn_assets.freshness.policies import check_policy_classes, check_policy_parameters, parse_policy
from churn_assets.freshness.scenario import DETERMINISTIC_AGENT
from churn_assets.grounding.registry import load_registry
from churn_assets.world.calendar import Day, typed_day
from churn_assets.world.config import WorldConfig


class RequestError(UserFacingError, ValueError):
    """A request refused before anything was written; the message names the field and what it accepts."""


@dataclass(frozen=True)
class Fields:
    """How a caller names each part of a request in its messages (command-line options, Launchpad fields)."""

    world: str
    arm: str
    policy: str
    t_prime: str
    t: str
    saas_profile: str
    agent: str
    gap: str = ""  # the field of a T' given as a gap T - T' ("" when T' is given as a day)


CLI_FIELDS = Fields("--world", "--arm", "--policy", "--t-prime", "--t", "--saas-profile", "--agent")
SWEEP_CLI_FIELDS = Fields("--world/--seeds", "--arm", "--policy", "the preset's T'", "the preset's T",
                          "--saas-profile", "--agent", gap="--gaps")
LAUNCHPAD_FIELDS = Fields("worlds/seeds", "arms", "policies", "t_primes", "t", "saas_profile", "agent", gap="gaps")


@dataclass(frozen=True)
class Request:
    """One scenario as asked: the world, arm, policy spelling, T', T, agent id and SaaS profile. `gap`: T - T'
    when the user gave T' as a gap (its messages then name the gap)."""

    world_id: str
    arm: str
    policy: str
    t_prime: Day
    t: Day
    agent_id: str = ""  # "" is the deterministic agent
    saas_profile: str = "default"
    model_settings: Mapping[str, Any] | None = None
    via_gap: bool = False

    @property
    def gap(self) -> int:
        return (self.t - self.t_prime).days


def not_registered(world_id: str, field: str) -> RequestError:
    """The refusal of a world id this state folder does not know, naming the command that registers one."""
    return RequestError(f"{field}: world {world_id!r} is not registered in this state folder (register a world "
                        "with `churnbench worlds add [--seed N] [--days N] [--set section.key=value]`, which "
                        "prints its id; `churnbench worlds list` lists them)")


def check_request(request: Request, world: WorldConfig | None, fields: Fields = CLI_FIELDS) -> Any:
    """The checked `Scenario` of `request` on `world` (its config; None: not registered), or a `RequestError`
    naming the first field at fault: world, arm, policy (spelling, classes, parameter ranges), SaaS profile,
    agent, T and T' inside the world's calendar, T' not after T."""
    if world is None:
        raise not_registered(request.world_id, fields.world)
    if request.arm not in ARMS:
        raise RequestError(f"{fields.arm}: unknown arm {request.arm!r} (arms: {', '.join(ARMS)})")
    try:
        policy = parse_policy(request.policy)
        check_policy_classes(policy, load_registry())
        check_policy_parameters(policy, request.policy)
    except UserFacingError as e:
        raise RequestError(f"{fields.policy}: {e}") from None
    if request.saas_profile not in SAAS_PROFILES:
        raise RequestError(f"{fields.saas_profile}: unknown SaaS profile {request.saas_profile!r} (profiles: "
                           f"{', '.join(SAAS_PROFILES)})")
    owner = f"world {world.world_id}"
    if not world.start <= request.t <= world.end:
        raise RequestError(f"{fields.t}: T = {request.t} is outside the calendar of {owner} "
                           f"({world.start}..{world.end})")
    if request.t_prime > request.t:
        what = f"{fields.gap}: gap {request.gap}" if request.via_gap and fields.gap else \
            f"{fields.t_prime}: T' = {request.t_prime}"
        raise RequestError(f"{what} puts T' after T = {request.t}: the cache is built on T', the questions are "
                           "asked on T")
    if request.t_prime < world.start:
        if request.via_gap and fields.gap:
            largest = (request.t - world.start).days
            raise RequestError(f"{fields.gap}: gap {request.gap} gives T' = {request.t_prime}, before the calendar "
                               f"of {owner} ({world.start}..{world.end}); with T = {request.t} a gap is 0..{largest}")
        raise RequestError(f"{fields.t_prime}: T' = {request.t_prime} is outside the calendar of {owner} "
                           f"({world.start}..{world.end})")
    agent = request.agent_id or DETERMINISTIC_AGENT
    try:
        return define_scenario(request.world_id, request.arm, request.policy, request.t_prime, request.t,
                               agent_id=agent, saas_profile=request.saas_profile,
                               model_settings=request.model_settings)
    except UserFacingError as e:  # the agent's stored settings (the only part not checked above)
        raise RequestError(f"{fields.agent}: {e}") from None


def day_text(value: str, field: str) -> Day:
    """A day as typed (`YYYY-MM-DD`), or a `RequestError` naming the field."""
    try:
        return typed_day(value)
    except ValueError as e:
        raise RequestError(f"{field}: {e}") from None
