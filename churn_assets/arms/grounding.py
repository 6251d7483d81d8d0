"""The `grounding` arm and its three ablations.

- `grounding`: the registry, the router and the staged caches. Staged classes are served from their cache
  partition of the scenario's served-vintage map (the refresh policy's, computed by `freshness/`), live
  classes at T from their source (the SaaS API for utilization and tickets, the warehouse for consumption).
  The agent's answer comes from the template's registered measure: it reads every class the measure's definition
  needs (docs/rules.md, "Registry coverage"); a model-backed agent is offered the measures as an action or tool.
- `grounding_no_freshness_tiers`: the same arm under policy `off`: every staged class served as of T'
  (live classes still at T).
- `grounding_no_semantic_model`: no registry measures (a model-backed agent reads raw views only). The classes an
  answer may read come from a fixed keyword map over the question text (`KEYWORD_CLASSES`); the router serves
  those classes whole (the agent computes over them), and a class the words do not name is not served, so the
  agent falls back as docs/arms.md ("The deterministic agent") documents (e.g. "monthly license spend" names
  licenses and cost centers but not prices or user status: licenses are priced at their purchase price, every
  holder counts as active).
- `grounding_no_source_routing`: no routing: everything through the RAG corpus (`rag_index`) built at T',
  top-k fact records per question, answered by the extraction rule (`arms.extraction`). Its planned vintage
  is every class at T'.

With the deterministic agent, `grounding` and `grounding_no_freshness_tiers` answer every task equal to gold
at their planned vintage, so their stale answers equal the exposure oracle exactly (docs/rules.md, "Exposure and
prediction").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from churn_assets.arms.base import ArmError, RouterArm, TracingTools
from churn_assets.arms.corpus import CorpusArm
from churn_assets.fabric.sources import Sources
from churn_assets.freshness.scenario import Scenario
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.router import Router
from churn_assets.grounding.routes import RoutingMode
from churn_assets.world.calendar import Day


class GroundingArm(RouterArm):
    """Serves `served`, the scenario plan's served-vintage map (planned once, by `freshness.scenario`)."""

    name = "grounding"
    semantic = True  # the registry's measures are the agent's interface (docs/measures.md)

    def __init__(self, scenario: Scenario, registry: Registry, sources: Sources, served: Mapping[str, Day]) -> None:
        missing = [c for c in registry.classes if c not in served]
        if missing:
            raise ArmError(f"{self.name}: the served-vintage map has no day for {', '.join(missing)}")
        vintage = {c: served[c] for c in registry.classes}
        super().__init__(scenario, Router(registry, sources, t=scenario.t, served=vintage, mode=RoutingMode.REGISTRY))


class NoFreshnessTiersArm(GroundingArm):
    """`grounding` with policy `off` (fixed by the arm registry): nothing refreshed after T'."""

    name = "grounding_no_freshness_tiers"


# Question words -> the entity classes they name: a fixed keyword map, checked in order, all matches kept.
KEYWORD_CLASSES: tuple[tuple[str, str], ...] = (
    (r"\blist[- ]price|\bprices?\b|\bproducts?\b", "prices"),
    (r"\blicen[cs]es?\b|\bseats?\b|\bpurchased\b|\breclaimed\b|\bholders?\b|\bheld\b|\breassigned\b", "assignments"),
    (r"\busers?\b|\bhired\b|\boffboarded\b", "user_status"),
    (r"\bcost cent(?:er|re)s?\b|\bbusiness unit\b", "cost_center_membership"),
    (r"\bvendors?\b", "vendor_dims"),
    (r"\bcontracts?\b", "contract_terms"),
    (r"\bAPI calls\b|\bsession minutes\b|\bused product\b", "consumption"),
    (r"\busage\b|\bused\b", "utilization"),
    (r"\btickets?\b", "tickets"),
)


def keyword_classes(question: str) -> frozenset[str]:
    """The classes a question's words name (the ablation's only guide to what to read)."""
    return frozenset(cls for pattern, cls in KEYWORD_CLASSES if re.search(pattern, question, re.IGNORECASE))


class NoSemanticModelArm(GroundingArm):
    """`grounding` without registry measures: reads only the classes the question's keywords name."""

    name = "grounding_no_semantic_model"
    semantic = False

    def tools(self, question: str) -> Any:
        return TracingTools(self.router, keyword_classes(question))


class NoSourceRoutingArm(CorpusArm):
    """Everything through the RAG corpus built at T': top-k records among the kinds the template plans, the
    extraction rule (search and traces: `arms/corpus.py`)."""

    name = "grounding_no_source_routing"
    by_kind = True
