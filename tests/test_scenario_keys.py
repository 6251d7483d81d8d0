"""Scenario keys (issue 20): what differs between cells comes first, the world last; keys of the form before
(world first) still parse and name the same scenario; anything else fails in one line naming the form."""

from __future__ import annotations

import datetime as dt

import pytest

from churn_assets.arms.registry import define_scenario
from churn_assets.freshness.scenario import (
    SCENARIO_KEY_EXAMPLE,
    ScenarioKey,
    ScenarioKeyError,
    current_scenario_key,
    parse_scenario_key,
)

WORLD = "default-s42-3f9a1c"
T = dt.date(2024, 4, 27)
D28 = dt.date(2024, 3, 29)


def test_the_key_puts_arm_policy_and_days_first_and_the_world_last() -> None:
    scenario = define_scenario(WORLD, "grounding", "tiered", D28, T)
    assert scenario.key == "grounding__tiered__tp20240329__t20240427__det__default__default-s42-3f9a1c"
    assert scenario.key_parts.legacy == "default-s42-3f9a1c__grounding__tiered__tp20240329__t20240427__det__default"
    # Stable: the same scenario always has the same key; a parameterized policy keeps its hashed id.
    assert define_scenario(WORLD, "grounding", "tiered", D28, T).key == scenario.key
    ttl = define_scenario(WORLD, "grounding", "ttl:prices=3", D28, T)
    assert ttl.key.startswith("grounding__ttl-") and ttl.key.endswith(f"__tp20240329__t20240427__det__default__{WORLD}")


def test_what_differs_between_cells_is_the_start_of_the_key() -> None:
    """Where the UI cuts a key short it keeps the start (and the end): arm, policy, T' and T come first."""
    for arm, policy in (("grounding", "tiered"), ("grounding_no_freshness_tiers", "off"), ("naive", "tiered")):
        for tp in (D28, T - dt.timedelta(days=1)):
            scenario = define_scenario(WORLD, arm, policy, tp, T)
            assert scenario.key.startswith(f"{arm}__{scenario.policy_id}__tp{tp:%Y%m%d}__t{T:%Y%m%d}__")
            assert scenario.key.endswith(f"__{WORLD}")


@pytest.mark.parametrize("policy", ["tiered", "off", "ttl:prices=3,assignments=0", "rate", "uniform:8",
                                    "proportional:16"])
def test_both_forms_parse_to_the_same_parts(policy: str) -> None:
    scenario = define_scenario(WORLD, "grounding", policy, D28, T)
    new, old = parse_scenario_key(scenario.key), parse_scenario_key(scenario.key_parts.legacy)
    assert new == old == scenario.key_parts
    assert (new.old_form, old.old_form) == (False, True)
    assert (new.arm, new.policy_id, new.t_prime, new.t, new.agent_id, new.saas_profile, new.world_id) == (
        "grounding", scenario.policy_id, D28, T, "det", "default", WORLD)
    assert current_scenario_key(scenario.key_parts.legacy) == current_scenario_key(scenario.key) == scenario.key


def test_an_llm_agent_and_the_reference_profile_and_a_world_name_with_double_underscores() -> None:
    key = ScenarioKey("naive", "tiered", D28, T, "llm-3f9a1c", "reference", "my__world-s7-abcdef")
    assert str(key) == "naive__tiered__tp20240329__t20240427__llm-3f9a1c__reference__my__world-s7-abcdef"
    assert parse_scenario_key(str(key)) == parse_scenario_key(key.legacy) == key
    assert parse_scenario_key(key.legacy).old_form


@pytest.mark.parametrize(("key", "problem"), [
    ("", "1 `__`-separated parts"),
    ("grounding", "1 `__`-separated parts"),
    ("../../etc/passwd", "1 `__`-separated parts"),
    ("grounding__tiered__20240329__t20240427__det__default__default-s42-3f9a1c", "tp<YYYYMMDD>"),
    ("grounding__tiered__tp20241399__t20240427__det__default__default-s42-3f9a1c", "tp<YYYYMMDD>"),
    ("grounding__tiered__tp20240329__t20240427__det__default__default", "'default' is not a world id"),
    ("grounding__tiered__tp20240329__t20240427__robot__default__default-s42-3f9a1c", "agent 'robot'"),
    ("grounding__tiered__tp20240329__t20240427__det__premium__default-s42-3f9a1c", "'premium' is not a SaaS"),
    ("Grounding__tiered__tp20240329__t20240427__det__default__default-s42-3f9a1c", "'Grounding' is not an arm"),
    ("default-s42-3f9a1c__grounding__tiered__tp20240329__t20240427__det__gold", "'gold' is not a SaaS profile"),
])
def test_a_malformed_key_fails_in_one_line_naming_the_form(key: str, problem: str) -> None:
    with pytest.raises(ScenarioKeyError) as err:
        parse_scenario_key(key)
    message = str(err.value)
    assert "\n" not in message and problem in message
    assert f"{key!r} is not a scenario key" in message and SCENARIO_KEY_EXAMPLE in message


def test_a_key_typed_with_iso_days_names_the_same_scenario() -> None:
    # `churnbench run` prints T'=2024-03-29 beside the key; a key typed with those days finds the same scenario
    key = define_scenario("default-s42-3f9a1c", "grounding", "tiered", dt.date(2024, 3, 29), dt.date(2024, 4, 27)).key
    typed = key.replace("tp20240329", "tp2024-03-29").replace("t20240427", "t2024-04-27")
    assert typed != key and current_scenario_key(typed) == key
    with pytest.raises(ScenarioKeyError):
        parse_scenario_key(key.replace("tp20240329", "tp2024-0329"))
