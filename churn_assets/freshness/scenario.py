"""A scenario (one value), and its plan: the partitions it needs built and the vintage it serves.

A **scenario** is world, arm, refresh policy, T', T, agent and SaaS profile (`Scenario`); its key names its
`eval_run` partition (docs/rules.md, "Scenario key and hashes"; decision 119 put the world last):

    <arm>__<policy-id>__tp<T'>__t<T>__<agent-id>__<saas-profile>__<world>

What differs between the cells of a sweep (arm, policy, T', T) comes first, so keys that the Dagster UI cuts
short stay apart; the world, the same for every cell of a world, comes last (where the UI's middle truncation
still shows it). `parse_scenario_key` reads this form and the form of before (`<world>__<arm>__...`, which
`churnbench migrate` renames): the world id is the only part that may itself hold `__`, and the other parts are
checked one by one, so neither form can be taken for the other. "T' before T" is checked in one place:
`check_days`, which `Scenario` runs when it is made. Which arms exist and what each reads is the arm registry's
(`arms/registry.py`); a scenario is made through `arms.registry.define_scenario`, which checks the arm and the
agent and applies a policy the arm fixes.

Its **plan** (`plan_scenario`, pure) is made once, at the scenario's first materialization, and stored with it
together with the hash of the registry it came from (`orchestration/scenarios.py`):

- `served_vintage`: for every entity class the data day the arm serves at T (its planned vintage). For an arm
  that serves the refresh policy (grounding and its ablations) it is the policy's served-vintage map; other
  arms declare theirs (`ArmReads.vintage`).
- `refresh_days`: for each cached class the policy's refresh days in [T', T] (none for arms that serve no
  staged cache).
- `inputs`: every partition the evaluation reads or that those partitions are built from (docs/rules.md,
  "Evaluation wiring"), in dependency order:
  - per world: `ledger`, `warehouse_truth` + `warehouse_raw` (the SaaS mock reads truth), the dbt build (the
    as-of views, and the arm role's grants on `_staging`);
  - for a policy arm: `operational_store` and `contract_documents` at T', T and every refresh day, the
    staged partition of each staged class at its served day and `vector_index` at the served day of
    `contract_terms` (its cache is the index);
  - the arm's own day inputs (`ArmReads.day_inputs`: e.g. the RAG corpus of T');
  - `task_set` at T.

Pure: asset keys are strings (user-string form, `analytics_dbt` standing for every model of the world's
dbt build) and partitions are (world, day | None); the scenario materializer turns them into Dagster keys.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from churn_assets.errors import UserFacingError
from churn_assets.fabric.saas_profiles import SAAS_PROFILES
from churn_assets.freshness.planning import refresh_days, vintage_of
from churn_assets.freshness.policies import Policy, parse_policy
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.staging import staged_asset_name
from churn_assets.world.calendar import Day
from churn_assets.world.config import WORLD_ID_RE

# The plan's vocabulary: asset keys (user strings) of the partitions a scenario can need.
LEDGER = "ledger"
WAREHOUSE = ("warehouse_truth", "warehouse_raw")
DBT_BUILD = "analytics_dbt"  # every model of the world's dbt build (one partition per world)
OPERATIONAL_STORE = "operational_store"
CONTRACT_DOCUMENTS = "contract_documents"
VECTOR_INDEX = "vector_index"
RAG_INDEX = "rag_index"
TASK_SET = "task_set"

DETERMINISTIC_AGENT = "det"
LLM_AGENT_ID_RE = re.compile(r"llm-[0-9a-f]{6}")  # `llm-<hash6 of model settings>`

KEY_SEPARATOR = "__"
SCENARIO_KEY_FORM = "<arm>__<policy-id>__tp<YYYYMMDD>__t<YYYYMMDD>__<agent-id>__<saas-profile>__<world>"
SCENARIO_KEY_EXAMPLE = "grounding__tiered__tp20240329__t20240427__det__default__default-s42-3f9a1c"
_FIELDS = 6  # the parts besides the world
_ARM_RE = re.compile(r"^[a-z][a-z0-9_]*[a-z0-9]$|^[a-z]$")
_POLICY_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_.-]*[a-z0-9])?$")


class ScenarioError(UserFacingError):
    """A scenario that cannot be defined, found or planned; the message names it and the fix."""


def check_days(t_prime: Day, t: Day) -> None:
    """The one check of "T' before T": the cache is built on T', the questions are asked on T."""
    if t < t_prime:
        raise ScenarioError(f"T = {t} is before T' = {t_prime}: the cache build day T' must not be after "
                            "the evaluation day T")


@dataclass(frozen=True)
class Scenario:
    """What one evaluation run is asked: an arm answering a world's questions at T with caches built on T'."""

    world_id: str
    arm: str
    policy: str  # as written for `parse_policy` (tiered, off, ttl:..., rate:..., uniform:N ...)
    t_prime: Day
    t: Day
    agent_id: str = DETERMINISTIC_AGENT  # or `llm-<hash6 of model_settings>`
    saas_profile: str = "default"
    # An LLM agent's settings (arms/agents/llm.py `LlmSettings.to_json()`: no API key); None for `det`.
    model_settings: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        check_days(self.t_prime, self.t)
        if self.saas_profile not in SAAS_PROFILES:
            raise ScenarioError(f"unknown SaaS profile {self.saas_profile!r} (known: {', '.join(SAAS_PROFILES)})")
        if self.agent_id == DETERMINISTIC_AGENT and self.model_settings is not None:
            raise ScenarioError("the deterministic agent (det) takes no model settings")
        self.parsed_policy  # noqa: B018 - a malformed policy fails here, with the syntax in the message

    @property
    def parsed_policy(self) -> Policy:
        return parse_policy(self.policy)

    @property
    def policy_id(self) -> str:
        return self.parsed_policy.policy_id

    @property
    def key(self) -> str:
        """`<arm>__<policy-id>__tp<T'>__t<T>__<agent-id>__<saas-profile>__<world>` (the module doc)."""
        return str(self.key_parts)

    @property
    def key_parts(self) -> ScenarioKey:
        return ScenarioKey(self.arm, self.policy_id, self.t_prime, self.t, self.agent_id, self.saas_profile,
                           self.world_id)

    @property
    def label(self) -> str:
        """A short readable name for logs: arm, policy and the two days."""
        return f"{self.arm} ({self.policy_id}) T'={self.t_prime} T={self.t}"

    def to_json(self) -> dict[str, Any]:
        return {"world_id": self.world_id, "arm": self.arm, "policy": self.policy,
                "t_prime": self.t_prime.isoformat(), "t": self.t.isoformat(), "agent_id": self.agent_id,
                "saas_profile": self.saas_profile,
                **({"model_settings": dict(self.model_settings)} if self.model_settings is not None else {})}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Scenario:
        return cls(d["world_id"], d["arm"], d["policy"], dt.date.fromisoformat(d["t_prime"]),
                   dt.date.fromisoformat(d["t"]), d.get("agent_id", DETERMINISTIC_AGENT),
                   d.get("saas_profile", "default"), d.get("model_settings"))


class ScenarioKeyError(ScenarioError):
    """A string that is not a scenario key (a partition added by hand in the UI, a mistyped reference)."""


@dataclass(frozen=True)
class ScenarioKey:
    """The parts of a scenario key; `str()` is the key, `legacy` the form before issue 20 (world first).
    `old_form`: parsed from the form of before."""

    arm: str
    policy_id: str
    t_prime: Day
    t: Day
    agent_id: str
    saas_profile: str
    world_id: str
    old_form: bool = field(default=False, compare=False)

    def _middle(self) -> list[str]:
        return [self.arm, self.policy_id, f"tp{self.t_prime:%Y%m%d}", f"t{self.t:%Y%m%d}", self.agent_id,
                self.saas_profile]

    def __str__(self) -> str:
        return KEY_SEPARATOR.join([*self._middle(), self.world_id])

    @property
    def legacy(self) -> str:
        """The key in the form before issue 20: `<world>__<arm>__<policy-id>__tp<T'>__t<T>__<agent-id>__<saas>`."""
        return KEY_SEPARATOR.join([self.world_id, *self._middle()])


def _key_day(text: str, prefix: str) -> Day | None:
    """`tp20240120` (the key's own form) or `tp2024-01-20` (the ISO day the CLI prints beside it): a key typed
    with either names the same scenario."""
    if not text.startswith(prefix):
        return None
    digits = text[len(prefix):]
    if len(digits) == 10 and digits[4] == digits[7] == "-":
        digits = digits.replace("-", "")
    if not (len(digits) == 8 and digits.isdigit()):
        return None
    try:
        return dt.datetime.strptime(digits, "%Y%m%d").date()
    except ValueError:
        return None


def _key_parts(parts: list[str], world_id: str, old_form: bool) -> ScenarioKey | str:
    """The parsed key, or why these parts are not one."""
    arm, policy_id, tp, t, agent_id, saas = parts
    t_prime_day, t_day = _key_day(tp, "tp"), _key_day(t, "t")
    if t_prime_day is None or t_day is None:
        return "T' and T must read tp<YYYYMMDD> and t<YYYYMMDD>"
    if not WORLD_ID_RE.match(world_id):
        return f"{world_id!r} is not a world id (<name>-s<seed>-<hash6>)"
    if not _ARM_RE.match(arm):
        return f"{arm!r} is not an arm name"
    if not _POLICY_ID_RE.match(policy_id):
        return f"{policy_id!r} is not a policy id"
    if agent_id != DETERMINISTIC_AGENT and not LLM_AGENT_ID_RE.fullmatch(agent_id):
        return f"agent {agent_id!r} is neither {DETERMINISTIC_AGENT} nor llm-<6 hex digits>"
    if saas not in SAAS_PROFILES:
        return f"{saas!r} is not a SaaS profile ({', '.join(SAAS_PROFILES)})"
    return ScenarioKey(arm, policy_id, t_prime_day, t_day, agent_id, saas, world_id, old_form)


def parse_scenario_key(key: str) -> ScenarioKey:
    """The parts of a scenario key in today's form or the form of before (`old_form` says which); a
    `ScenarioKeyError` naming the expected form otherwise."""
    parts = str(key).split(KEY_SEPARATOR)
    problem = f"it has {len(parts)} `__`-separated parts, a scenario key at least {_FIELDS + 1}"
    if len(parts) > _FIELDS:
        # Only the world may hold `__`: it is whatever the six other parts leave, at the end (today's form) or at
        # the start (the form of before). Every part is checked, so at most one reading succeeds.
        today = _key_parts(parts[:_FIELDS], KEY_SEPARATOR.join(parts[_FIELDS:]), old_form=False)
        if isinstance(today, ScenarioKey):
            return today
        before = _key_parts(parts[-_FIELDS:], KEY_SEPARATOR.join(parts[:-_FIELDS]), old_form=True)
        if isinstance(before, ScenarioKey):
            return before
        # Say what is wrong with the reading the key looks closest to.
        problem = before if parts[-4].startswith("tp") and not parts[2].startswith("tp") else today
    raise ScenarioKeyError(f"{str(key)!r} is not a scenario key ({problem}; expected {SCENARIO_KEY_FORM}, "
                           f"e.g. {SCENARIO_KEY_EXAMPLE})")


def current_scenario_key(key: str) -> str:
    """A scenario key in today's form (an old-form key is rewritten; the parts are checked either way)."""
    return str(parse_scenario_key(key))


When = Literal["t_prime", "t"]


@dataclass(frozen=True)
class ArmReads:
    """What an arm reads, as the planner needs it: partitions besides the world's own inputs and the task
    set (`day_inputs`: (asset, "t_prime" | "t")), and its planned vintage (`vintage(T', T)`). `vintage` None:
    the arm serves the refresh policy's served-vintage map and reads its staged partitions."""

    day_inputs: tuple[tuple[str, When], ...] = ()
    vintage: Callable[[Day, Day], dict[str, Day]] | None = None

    @property
    def serves_policy(self) -> bool:
        return self.vintage is None


# The reads of grounding and its router ablations: the policy's staged partitions, nothing of their own.
SERVES_POLICY = ArmReads()


@dataclass(frozen=True, order=True)
class ScenarioInput:
    """One partition a scenario needs: `asset` of `world` (day None) or of (`world`, `day`)."""

    asset: str
    world: str
    day: Day | None = None

    def __str__(self) -> str:
        return f"{self.asset}[{self.world}]" if self.day is None else f"{self.asset}[{self.world} @ {self.day}]"

    def to_json(self) -> list[str | None]:
        return [self.asset, self.world, None if self.day is None else self.day.isoformat()]

    @classmethod
    def from_json(cls, value: list[str | None]) -> ScenarioInput:
        asset, world, day = value
        return cls(str(asset), str(world), None if day is None else dt.date.fromisoformat(day))


# The plan's own format: a stored plan of another version is planned again (the planner is deterministic).
PLAN_VERSION = 3  # 2: effective TTLs; 3: budget schedules fixed at T' (decision 206), stored plans replanned


@dataclass(frozen=True)
class ScenarioPlan:
    """A scenario's plan (see the module doc); `registry_hash` names the registry it was made from."""

    refresh_days: dict[str, list[Day]]  # staged class -> refresh days in [T', T], T' first
    served_vintage: dict[str, Day]  # every class -> data day served at T (the arm's planned vintage)
    inputs: tuple[ScenarioInput, ...]  # in dependency order: world-level first, then by day
    registry_hash: str
    # Cached class -> the TTL it runs under (None: the policy is not TTL-driven); {} for an arm that serves
    # no staged cache. Part of the experiment's identity: re-tiering a class changes it.
    effective_ttls: dict[str, int | None] = field(default_factory=dict)

    def days(self, t_prime: Day, t: Day) -> list[Day]:
        """T', T and every refresh day, in calendar order."""
        return sorted({t_prime, t, *(d for days in self.refresh_days.values() for d in days)})

    def to_json(self) -> dict[str, Any]:
        return {
            "plan_version": PLAN_VERSION,
            "effective_ttls": dict(self.effective_ttls),
            "registry_hash": self.registry_hash,
            "refresh_days": {c: [d.isoformat() for d in days] for c, days in self.refresh_days.items()},
            "served_vintage": {c: d.isoformat() for c, d in self.served_vintage.items()},
            "inputs": [i.to_json() for i in self.inputs],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScenarioPlan | None:
        """The stored plan; None for a plan of another format version (to be planned again)."""
        if d.get("plan_version") != PLAN_VERSION:
            return None
        return cls({c: [dt.date.fromisoformat(x) for x in days] for c, days in d["refresh_days"].items()},
                   {c: dt.date.fromisoformat(x) for c, x in d["served_vintage"].items()},
                   tuple(ScenarioInput.from_json(i) for i in d["inputs"]), str(d["registry_hash"]),
                   dict(d["effective_ttls"]))


def plan_scenario(scenario: Scenario, reads: ArmReads, registry: Registry, *,
                  rates: Mapping[str, float] | None = None, calendar_days: int = 180) -> ScenarioPlan:
    """The plan of `scenario` for an arm that reads `reads` (the one planning function). `rates`: change
    rates measured on [start, T'], needed when the arm serves a policy that `needs_rates`."""
    world, t_prime, t = scenario.world_id, scenario.t_prime, scenario.t
    days_of: dict[When, Day] = {"t_prime": t_prime, "t": t}
    inputs: list[ScenarioInput] = [ScenarioInput(LEDGER, world), *(ScenarioInput(a, world) for a in WAREHOUSE),
                                   ScenarioInput(DBT_BUILD, world)]
    plan: dict[str, list[Day]] = {}
    ttls: dict[str, int | None] = {}
    if reads.vintage is not None:
        served = reads.vintage(t_prime, t)
    else:
        policy = scenario.parsed_policy
        plan = refresh_days(registry, t_prime, t, policy, rates=rates, calendar_days=calendar_days)
        ttls = policy.effective_ttls(registry, rates, calendar_days)
        served = vintage_of(registry, plan, t)
        for d in sorted({t_prime, t, *(d for ds in plan.values() for d in ds)}):
            inputs += [ScenarioInput(OPERATIONAL_STORE, world, d), ScenarioInput(CONTRACT_DOCUMENTS, world, d)]
        # Each staged class at the day it is served; two classes cached by one asset share its partition. The
        # indexes first: they are built from the day's documents, the staged tables from the dbt build.
        cached = dict.fromkeys(ScenarioInput(staged_asset_name(c), world, served[c.name])
                               for c in registry.staged_classes)
        index_assets = {c.staged_index for c in registry.staged_classes}
        inputs += [i for i in cached if i.asset in index_assets]
        inputs += [i for i in cached if i.asset not in index_assets]
    inputs += [ScenarioInput(asset, world, days_of[when]) for asset, when in reads.day_inputs]
    inputs.append(ScenarioInput(TASK_SET, world, t))
    return ScenarioPlan(plan, served, tuple(dict.fromkeys(inputs)), registry.content_hash, ttls)
