"""World-day partitions hold only real (world, day) pairs (issue 20), and a partition key typed by hand that
does not parse fails its materialization in one line, on an ephemeral instance (no services needed)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest

from churn_assets.orchestration.partitions import (
    SCENARIO_PARTITIONS_NAME,
    WORLD_DAY_PARTITIONS_NAME,
    PartitionKeyError,
    world_and_day,
    world_day_key,
    world_day_partitions,
)
from churn_assets.orchestration.resources import StateResource
from churn_assets.orchestration.world_registry import add_world
from churn_assets.state import StatePaths
from churn_assets.world.config import load_config


@pytest.mark.parametrize(("key", "problem"), [
    ("default-s42-3f9a1c", "no '|'"),
    ("2024-01-05", "no '|'"),
    ("2024-02-30|default-s42-3f9a1c", "'2024-02-30' is not a calendar day (February 2024 has 29 days)"),
    ("20240105|default-s42-3f9a1c", "'20240105' is not a day"),
    ("2024-01-05|Default", "'Default' is not a world id"),
    ("default-s42-3f9a1c|2024-01-05", "'2024-01-05' is not a world id"),
])
def test_a_malformed_world_day_key_is_refused_in_one_line(key: str, problem: str) -> None:
    with pytest.raises(PartitionKeyError) as err:
        world_and_day(key)
    message = str(err.value)
    assert "\n" not in message and problem in message
    assert f"{key!r} is not a world-day partition key" in message and "<YYYY-MM-DD>|<world id>" in message


def test_a_registered_world_has_exactly_its_own_days(tmp_path: Path) -> None:
    paths = StatePaths.resolve(tmp_path).ensure()
    instance = dg.DagsterInstance.ephemeral()
    thirty, ten = load_config(days=30), load_config(days=10, name="short")
    assert add_world(paths, instance, thirty) and add_world(paths, instance, ten)
    assert not add_world(paths, instance, thirty)  # idempotent: no day is added twice
    keys = world_day_partitions.get_partition_keys(dynamic_partitions_store=instance)
    assert len(keys) == 40 == len(set(keys))
    mine = [k for k in keys if world_and_day(k)[0] == thirty.world_id]
    assert mine == [world_day_key(thirty.world_id, dt.date(2024, 1, 1) + dt.timedelta(days=i)) for i in range(30)]
    assert world_day_key(thirty.world_id, "2024-01-31") not in keys  # day 31 of a 30-day world never exists
    # Days stay registered if the world partition was added first by an older churnbench: adding again fills them.
    instance.delete_dynamic_partition(WORLD_DAY_PARTITIONS_NAME, mine[3])
    add_world(paths, instance, thirty)
    assert mine[3] in instance.get_dynamic_partitions(WORLD_DAY_PARTITIONS_NAME)


def _failure(result: dg.ExecuteInProcessResult) -> str:
    [failure] = [e for e in result.all_events if e.is_step_failure]
    data = failure.step_failure_data
    assert data is not None and data.user_failure_data is not None, "not a dg.Failure: the user sees a traceback"
    return str(data.user_failure_data.description)


def test_a_hand_added_world_day_partition_that_is_no_real_day_fails_in_one_line(tmp_path: Path) -> None:
    from churn_assets.orchestration.assets.tasks import task_set

    paths = StatePaths.resolve(tmp_path).ensure()
    instance = dg.DagsterInstance.ephemeral()
    config = load_config(days=30)
    add_world(paths, instance, config)
    bad = {
        "2024-02-30|" + config.world_id: "'2024-02-30' is not a calendar day (February 2024 has 29 days)",
        "not a key": "is not a world-day partition key",
        world_day_key(config.world_id, "2024-03-01"): f"2024-03-01 is outside the calendar of world {config.world_id}",
        world_day_key("ghost-s1-abcdef", "2024-01-05"): "world ghost-s1-abcdef is not registered in this state folder",
    }
    instance.add_dynamic_partitions(WORLD_DAY_PARTITIONS_NAME, list(bad))  # as the UI's "add partition" dialog does
    for key, problem in bad.items():
        result = dg.materialize([task_set], partition_key=key, instance=instance, raise_on_error=False,
                                resources={"state": StateResource(state_dir=str(paths.root))})
        assert not result.success
        message = _failure(result)
        assert problem in message and "\n" not in message, message


def test_a_hand_added_scenario_partition_that_does_not_parse_fails_in_one_line(tmp_path: Path) -> None:
    from churn_assets.orchestration.assets.evaluation import eval_run

    paths = StatePaths.resolve(tmp_path).ensure()
    instance = dg.DagsterInstance.ephemeral()
    old = "default-s42-3f9a1c__grounding__tiered__tp20240329__t20240427__det__default"
    bad = {
        "grounding-at-d28": "'grounding-at-d28' is not a scenario key",
        "../../../etc/passwd": "is not a scenario key",
        old: "in the form before issue 20 (world first); this scenario's key is "
             "grounding__tiered__tp20240329__t20240427__det__default__default-s42-3f9a1c",
        # a scenario of a world this folder does not hold: the world is named first (the scenario's own check
        # would say it has no stored definition; it never gets there)
        "naive__tiered__tp20240101__t20240105__det__default__default-s42-3f9a1c":
            "world default-s42-3f9a1c is not registered in this state folder",
    }
    instance.add_dynamic_partitions(SCENARIO_PARTITIONS_NAME, list(bad))
    for key, problem in bad.items():
        result = dg.materialize([eval_run], partition_key=key, instance=instance, raise_on_error=False,
                                resources={"state": StateResource(state_dir=str(paths.root))})
        assert not result.success
        message = _failure(result)
        assert problem in message and "\n" not in message, message
    assert not (paths.root / "etc").exists()
