"""The code location loads; partitions, calendar and state paths are what docs/rules.md says ("Calendar",
"Partitions", "State folder"); the ledger asset and its check work on an ephemeral instance (no services needed)."""

from __future__ import annotations

import datetime as dt
import json
import warnings
from pathlib import Path

import dagster as dg
import pytest
import yaml

from churn_assets.deployment import Calendar, DeploymentConfigError, deployment, parse_deployment
from churn_assets.orchestration.assets.ledger import ledger, ledger_hash_chain
from churn_assets.orchestration.definitions import build_defs, defs
from churn_assets.orchestration.partitions import (
    WORLD_PARTITIONS_NAME,
    is_world_keyed,
    scenario_partitions,
    world_and_day,
    world_day_key,
    world_day_partitions,
    world_partitions,
)
from churn_assets.orchestration.resources import StateResource
from churn_assets.orchestration.world_registry import WorldNotFoundError, load_world_config, write_world_config
from churn_assets.services import ServiceUrls, dagster_yaml_text
from churn_assets.state import STATE_DIR_ENV, StateError, StatePaths, sql_identifier, validate_world_id
from churn_assets.world.config import load_config


def test_definitions_are_loadable() -> None:
    dg.Definitions.validate_loadable(defs)
    dg.Definitions.validate_loadable(build_defs("/tmp/somewhere"))


def test_ledger_is_partitioned_by_world_and_checked() -> None:
    specs = {s.key: s for s in defs.resolve_all_asset_specs()}
    assert specs[dg.AssetKey("ledger")].partitions_def == world_partitions
    graph = defs.resolve_asset_graph()
    assert ledger_hash_chain.check_key in graph.get_check_keys_for_assets({dg.AssetKey("ledger")})
    assert world_partitions.name == WORLD_PARTITIONS_NAME == "world"


def test_the_deployment_calendar_comes_from_deployment_config() -> None:
    cal = deployment().calendar
    assert (cal.start, cal.days) == (dt.date(2024, 1, 1), 180)
    assert (cal.end, cal.end_exclusive) == (dt.date(2024, 6, 28), dt.date(2024, 6, 29))


def test_world_day_keys_keep_the_multi_partition_key_string_of_before() -> None:
    """Materializations recorded under the world x day multi-partitions of before keep matching: the key is
    Dagster's own string form of that `MultiPartitionKey` (dimension values joined by "|" in name order)."""
    key = world_day_key("default-s42-3f9a1c", dt.date(2024, 4, 27))
    assert key == "2024-04-27|default-s42-3f9a1c"
    assert key == str(dg.MultiPartitionKey({"world": "default-s42-3f9a1c", "day": "2024-04-27"}))
    assert world_and_day(key) == ("default-s42-3f9a1c", dt.date(2024, 4, 27))
    assert world_day_key("default-s42-3f9a1c", "2024-04-27") == key
    assert isinstance(world_day_partitions, dg.DynamicPartitionsDefinition) and world_day_partitions.name == "world_day"
    assert is_world_keyed(world_partitions) and is_world_keyed(world_day_partitions)
    assert not is_world_keyed(scenario_partitions) and not is_world_keyed(None)


def test_a_world_must_fit_the_calendar() -> None:
    cal = Calendar(start=dt.date(2024, 1, 1), days=180)
    assert cal.fits(load_config(days=30)) and cal.fits(load_config(days=180))
    with pytest.raises(DeploymentConfigError, match=r"deployment calendar is 2024-01-01\.\.2024-06-28"):
        cal.require_fit(load_config(days=181))
    with pytest.raises(DeploymentConfigError, match=r"calendar\.days"):
        parse_deployment({"calendar": {"start": "2024-01-01", "days": 0}}, "test")


def test_state_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "a"))
    a = StatePaths.resolve()
    b = StatePaths.resolve(tmp_path / "b")
    assert a.root == (tmp_path / "a").resolve()
    assert a.dagster_home == a.root / "dagster"
    # The embedded Postgres data lives outside the state folder, named by its path: never shared.
    assert a.pg_home != b.pg_home and a.pg_home.name.startswith("churnbench-pg-")
    assert a.root not in a.pg_home.parents
    monkeypatch.delenv(STATE_DIR_ENV)
    monkeypatch.chdir(tmp_path)
    assert StatePaths.resolve().root == tmp_path.resolve() / ".churnbench"


def test_world_ids_are_checked_before_they_become_paths() -> None:
    assert validate_world_id("default-s42-3f9a1c") == "default-s42-3f9a1c"
    assert sql_identifier("default-s42-3f9a1c") == "default_s42_3f9a1c"
    for bad in ("../etc", "Default-s42-3f9a1c", "default-s42-3f9a1", "default-42-3f9a1c", ""):
        with pytest.raises(StateError):
            validate_world_id(bad)


def test_dagster_yaml_uses_psycopg2_and_postgres_storage(tmp_path: Path) -> None:
    urls = ServiceUrls(postgres_server="postgresql://postgres@/postgres?host=/x",
                       warehouse="postgresql://postgres@/churnbench?host=/x",
                       dagster_storage="postgresql://postgres@/dagster?host=/x", mongodb="mongodb://h:1/")
    text = dagster_yaml_text(StatePaths.resolve(tmp_path), urls)
    assert 'postgres_url: "postgresql+psycopg2://postgres@/dagster?host=/x"' in text
    # an LLM run's line per answer (`evaluation/answer_lines.py`) is captured into the run's event log
    assert yaml.safe_load(text)["python_logs"] == {"managed_python_loggers": ["churn_assets.evaluation.answer_lines"]}


def _materialize(world_id: str, state: Path, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.materialize([ledger, ledger_hash_chain], partition_key=world_id, instance=instance,
                              resources={"state": StateResource(state_dir=str(state))}, raise_on_error=False)


def test_ledger_asset_and_check_on_an_ephemeral_instance(tmp_path: Path) -> None:
    paths = StatePaths.resolve(tmp_path)
    config = load_config(days=3)
    write_world_config(paths, config)
    assert load_world_config(paths, config.world_id).data == config.data
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(WORLD_PARTITIONS_NAME, [config.world_id])

    result = _materialize(config.world_id, tmp_path, instance)
    assert result.success
    [mat] = result.asset_materializations_for_node("ledger")
    md = {k: v.value for k, v in mat.metadata.items()}
    manifest = json.loads((paths.ledger_dir(config.world_id) / "manifest.json").read_text())
    assert md["dagster/row_count"] == manifest["count"] == sum(md["events_per_kind"].values())
    assert md["head_hash"] == manifest["head_hash"]
    assert (md["first_day"], md["last_day"]) == ("2024-01-01", "2024-01-03")
    assert md["world_config"] == config.data
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.passed and evaluation.partition == config.world_id


def test_ledger_of_a_world_without_stored_config_fails_clearly(tmp_path: Path) -> None:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(WORLD_PARTITIONS_NAME, ["ghost-s1-abcdef"])
    result = _materialize("ghost-s1-abcdef", tmp_path, instance)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert ("world ghost-s1-abcdef is not registered in this state folder (it has no stored config)"
            in failure.step_failure_data.user_failure_data.description)
    with pytest.raises(WorldNotFoundError):
        load_world_config(StatePaths.resolve(tmp_path), "ghost-s1-abcdef")
