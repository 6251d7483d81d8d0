"""Arm name -> factory, and opening the connections an arm reads through.

    sources = connect_sources(world_id, warehouse_url=..., mongo_url=..., saas_url=..., saas_key=...,
                              documents_root=<state>/worlds/<world>/contracts)
    arm = make_arm("grounding", scenario, sources, policy=Tiered(), served=served_vintage_map)

`served` is the scenario's served-vintage map (the scenario materializer returns it); arms whose policy
needs no measured rates can plan it themselves. The warehouse connection uses the read-only arm role.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from churn_assets.arms.agents.deterministic import Agent
from churn_assets.arms.base import Arm, ArmError, Scenario
from churn_assets.arms.classic_rag import ClassicRagArm
from churn_assets.arms.grounding import GroundingArm, NoFreshnessTiersArm, NoSemanticModelArm, NoSourceRoutingArm
from churn_assets.arms.hierarchical import HierarchicalArm
from churn_assets.arms.naive import NaiveArm
from churn_assets.fabric.postgres import connect
from churn_assets.fabric.roles import arm_url
from churn_assets.freshness.policies import Policy, Tiered
from churn_assets.grounding.registry import Registry, load_registry
from churn_assets.grounding.router import Sources

Day = dt.date
Factory = Callable[..., Arm]


def _naive(scenario: Scenario, sources: Sources, registry: Registry, **_: Any) -> Arm:
    return NaiveArm(scenario, registry, sources)


def _grounding(scenario: Scenario, sources: Sources, registry: Registry, *, policy: Policy | None = None,
               served: Mapping[str, Day] | None = None, **_: Any) -> Arm:
    return GroundingArm(scenario, registry, sources, policy or Tiered(), served)


def _off(scenario: Scenario, sources: Sources, registry: Registry, **_: Any) -> Arm:
    return NoFreshnessTiersArm(scenario, registry, sources)


def _no_semantic(scenario: Scenario, sources: Sources, registry: Registry, *, policy: Policy | None = None,
                 served: Mapping[str, Day] | None = None, **_: Any) -> Arm:
    return NoSemanticModelArm(scenario, registry, sources, policy or Tiered(), served)


def _no_routing(scenario: Scenario, sources: Sources, registry: Registry, *, encoder: Any = None, **_: Any) -> Arm:
    return NoSourceRoutingArm(scenario, sources, encoder)


def _classic_rag(scenario: Scenario, sources: Sources, registry: Registry, *, encoder: Any = None, **_: Any) -> Arm:
    return ClassicRagArm(scenario, sources, encoder)


def _hierarchical(scenario: Scenario, sources: Sources, registry: Registry, **_: Any) -> Arm:
    return HierarchicalArm(scenario, registry, sources)


ARMS: dict[str, Factory] = {
    "naive": _naive,
    "classic_rag": _classic_rag,
    "hierarchical": _hierarchical,
    "grounding": _grounding,
    "grounding_no_freshness_tiers": _off,
    "grounding_no_semantic_model": _no_semantic,
    "grounding_no_source_routing": _no_routing,
}


def make_arm(name: str, scenario: Scenario, sources: Sources, *, registry: Registry | None = None,
             policy: Policy | None = None, served: Mapping[str, Day] | None = None, encoder: Any = None,
             agent: Agent | None = None) -> Arm:
    """The arm `name` for a scenario. `policy`/`served` matter to `grounding` and `grounding_no_semantic_model`
    (the off ablation always uses policy off); `encoder` to the RAG arm (default: the offline MiniLM); `agent`
    answers through the arm's tools (default: the deterministic agent; `agents.llm.LlmAgent` for an LLM)."""
    factory = ARMS.get(name)
    if factory is None:
        raise ArmError(f"unknown arm {name!r} (known: {', '.join(ARMS)})")
    arm = factory(scenario, sources, registry or load_registry(), policy=policy, served=served, encoder=encoder)
    if agent is not None:
        arm.agent = agent
    return arm


def connect_sources(world_id: str, *, warehouse_url: str | None = None, mongo_url: str | None = None,
                    saas_url: str | None = None, saas_key: str | None = None,
                    documents_root: Path | None = None) -> Sources:
    """Open what an arm reads through: Postgres as the read-only arm role (autocommit: every read is a
    statement of its own), Mongo, the SaaS client. Close with `close_sources`."""
    pg = connect(arm_url(warehouse_url), autocommit=True) if warehouse_url else None
    mongo = None
    if mongo_url:
        import pymongo

        mongo = pymongo.MongoClient(mongo_url, serverSelectionTimeoutMS=5000, connectTimeoutMS=5000,
                                    directConnection=True)
    saas = None
    if saas_url:
        from churn_assets.fabric.saas_client import SaasClient

        if not saas_key:
            raise ArmError("a SaaS URL needs its API key")
        saas = SaasClient(saas_url, saas_key)
    return Sources(world_id, pg, mongo, saas, documents_root)


def close_sources(sources: Sources) -> None:
    for thing in (sources.pg, sources.mongo, sources.saas):
        if thing is not None:
            thing.close()
