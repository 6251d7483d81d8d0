"""What a scenario needs built before it can be evaluated: its inputs as (asset, partition) pairs.

A scenario is (world, T', T, refresh policy). Its served-vintage map (`planning.served_vintage`) says which
refresh day of each staged class it serves at T; its inputs are every partition the evaluation reads or
that those partitions are built from (ARCHITECTURE.md section 10, "Evaluation wiring"):

- per world: `ledger`, `warehouse_truth` + `warehouse_raw` (the SaaS mock reads truth), the dbt build;
- `operational_store` and `contract_documents` at T', T and every refresh day of the plan (the live stores
  at T; the days any cached class is refreshed from);
- the staged partition of each staged class at its served day, and `vector_index` at the served day of
  `contract_terms` (its cache is the index);
- `rag_index` at T' (the classic-RAG corpus, built at T'), and `task_set` at T.

Pure: asset keys are strings (user-string form, `analytics_dbt` standing for every model of the world's
dbt build) and partitions are (world, day | None); the scenario materializer turns them into Dagster keys.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from churn_assets.freshness.planning import refresh_days, served_vintage
from churn_assets.freshness.policies import Policy
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.staging import staged_asset_name

Day = dt.date

LEDGER = "ledger"
WAREHOUSE = ("warehouse_truth", "warehouse_raw")
DBT_BUILD = "analytics_dbt"  # every model of the world's dbt build (one partition per world)
OPERATIONAL_STORE = "operational_store"
CONTRACT_DOCUMENTS = "contract_documents"
RAG_INDEX = "rag_index"
TASK_SET = "task_set"


@dataclass(frozen=True, order=True)
class ScenarioInput:
    """One partition a scenario needs: `asset` of `world` (day None) or of (`world`, `day`)."""

    asset: str
    world: str
    day: Day | None = None

    def __str__(self) -> str:
        return f"{self.asset}[{self.world}]" if self.day is None else f"{self.asset}[{self.world} @ {self.day}]"


@dataclass(frozen=True)
class ScenarioPlan:
    world: str
    t_prime: Day
    t: Day
    policy_id: str
    refresh_days: dict[str, list[Day]]  # staged class -> refresh days in [T', T], T' first
    served_vintage: dict[str, Day]  # every class -> data day served at T (T for live classes)
    inputs: tuple[ScenarioInput, ...]  # in dependency order: world-level first, then by day

    @property
    def days(self) -> list[Day]:
        """T', T and every refresh day, in calendar order."""
        return sorted({self.t_prime, self.t, *(d for days in self.refresh_days.values() for d in days)})


def scenario_inputs(
    registry: Registry,
    world: str,
    t_prime: Day,
    t: Day,
    policy: Policy,
    rates: Mapping[str, float] | None = None,
    *,
    calendar_days: int = 180,
) -> ScenarioPlan:
    """The partitions scenario (world, T', T, policy) needs, and its served-vintage map."""
    plan = refresh_days(registry, t_prime, t, policy, rates=rates, calendar_days=calendar_days)
    served = served_vintage(registry, t_prime, t, policy, rates=rates, calendar_days=calendar_days)
    days = sorted({t_prime, t, *(d for ds in plan.values() for d in ds)})

    inputs: list[ScenarioInput] = [ScenarioInput(LEDGER, world)]
    inputs += [ScenarioInput(a, world) for a in WAREHOUSE]
    inputs.append(ScenarioInput(DBT_BUILD, world))
    for d in days:
        inputs += [ScenarioInput(OPERATIONAL_STORE, world, d), ScenarioInput(CONTRACT_DOCUMENTS, world, d)]
    # Each staged class at the day it is served; two classes cached by one asset share its partition.
    cached = dict.fromkeys(ScenarioInput(staged_asset_name(c), world, served[c.name])
                           for c in registry.staged_classes)
    indexes = [i for i in cached if i.asset in {c.staged_index for c in registry.staged_classes}]
    inputs += indexes
    inputs.append(ScenarioInput(RAG_INDEX, world, t_prime))
    inputs += [i for i in cached if i not in indexes]
    inputs.append(ScenarioInput(TASK_SET, world, t))
    return ScenarioPlan(world, t_prime, t, policy.policy_id, plan, served, tuple(dict.fromkeys(inputs)))
