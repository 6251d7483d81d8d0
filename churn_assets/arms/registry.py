"""The arm registry: one record per arm, and every list of arms derives from it.

    spec = arm_spec("grounding")                          # ArmSpec: name, description, factory, reads, ...
    scenario = define_scenario(world, "grounding", "tiered", t_prime, t)   # checked, fixed policy applied
    arm = make_arm(scenario, sources, served=plan.served_vintage)          # answers the scenario's tasks

An `ArmSpec` says what the rest of churnbench needs of an arm:

- `factory`: builds the arm from an `ArmContext` (scenario, sources, registry, the served-vintage map of the
  scenario's plan, an encoder for the RAG arms);
- `reads`: what the planner must build for it (`freshness.scenario.ArmReads`: its day inputs, and its
  planned vintage, or None when it serves the refresh policy's map);
- `fixed_policy`: the refresh policy the arm always runs under (the off ablation), None when it takes the
  scenario's;
- `description`: one line for the CLI's help and the docs.

The CLI's `--arm` choices and help, the paper's cells, scenario validation, the materializer and the tests all
read `ARMS`; adding an arm is its module, one entry here, and its tests (docs/architecture.md, "How to add ...":
an arm). The names are the arm classes' own (`NaiveArm.name`, ...): each is written once, on its class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from churn_assets.arms.agents.interface import Agent
from churn_assets.arms.base import Arm, ArmError
from churn_assets.arms.classic_rag import ClassicRagArm
from churn_assets.arms.corpus import CORPUS_READS
from churn_assets.arms.grounding import GroundingArm, NoFreshnessTiersArm, NoSemanticModelArm, NoSourceRoutingArm
from churn_assets.arms.hierarchical import HIERARCHICAL_READS, HierarchicalArm
from churn_assets.arms.naive import NAIVE_READS, NaiveArm
from churn_assets.errors import UserFacingError
from churn_assets.fabric.sources import Sources
from churn_assets.freshness.policies import Off, Tiered, check_policy_classes
from churn_assets.freshness.scenario import (
    DETERMINISTIC_AGENT,
    RAG_INDEX,
    SERVES_POLICY,
    ArmReads,
    Scenario,
    ScenarioError,
)
from churn_assets.grounding.registry import Registry, load_registry
from churn_assets.world.calendar import Day


@dataclass(frozen=True)
class ArmContext:
    """What a factory builds an arm from."""

    scenario: Scenario
    sources: Sources
    registry: Registry
    served: Mapping[str, Day]  # the scenario plan's served-vintage map (the arm's planned vintage)
    encoder: Any = None  # the RAG arms' query encoder (None: the offline MiniLM)


@dataclass(frozen=True)
class ArmSpec:
    name: str
    description: str
    factory: Callable[[ArmContext], Arm]
    reads: ArmReads = SERVES_POLICY  # the refresh policy's staged partitions, no day inputs of its own
    fixed_policy: str | None = None

    @property
    def only_policy(self) -> str | None:
        """The one policy its scenarios take: its fixed policy, or the default for an arm that serves no refresh
        policy (its own vintage: a policy would change nothing but the key). None: it takes any policy."""
        return self.fixed_policy or (None if self.reads.serves_policy else Tiered().policy_id)

    @property
    def searches_corpus(self) -> bool:
        """Whether it reads the RAG corpus, which it searches by the question's embedding (so it needs the
        embedding model). The corpus arms read nothing else, so the cell scheduler also takes it to mean no SaaS
        quota to wait on (`cells._CORPUS_CELL_COST`): an arm reading the corpus and a live store too would only
        be started later than it could be."""
        return any(asset == RAG_INDEX for asset, _when in self.reads.day_inputs)


ARMS: dict[str, ArmSpec] = {spec.name: spec for spec in (
    ArmSpec(NaiveArm.name, "every class read live at T (Mongo, dbt as-of views, documents, SaaS API)",
            lambda c: NaiveArm(c.scenario, c.registry, c.sources), NAIVE_READS),
    ArmSpec(ClassicRagArm.name, "one top-10 search over a vector store of everything, built at T'",
            lambda c: ClassicRagArm(c.scenario, c.sources, c.encoder), CORPUS_READS),
    ArmSpec(HierarchicalArm.name, "a worker per source (live at T, contracts from the index of T'), merged by "
            "a coordinator", lambda c: HierarchicalArm(c.scenario, c.registry, c.sources), HIERARCHICAL_READS),
    ArmSpec(GroundingArm.name, "registry, router and staged caches refreshed on the freshness tiers",
            lambda c: GroundingArm(c.scenario, c.registry, c.sources, c.served)),
    ArmSpec(NoFreshnessTiersArm.name, "grounding with nothing refreshed after T' (policy off)",
            lambda c: NoFreshnessTiersArm(c.scenario, c.registry, c.sources, c.served), fixed_policy=Off().policy_id),
    ArmSpec(NoSemanticModelArm.name, "grounding without registry measures: the question's keywords pick the classes",
            lambda c: NoSemanticModelArm(c.scenario, c.registry, c.sources, c.served)),
    ArmSpec(NoSourceRoutingArm.name, "grounding without routing: the RAG corpus of T', searched by record kind",
            lambda c: NoSourceRoutingArm(c.scenario, c.sources, c.encoder), CORPUS_READS),
)}

# The paper's 2x2 (docs/rules.md, "The paper's windows"): the grounding arm, tiered, against its off ablation.
TIERED_ARM = GroundingArm.name
UNTIERED_ARM = NoFreshnessTiersArm.name


def arm_names() -> tuple[str, ...]:
    """Every registered arm, in registry order (read at call time, so a registered extra arm shows)."""
    return tuple(ARMS)


def arm_spec(name: str) -> ArmSpec:
    spec = ARMS.get(name)
    if spec is None:
        raise ArmError(f"unknown arm {name!r} (known: {', '.join(ARMS)})")
    return spec


def arms_help() -> str:
    """The arms with their one-line descriptions, for `--arm`'s help."""
    return "; ".join(f"{s.name}: {s.description}" for s in ARMS.values())


def define_scenario(world_id: str, arm: str, policy: str, t_prime: Day, t: Day, *,
                    agent_id: str = DETERMINISTIC_AGENT, saas_profile: str = "default",
                    model_settings: Mapping[str, Any] | None = None) -> Scenario:
    """A checked scenario: a registered arm (its fixed policy replacing `policy`, whose TTL overrides name cached
    classes), and an LLM agent's stored settings hashing to its agent id. An arm that takes one policy only
    (`ArmSpec.only_policy`) refuses another in one line, before anything is registered: `--policy off` on naive
    would only have made another experiment of the same answers (`scenario_from_json` reads a definition stored
    before that rule as it was)."""
    scenario = Scenario(world_id, arm, check_arm_policy(arm, policy), t_prime, t, agent_id, saas_profile,
                        model_settings)

    # a TTL for a class the registry does not cache is refused here, before the scenario is registered
    check_policy_classes(scenario.parsed_policy, load_registry())
    if agent_id != DETERMINISTIC_AGENT:
        from churn_assets.arms.agents.llm_settings import check_agent_settings

        try:  # the stored settings must hash to the agent id of the key
            check_agent_settings(agent_id, model_settings)
        except UserFacingError as e:
            raise ScenarioError(f"scenario agent {agent_id!r}: {e}") from None
    return scenario


def check_arm_policy(arm: str, policy: str) -> str:
    """The policy a scenario of `arm` takes when asked for `policy`: its one policy (`ArmSpec.only_policy`) when
    it has one, refusing any other than the default or that one in one line; else `policy`."""
    spec = arm_spec(arm)
    only = spec.only_policy
    if only is None:
        return policy
    if policy not in (Tiered().policy_id, only):
        why = (f"always serves policy {only}" if spec.fixed_policy else
               "serves no refresh policy (it reads its own vintage, whatever the policy)")
        raise ScenarioError(f"arm {arm} {why}: policy {policy!r} would change nothing but the scenario's key; "
                            "leave --policy out")
    return only


def scenario_from_json(data: Mapping[str, Any]) -> Scenario:
    """A stored scenario definition, checked as `define_scenario` checks a new one."""
    s = Scenario.from_json(data)
    if s.policy != (arm_spec(s.arm).only_policy or s.policy):
        # stored before policy-free arms refused a policy: read as it was, under the key it names its results by
        return Scenario(s.world_id, s.arm, s.policy, s.t_prime, s.t, s.agent_id, s.saas_profile, s.model_settings)
    return define_scenario(s.world_id, s.arm, s.policy, s.t_prime, s.t, agent_id=s.agent_id,
                           saas_profile=s.saas_profile, model_settings=s.model_settings)


def make_arm(scenario: Scenario, sources: Sources, *, served: Mapping[str, Day], registry: Registry | None = None,
             encoder: Any = None, agent: Agent | None = None) -> Arm:
    """The scenario's arm, serving `served` (its plan's served-vintage map). `agent` answers through the arm's
    tools (default: the deterministic agent; `agents.llm.LlmAgent` for an LLM)."""
    spec = arm_spec(scenario.arm)
    arm = spec.factory(ArmContext(scenario, sources, registry or load_registry(), served, encoder))
    if agent is not None:
        arm.agent = agent
    return arm

