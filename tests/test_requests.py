"""The one request check (`evaluation/requests.py`, `sweeps/checks.py`) without services or Dagster: each bad
field is refused in one line naming the field as its caller spells it and the valid values or range."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from churn_assets.evaluation.requests import (
    CLI_FIELDS,
    LAUNCHPAD_FIELDS,
    Request,
    RequestError,
    check_request,
)
from churn_assets.sweeps.checks import check_sweep
from churn_assets.sweeps.presets import PresetArgs, customize, preset_spec
from churn_assets.world.config import load_config

WORLD = load_config(days=30, seed=3)  # 2024-01-01..2024-01-30
D = dt.date.fromisoformat
GOOD = Request(WORLD.world_id, "grounding", "tiered", D("2024-01-20"), D("2024-01-29"))


def test_a_good_request_gives_its_scenario() -> None:
    scenario = check_request(GOOD, WORLD)
    assert (scenario.arm, scenario.policy, scenario.t) == ("grounding", "tiered", D("2024-01-29"))


@pytest.mark.parametrize(("change", "message"), [
    ({"arm": "oracle"}, "--arm: unknown arm 'oracle' (arms: naive, "),
    ({"policy": "ttl:prices=x"}, "--policy: policy 'ttl:prices=x': expected tiered, off"),
    ({"policy": "ttl:nosuch=3"}, "--policy: "),
    ({"policy": "uniform:-3"}, "--policy: policy uniform:-3: the budget N must be a whole number >= 0"),
    ({"policy": "ttl:prices=-2"}, "--policy: policy ttl:prices=-2: a TTL must be a whole number of days >= 0"),
    ({"policy": "rate:nan"}, "--policy: policy rate:nan: CHANGES must be a number > 0"),
    ({"saas_profile": "gold"}, "--saas-profile: unknown SaaS profile 'gold' (profiles: default, reference, "),
    ({"t": D("2024-03-01")}, "--t: T = 2024-03-01 is outside the calendar of world default-s3-"),
    ({"t_prime": D("2023-12-01")}, "--t-prime: T' = 2023-12-01 is outside the calendar of world default-s3-"),
    ({"t_prime": D("2024-01-30")}, "--t-prime: T' = 2024-01-30 puts T' after T = 2024-01-29"),
])
def test_each_bad_field_is_named_with_what_it_accepts(change: dict[str, object], message: str) -> None:
    with pytest.raises(RequestError) as e:
        check_request(dataclasses.replace(GOOD, **change), WORLD)  # type: ignore[arg-type]
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_an_unregistered_world_names_the_command_that_registers_one() -> None:
    with pytest.raises(RequestError, match=r"^--world: world 'x-s1-aaaaaa' is not registered .*churnbench worlds add"):
        check_request(dataclasses.replace(GOOD, world_id="x-s1-aaaaaa"), None, CLI_FIELDS)


def test_a_gap_outside_the_calendar_names_the_gap_and_the_largest_one() -> None:
    spec = customize(preset_spec("smoke", PresetArgs(seeds=(3,))), gaps=[7, 40])
    with pytest.raises(RequestError, match=r"^gaps: gap 40 gives T' = 2023-12-21, before the calendar of world "
                                           r"default-s3-\w+ \(2024-01-01..2024-01-30\); with T = 2024-01-30 a gap "
                                           r"is 0..29$"):
        check_sweep(spec, {}, LAUNCHPAD_FIELDS)


def test_a_sweep_t_outside_the_calendar_names_t_not_t_prime() -> None:
    spec = customize(preset_spec("smoke", PresetArgs(seeds=(3,))), t=D("2024-02-15"))
    with pytest.raises(RequestError, match=r"^t: T = 2024-02-15 is outside the calendar of world default-s3-"):
        check_sweep(spec, {}, LAUNCHPAD_FIELDS)


def test_a_sweep_policy_is_checked_even_when_only_fixed_policy_arms_run() -> None:
    spec = customize(preset_spec("smoke", PresetArgs(seeds=(3,))), arms=["grounding_no_freshness_tiers"],
                     policies=["uniform:x"])
    with pytest.raises(RequestError, match=r"^policies: policy 'uniform:x'"):
        check_sweep(spec, {}, LAUNCHPAD_FIELDS)


def test_a_sweep_of_budget_policies_passes_the_check() -> None:
    # naive reads its own vintage: it runs under its one policy, and the policies are probed on an arm taking any
    spec = customize(preset_spec("smoke", PresetArgs(seeds=(3,))), policies=["uniform:4", "proportional:8"])
    evaluated, _ = check_sweep(spec, {}, LAUNCHPAD_FIELDS)
    assert {c.policy for c in evaluated if c.arm == "grounding"} == {"uniform:4", "proportional:8"}
    assert {c.policy for c in evaluated if c.arm == "naive"} == {"tiered"}


def test_a_sweep_world_given_by_id_needs_its_stored_config() -> None:
    spec = preset_spec("smoke", PresetArgs(worlds=(WORLD.world_id,)))
    with pytest.raises(RequestError, match=r"^worlds/seeds: world 'default-s3-\w+' is not registered"):
        check_sweep(spec, {WORLD.world_id: None}, LAUNCHPAD_FIELDS)
    evaluated, exposure = check_sweep(spec, {WORLD.world_id: WORLD}, LAUNCHPAD_FIELDS)
    assert len(evaluated) == 4 and exposure == []
