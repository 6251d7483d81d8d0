"""A scenario its command has read, handed to the `eval_run` step that the command runs in its own process.

`run_scenario` reads the scenario's file once (registering it: the definition and the plan it kept) and holds the
world's use lock for the whole evaluation. Dagster calls the `eval_run` asset and its checks with a partition key
only, so on their own they would parse the key, read the file and take the lock again (issue 46: one cached
`churnbench run` read the file 7 times, parsed the key 9 times and took the lock 3 times). `materialize` hands them
what the command holds for the length of the in-process run, through a context variable: Dagster's in-process
executor runs each step in the caller's thread and context, and no argument of ours reaches an asset otherwise
(a resource bound in `Definitions` cannot be replaced for one run). A run launched from the UI or by the daemon
has nothing in hand: it reads the file once and takes the lock itself.

This is no cache: nothing is kept after the run, and a step finds only the scenario of its own partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from churn_assets.orchestration.scenarios import StoredScenario
from churn_assets.orchestration.world_registry import WorldInUse


@dataclass(frozen=True)
class ScenarioInHand:
    """A scenario's file as its command read it, and the use lock of its world, which the command holds while the
    steps it hands this to run."""

    stored: StoredScenario
    in_use: WorldInUse

    def __post_init__(self) -> None:
        if self.in_use.world_id != self.stored.scenario.world_id:
            raise ValueError(f"scenario {self.key} is of world {self.stored.scenario.world_id}, "
                             f"not of {self.in_use.world_id}, whose lock is held")

    @property
    def key(self) -> str:
        return self.stored.key


_IN_HAND: ContextVar[ScenarioInHand | None] = ContextVar("churnbench_scenario_in_hand", default=None)


@contextmanager
def handing(in_hand: ScenarioInHand | None) -> Iterator[None]:
    """Hand `in_hand` to the steps run inside the block (None: hand nothing)."""
    token = _IN_HAND.set(in_hand)
    try:
        yield
    finally:
        _IN_HAND.reset(token)


def in_hand(partition_key: str) -> ScenarioInHand | None:
    """What the command running this step holds for its partition, or None (launched from the UI or the daemon,
    or by a caller that read nothing)."""
    found = _IN_HAND.get()
    return found if found is not None and found.key == partition_key else None
