"""Scenarios as Dagster partitions: each defined scenario is stored in the state folder under its key, with
its plan once it has one.

The scenario key (`<arm>__<policy-id>__tp<T'>__t<T>__<agent-id>__<saas-profile>__<world>`, `freshness/scenario.py`)
names an `eval_run` partition. Policy ids of parameterized policies end in a hash, so the key alone cannot rebuild
the policy: `register_scenario` stores the definition (as `worlds add` stores a world's config) and adds the
partition; `load_scenario` reads it back, checked as a new one is. A command reads the file once and passes what it
read on (`register_stored` and `read_scenario` return the definition and the plan together as a `StoredScenario`;
decision 331). The plan (`freshness.scenario.plan_scenario`)
is made once, at the scenario's first materialization, and stored beside the definition with the hash of the
registry it came from (`store_plan`, `stored_plan`); `orchestration/scenario_inputs.py` decides when a stored
plan may be used.

A key is parsed before it names a file: a partition typed by hand in the UI that is no scenario key, or that is
in the form before issue 20, fails in one line (never as a path).

File `<state>/scenarios/<key>.json`: `{"scenario": {...}, "plan": {...}}` (`plan` absent until planned). A file
written before plans were stored holds the definition alone; it loads unchanged and gets its plan on first use.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg

from churn_assets.arms.registry import scenario_from_json
from churn_assets.freshness.scenario import Scenario, ScenarioError, ScenarioPlan, parse_scenario_key
from churn_assets.orchestration.partitions import SCENARIO_PARTITIONS_NAME
from churn_assets.state import StatePaths, atomic_write_text
from churn_assets.state_locks import state_locks
from churn_assets.unique_keys import load_json
from churn_assets.world.calendar import typed_day


def _read(paths: StatePaths, key: str) -> dict[str, Any]:
    parts = parse_scenario_key(key)  # a key that does not parse never becomes a path
    if parts.old_form:
        raise ScenarioError(f"scenario key {key} is in the form before issue 20 (world first); this scenario's key "
                            f"is {parts} (`churnbench migrate` renames the scenarios of an older state folder)")
    path = paths.scenario_file(key)
    try:
        data = load_json(path.read_text(), f"scenario file {path}")
    except FileNotFoundError:
        raise ScenarioError(f"scenario {key!r} has no stored definition ({path}): define it with "
                            "`churnbench run`") from None
    except json.JSONDecodeError as e:
        raise ScenarioError(f"scenario file {path} is not valid JSON ({e.msg})") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"scenario file {path} is not UTF-8 text") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario file {path}: a JSON {type(data).__name__}, not an object")
    return data if "scenario" in data else {"scenario": data}  # the format before plans were stored


def _write(paths: StatePaths, key: str, data: dict[str, Any]) -> None:
    atomic_write_text(paths.scenario_file(key), json.dumps(data, indent=2, sort_keys=True) + "\n")


@contextmanager
def scenario_lock(paths: StatePaths, scenario: Scenario) -> Iterator[None]:
    """The one writer of a scenario's file: its read-modify-writes (registering, planning once) run under it,
    so two processes defining or planning the same scenario at once never drop each other's plan. Not
    reentrant (a connection per holder): take it once, around `_read` ... `_write` / `store_plan`."""
    with state_locks(paths).hold(paths.lock_name(scenario.world_id, "scenarios", scenario.key),
                                 what=f"scenario {scenario.key}"):
        yield


@dataclass(frozen=True)
class StoredScenario:
    """A scenario's file as it was read once: the definition (checked as `load_scenario` checks it) and the plan
    (None until planned). Whoever read it passes it on, so that one command reads the file once
    (`orchestration/scenario_in_hand.py`)."""

    scenario: Scenario
    plan: ScenarioPlan | None

    @property
    def key(self) -> str:
        return self.scenario.key


def register_stored(paths: StatePaths, instance: dg.DagsterInstance, scenario: Scenario) -> StoredScenario:
    """Store the definition and add the `eval_run` partition; returns the scenario's file as it now stands (its
    definition and the plan it kept), read once. Idempotent: a stored plan of the same key is kept (a key names
    one definition)."""
    key = scenario.key
    path = paths.scenario_file(key)
    with scenario_lock(paths, scenario):
        data = _read(paths, key) if path.exists() else {}
        if data.get("scenario") != scenario.to_json():
            data["scenario"] = scenario.to_json()
            _write(paths, key, data)
    # Dagster's Postgres storage inserts dynamic partitions with ON CONFLICT DO NOTHING: safe concurrently.
    if not instance.has_dynamic_partition(SCENARIO_PARTITIONS_NAME, key):
        instance.add_dynamic_partitions(SCENARIO_PARTITIONS_NAME, [key])
    return StoredScenario(scenario, _plan(data))


def register_scenario(paths: StatePaths, instance: dg.DagsterInstance, scenario: Scenario) -> str:
    """`register_stored` for callers that need only the key."""
    return register_stored(paths, instance, scenario).key


_DEFINITION_FIELDS = {"world_id": str, "arm": str, "policy": str, "t_prime": "day", "t": "day",
                      "agent_id": str, "saas_profile": str, "model_settings": dict}
_OPTIONAL_FIELDS = ("agent_id", "saas_profile", "model_settings")


def _definition_problem(data: Any) -> str | None:
    """What is wrong with a stored definition's fields (None: each has its type), so that a hand-edited or
    damaged file is refused naming the field instead of failing somewhere inside."""
    if not isinstance(data, dict):
        return f"the definition is a JSON {type(data).__name__}, not an object"
    for name, kind in _DEFINITION_FIELDS.items():
        if name not in data or (name == "model_settings" and data[name] is None):
            if name in _OPTIONAL_FIELDS:
                continue
            return f"field {name} is missing"
        value = data[name]
        if kind == "day":
            try:
                typed_day(value)
            except ValueError as e:
                return f"field {name}: {e}"
        elif not isinstance(value, kind):  # type: ignore[arg-type]
            return f"field {name} is not a {getattr(kind, '__name__', kind)} (got {value!r})"
    return None


def _definition(paths: StatePaths, key: str, data: dict[str, Any]) -> Scenario:
    """The scenario a file's data defines, refused naming the file when a field is wrong or it is another key's."""
    definition = data.get("scenario")
    problem = _definition_problem(definition)
    if problem is not None:
        raise ScenarioError(f"scenario file {paths.scenario_file(key)}: {problem}")
    assert isinstance(definition, dict)
    scenario = scenario_from_json(definition)
    if scenario.key != key:
        raise ScenarioError(f"scenario file {paths.scenario_file(key)} defines {scenario.key}, not {key}")
    return scenario


def _plan(data: dict[str, Any]) -> ScenarioPlan | None:
    plan = data.get("plan")
    return None if plan is None else ScenarioPlan.from_json(plan)


def read_scenario(paths: StatePaths, key: str) -> StoredScenario:
    """The scenario's definition and plan from one read of its file (what an evaluation needs of it)."""
    data = _read(paths, key)
    return StoredScenario(_definition(paths, key, data), _plan(data))


def load_scenario(paths: StatePaths, key: str) -> Scenario:
    return _definition(paths, key, _read(paths, key))


def stored_plan(paths: StatePaths, key: str) -> ScenarioPlan | None:
    return _plan(_read(paths, key))


def store_plan(paths: StatePaths, key: str, plan: ScenarioPlan) -> None:
    """Add the plan to the scenario's file; the caller holds `scenario_lock`."""
    data = _read(paths, key)
    data["plan"] = plan.to_json()
    _write(paths, key, data)


def stored_scenario_keys(paths: StatePaths) -> dict[str, str]:
    """{stored key: its world} of every scenario file whose name is a scenario key (either form)."""
    folder = paths.root / "scenarios"
    out = {}
    for path in sorted(folder.glob("*.json")) if folder.exists() else []:
        try:
            out[path.stem] = parse_scenario_key(path.stem).world_id
        except ScenarioError:
            continue  # not a scenario file (nothing of ours writes one)
    return out


def scenarios_of_world(paths: StatePaths, world_id: str) -> list[str]:
    return sorted(key for key, world in stored_scenario_keys(paths).items() if world == world_id)
