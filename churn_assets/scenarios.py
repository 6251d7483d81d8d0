"""Scenarios as Dagster partitions: a scenario's definition is stored in the state folder under its key.

The scenario key (`<world>__<arm>__<policy-id>__tp<T'>__t<T>__<agent-id>__<saas-profile>`, section 10)
names an `eval_run` partition. Policy ids of parameterized policies end in a hash, so the key alone
cannot rebuild the policy: `register_scenario` stores the full definition beside it (as `worlds add`
stores a world's config) and `load_scenario` reads it back; materializing a key without a stored
definition fails with a clear message.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from churn_assets.errors import UserFacingError
from churn_assets.freshness.policies import Policy, parse_policy
from churn_assets.state import StatePaths, atomic_write_text

SCENARIO_PARTITIONS_NAME = "scenario"
scenario_partitions = dg.DynamicPartitionsDefinition(name=SCENARIO_PARTITIONS_NAME)

ARMS = ("naive", "classic_rag", "hierarchical", "grounding", "grounding_no_freshness_tiers",
        "grounding_no_semantic_model", "grounding_no_source_routing")
SAAS_PROFILES = ("default", "reference")


class ScenarioError(UserFacingError):
    """A scenario that cannot be defined or found."""


@dataclass(frozen=True)
class ScenarioDef:
    world_id: str
    arm: str
    policy: str  # the policy as written for `parse_policy` (tiered, off, ttl:..., rate:..., uniform:N ...)
    t_prime: dt.date
    t: dt.date
    agent_id: str = "det"  # or `llm-<hash6 of model_settings>` (section 10)
    saas_profile: str = "default"
    # An LLM agent's settings (arms/agents/llm.py `LlmSettings.to_json()`: no API key); None for `det`.
    model_settings: Mapping[str, Any] | None = field(default=None, hash=False)

    @property
    def parsed_policy(self) -> Policy:
        # The off ablation always runs with policy off (section 10, "Tiering off").
        return parse_policy("off" if self.arm == "grounding_no_freshness_tiers" else self.policy)

    @property
    def policy_id(self) -> str:
        return self.parsed_policy.policy_id

    @property
    def key(self) -> str:
        return (f"{self.world_id}__{self.arm}__{self.policy_id}__tp{self.t_prime:%Y%m%d}__t{self.t:%Y%m%d}"
                f"__{self.agent_id}__{self.saas_profile}")

    def to_json(self) -> dict[str, Any]:
        return {"world_id": self.world_id, "arm": self.arm, "policy": self.policy,
                "t_prime": self.t_prime.isoformat(), "t": self.t.isoformat(), "agent_id": self.agent_id,
                "saas_profile": self.saas_profile,
                **({"model_settings": dict(self.model_settings)} if self.model_settings is not None else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ScenarioDef:
        return cls(d["world_id"], d["arm"], d["policy"], dt.date.fromisoformat(d["t_prime"]),
                   dt.date.fromisoformat(d["t"]), d.get("agent_id", "det"), d.get("saas_profile", "default"),
                   d.get("model_settings"))

    def validate(self) -> ScenarioDef:
        if self.arm not in ARMS:
            raise ScenarioError(f"unknown arm {self.arm!r} (known: {', '.join(ARMS)})")
        if self.saas_profile not in SAAS_PROFILES:
            raise ScenarioError(f"unknown SaaS profile {self.saas_profile!r} (known: {', '.join(SAAS_PROFILES)})")
        if self.t < self.t_prime:
            raise ScenarioError(f"T = {self.t} is before T' = {self.t_prime}")
        if self.agent_id == "det":
            if self.model_settings is not None:
                raise ScenarioError("the deterministic agent (det) takes no model settings")
        else:
            from churn_assets.arms.agents.llm import check_agent_settings

            try:  # the stored settings must hash to the agent id of the key
                check_agent_settings(self.agent_id, self.model_settings)
            except UserFacingError as e:
                raise ScenarioError(f"scenario agent {self.agent_id!r}: {e}") from None
        self.parsed_policy  # noqa: B018 - raises a clear error for a malformed policy
        return self


def scenario_file(paths: StatePaths, key: str) -> Path:
    return paths.root / "scenarios" / f"{key}.json"


def register_scenario(paths: StatePaths, instance: dg.DagsterInstance, scenario: ScenarioDef) -> str:
    """Store the definition and add the `eval_run` partition; returns the key. Idempotent."""
    scenario.validate()
    atomic_write_text(scenario_file(paths, scenario.key), json.dumps(scenario.to_json(), indent=2, sort_keys=True))
    if not instance.has_dynamic_partition(SCENARIO_PARTITIONS_NAME, scenario.key):
        instance.add_dynamic_partitions(SCENARIO_PARTITIONS_NAME, [scenario.key])
    return scenario.key


def load_scenario(paths: StatePaths, key: str) -> ScenarioDef:
    path = scenario_file(paths, key)
    if not path.exists():
        raise ScenarioError(f"scenario {key!r} has no stored definition ({path}): define it with `churnbench run`")
    return ScenarioDef.from_json(json.loads(path.read_text())).validate()


def scenarios_of_world(paths: StatePaths, world_id: str) -> list[str]:
    folder = paths.root / "scenarios"
    return sorted(p.stem for p in folder.glob(f"{world_id}__*.json")) if folder.exists() else []
