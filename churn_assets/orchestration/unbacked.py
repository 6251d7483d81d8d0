"""Partitions nothing backs: keys typed into the UI's "Add a partition" dialog (or left by a hand-edited state folder)
that name no registered world, no day of its calendar, or no defined scenario.

Dagster adds such a key to its list as typed; nothing in Dagster can refuse it at that moment. So they are refused
in two places, both removing the partition so it does not stay in the list:

- a run of the partition fails in its first step, in one line naming the command that registers a world (or
  defines a scenario), and removes it (`refusal`, through the running step's instance);
- the `unbacked_partitions` sensor, while `churnbench ui` runs, removes those it has seen for five minutes (a run
  launched on the key meanwhile fails naming the fix rather than on Dagster's "partition not found"; and
  `add_world` stores the config before it adds the partitions, so a world being registered is never unbacked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from churn_assets.freshness.scenario import ScenarioError, parse_scenario_key
from churn_assets.orchestration.partitions import (
    SCENARIO_PARTITIONS_NAME,
    WORLD_DAY_PARTITIONS_NAME,
    WORLD_PARTITIONS_NAME,
    PartitionKeyError,
    world_and_day,
)
from churn_assets.state import StatePaths, WorldNotFoundError, load_world_config
from churn_assets.world.config import WORLD_ID_RE

if TYPE_CHECKING:
    import dagster as dg

    from churn_assets.orchestration.refusal import StepRefusal

REGISTER_WORLD = ("register a world with `churnbench worlds add [--seed N] [--days N] [--set section.key=value]`, "
                  "which adds its partitions (`churnbench worlds list` lists them)")
DEFINE_SCENARIO = ("define a scenario with `churnbench run --world W --arm A --t-prime D --t D` or a sweep, which "
                   "add its partition")


@dataclass(frozen=True)
class Unbacked:
    partitions: str  # the partitions definition's name
    key: str
    why: str

    def line(self) -> str:
        hint = DEFINE_SCENARIO if self.partitions == SCENARIO_PARTITIONS_NAME else REGISTER_WORLD
        return f"partition {self.key!r} of `{self.partitions}`: {self.why}; {hint}"


def world_problem(paths: StatePaths, world_id: str) -> str | None:
    """Why no world backs `world_id` (None: a stored config does)."""
    if not WORLD_ID_RE.match(world_id):
        return f"{world_id!r} is not a world id (<name>-s<seed>-<hash6>)"
    if not paths.world_config_file(world_id).exists():
        return f"world {world_id} is not registered in this state folder (it has no stored config)"
    try:
        load_world_config(paths, world_id)
    except WorldNotFoundError as e:
        return str(e)
    return None


def world_day_problem(paths: StatePaths, key: str) -> str | None:
    try:
        world_id, day = world_and_day(key)
    except PartitionKeyError as e:
        return str(e)
    problem = world_problem(paths, world_id)
    if problem is not None:
        return problem
    config = load_world_config(paths, world_id)
    if not config.start <= day <= config.end:
        return f"{day} is outside the calendar of world {world_id} ({config.start}..{config.end})"
    return None


def scenario_problem(paths: StatePaths, key: str) -> str | None:
    try:
        parts = parse_scenario_key(key)
    except ScenarioError as e:
        return str(e)
    if parts.old_form:
        return None  # `churnbench migrate` renames these: not ours to remove
    problem = world_problem(paths, parts.world_id)
    if problem is not None:
        return problem
    if not paths.scenario_file(key).exists():
        return f"scenario {key} has no stored definition"
    return None


def find_unbacked(paths: StatePaths, instance: dg.DagsterInstance) -> list[Unbacked]:
    """Every world, world-day and scenario partition that nothing backs."""
    found = []
    checks = ((WORLD_PARTITIONS_NAME, lambda k: world_problem(paths, k)),
              (WORLD_DAY_PARTITIONS_NAME, lambda k: world_day_problem(paths, k)),
              (SCENARIO_PARTITIONS_NAME, lambda k: scenario_problem(paths, k)))
    for name, problem_of in checks:
        for key in instance.get_dynamic_partitions(name):
            why = problem_of(key)
            if why is not None:
                found.append(Unbacked(name, key, why))
    return found


def remove(instance: dg.DagsterInstance, item: Unbacked) -> bool:
    if not instance.has_dynamic_partition(item.partitions, item.key):
        return False
    instance.delete_dynamic_partition(item.partitions, item.key)
    return True


def refusal(item: Unbacked) -> StepRefusal:
    """The step failure of a run of an unbacked partition; the partition is removed through the running step's
    instance (outside a step: only the failure)."""
    import dagster as dg

    from churn_assets.orchestration.refusal import StepRefusal

    line = item.line()
    try:
        instance = dg.OpExecutionContext.get().instance
        if remove(instance, item):
            line += f" (the partition was removed from the `{item.partitions}` list)"
    except dg.DagsterInvariantViolationError:  # not inside a step
        pass
    return StepRefusal(line)  # as `assets.common.step_failure` gives every refusal: the line alone, no stack

