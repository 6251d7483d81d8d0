"""Worlds as Dagster partitions: add from the CLI, materialize in process, check the chain, remove
every artefact (`worlds rm`, `gc`), refuse unknown keys and worlds outside the calendar.

Later issues that create a per-world artefact: add it to `WORLD_ARTEFACTS` in
`churn_assets/orchestration/world_registry.py` and make `populate_world` below create it; the removal tests then
check it too (they require every registered artefact kind to exist before removal).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import dagster as dg
import pytest
from click.testing import CliRunner, Result

from churn_assets.cli import main
from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.fabric.mongo import world_databases
from churn_assets.orchestration.assets.ledger import ledger_hash_chain
from churn_assets.orchestration.materialize import MaterializationError, Session, materialize, run_checks
from churn_assets.orchestration.partitions import (
    WORLD_PARTITIONS_NAME,
    PartitionKeyError,
    world_day_key,
    world_day_partitions,
)
from churn_assets.orchestration.world_registry import (
    WORLD_ARTEFACTS,
    WorldNotFoundError,
    add_world,
    is_registered,
    load_world_config,
    remove_world,
    world_artefacts,
    world_day_partition_keys,
)
from churn_assets.services import mongo_client
from churn_assets.world.config import load_config
from churn_assets.world.ledger import LEDGER_FILE, MANIFEST_FILE

pytestmark = pytest.mark.integration

DAYS = 30  # (docs/rules.md, "Test budget")


def cli(*args: str) -> Result:
    """The CLI in process (CHURNBENCH_STATE_DIR points at the session's state folder)."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def populate_world(session: Session, defs: dg.Definitions, world_id: str) -> None:
    """Create every per-world artefact that exists at this stage (extended by later issues)."""
    materialize(session, defs, ["ledger"], [world_id])
    materialize(session, defs, ["warehouse_truth"], [world_id])  # issue 5: the world's Postgres schemas
    materialize(session, defs, ["contract_documents"], [world_day_key(world_id, "2024-01-02")])  # issue 7
    materialize(session, defs, ["operational_store"], [world_day_key(world_id, "2024-01-02")])  # issue 6
    materialize(session, defs, ["vector_index"], [world_day_key(world_id, "2024-01-02")])  # issue 8
    _evaluation_artefacts(session, world_id)  # issue 13
    _arm_role(session, world_id)  # issue 22
    _legacy_lock_files(session, world_id)  # issue 20's lock files, as a churnbench of before decision 332 left them


def _legacy_lock_files(session: Session, world_id: str) -> None:
    """The world's lock files of before decision 332 (its locks are Postgres advisory locks now): `worlds rm`
    removes what an older churnbench left."""
    folder = session.paths.world_locks_dir(world_id) / "inputs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ledger.lock").touch()


def _arm_role(session: Session, world_id: str) -> None:
    """The world's read-only Postgres role, as a dbt build or an evaluation makes it."""
    from churn_assets.fabric.roles import arm_secret, prepare_arm

    prepare_arm(session.urls.warehouse, world_id, arm_secret(session.paths.arm_secret_file))


def _evaluation_artefacts(session: Session, world_id: str) -> None:
    """A stored scenario (and its `eval_run` partition) and a finished results folder, written through the
    real code paths; a whole evaluation run is tested in test_eval_run.py."""
    import datetime as dt

    from churn_assets.arms.registry import define_scenario
    from churn_assets.evaluation.results import ResultsStore
    from churn_assets.evaluation.runner import RunSpec
    from churn_assets.orchestration.scenarios import register_scenario

    scenario = define_scenario(world_id, "naive", "tiered", dt.date(2024, 1, 2), dt.date(2024, 1, 3))
    register_scenario(session.paths, session.instance, scenario)
    spec = RunSpec(scenario, "h", "tasks")
    key = spec.key("git-test")
    store = ResultsStore(session.paths.root / "results")
    catalog = RunCatalog(session.urls.warehouse)  # the results catalog row, as `evaluate` writes it
    catalog.start(scenario, key, store.run_dir(key))
    writer = store.open_run(key)
    writer.append({"task_id": "t0", "verdict": "correct"})
    writer.finish(["t0"], {"tasks": 1}, {})
    catalog.complete(scenario, key, store.run_dir(key), {"tasks": 1, "verdicts": {"correct": 1}}, {})


def check_passed(instance: dg.DagsterInstance, world_id: str) -> bool | None:
    """The latest `ledger_hash_chain` result for `world_id` (None when it never ran)."""
    key = dg.AssetCheckKey(dg.AssetKey("ledger"), "ledger_hash_chain")
    for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=50):
        if record.partition == world_id and record.event is not None and record.event.dagster_event:
            return bool(record.event.dagster_event.event_specific_data.passed)
    return None


@pytest.fixture
def scratch_world(session: Session) -> Iterator[str]:
    """A registered 30-day world of its own (seed 202), removed again afterwards."""
    config = load_config(days=DAYS, seed=202)
    add_world(session.paths, session.instance, config)
    yield config.world_id
    if is_registered(session.instance, config.world_id) or world_artefacts(
            session.paths, session.instance, config.world_id):
        remove_world(session.paths, session.instance, config.world_id)


# ---------------------------------------------------------------------------------------------------


def test_cli_add_registers_a_partition_and_materializes(session: Session) -> None:
    config = load_config(days=DAYS, seed=101)
    world_id = config.world_id
    result = cli("worlds", "add", "--seed", "101", "--days", str(DAYS), "--materialize")
    assert result.exit_code == 0, result.output
    assert f"registered world {world_id}" in result.output
    assert f"materialized ledger [{world_id}]" in result.output

    instance = session.instance
    assert world_id in instance.get_dynamic_partitions(WORLD_PARTITIONS_NAME)
    assert world_id in instance.get_materialized_partitions(dg.AssetKey("ledger"))
    assert load_world_config(session.paths, world_id).data == config.data

    records = instance.fetch_materializations(dg.AssetKey("ledger"), limit=100).records
    mat = next(r.asset_materialization for r in records if r.partition_key == world_id)
    assert mat is not None
    md = {k: v.value for k, v in mat.metadata.items()}
    manifest = json.loads((session.paths.ledger_dir(world_id) / MANIFEST_FILE).read_text())
    assert md["dagster/row_count"] == manifest["count"] == sum(md["events_per_kind"].values())
    assert md["events_per_kind"] == manifest["counts_per_kind"]
    assert md["head_hash"] == manifest["head_hash"]
    assert (md["first_day"], md["last_day"]) == ("2024-01-01", "2024-01-30")
    assert md["world_config"] == config.data and md["world_config_hash"] == config.config_hash
    assert check_passed(instance, world_id) is True

    listing = cli("worlds", "list")
    line = next(x for x in listing.output.splitlines() if x.startswith(world_id))
    assert f"{manifest['count']:,} events" in line and "registered" in line

    # issue 20: the world's day partitions are exactly its 30 days (not the deployment calendar's 180)
    days = world_day_partition_keys(instance, world_id)[world_id]
    assert days == [world_day_key(world_id, f"2024-01-{d:02d}") for d in range(1, DAYS + 1)]
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        assert set(days) <= set(world_day_partitions.get_partition_keys())
        assert not world_day_partitions.has_partition_key(world_day_key(world_id, "2024-01-31"))

    again = cli("worlds", "add", "--seed", "101", "--days", str(DAYS))
    assert again.exit_code == 0 and "already registered" in again.output
    assert world_day_partition_keys(instance, world_id)[world_id] == days  # nothing added twice
    remove_world(session.paths, instance, world_id)
    assert world_day_partition_keys(instance, world_id) == {}


def test_small_world_fixture_is_registered_and_materialized(small_world: str, session: Session) -> None:
    assert is_registered(session.instance, small_world)
    assert (session.paths.ledger_dir(small_world) / LEDGER_FILE).exists()
    assert check_passed(session.instance, small_world) is True


def test_world_outside_the_calendar_is_refused(session: Session) -> None:
    result = cli("worlds", "add", "--days", "181", "--seed", "5")
    assert result.exit_code == 1
    assert "deployment calendar is 2024-01-01..2024-06-28" in result.stderr
    assert not is_registered(session.instance, load_config(days=181, seed=5).world_id)


def test_unknown_world_key_fails_cleanly(session: Session, session_defs: dg.Definitions) -> None:
    # Not a partition at all: refused before any run, as one line.
    result = cli("worlds", "materialize", "nope-s1-abcdef")
    assert result.exit_code == 1
    assert result.stderr.strip() == ("churnbench: error: world nope-s1-abcdef is not registered in this "
                                     "state folder; register it with `churnbench worlds add` (see "
                                     "`churnbench worlds list`)")
    # A partition without a stored config (e.g. added by hand in the UI): the run fails saying so.
    ghost = "ghost-s1-abcdef"
    session.instance.add_dynamic_partitions(WORLD_PARTITIONS_NAME, [ghost])
    try:
        with pytest.raises(MaterializationError, match=f"world {ghost} is not registered in this state folder"):
            materialize(session, session_defs, ["ledger"], [ghost])
    finally:
        with contextlib.suppress(WorldNotFoundError):  # the failed run may leave nothing of the ghost to remove
            remove_world(session.paths, session.instance, ghost)
    bad = cli("worlds", "materialize", "not a world id")
    assert bad.exit_code == 1 and "is not a world id" in bad.stderr


def test_world_day_keys_that_are_no_real_day_are_refused(session: Session, session_defs: dg.Definitions,
                                                         small_world: str) -> None:
    """issue 20: day 31 of a 30-day world is no partition; a key that does not parse is refused in one line."""
    with pytest.raises(MaterializationError, match=f"world {small_world} has no day 2024-01-31"):
        materialize(session, session_defs, ["task_set"], [world_day_key(small_world, "2024-01-31")])
    with pytest.raises(PartitionKeyError, match="is not a world-day partition key"):
        materialize(session, session_defs, ["task_set"], [f"{small_world}|2024-01-05"])


def test_hash_chain_check_catches_tampering(session: Session, session_defs: dg.Definitions,
                                            scratch_world: str) -> None:
    materialize(session, session_defs, ["ledger"], [scratch_world])
    ledger_file = session.paths.ledger_dir(scratch_world) / LEDGER_FILE
    lines = ledger_file.read_text().splitlines(keepends=True)
    lines[9] = lines[9].replace('"seq":9', '"seq":9 ', 1)  # one byte, line 10
    ledger_file.write_text("".join(lines))

    [evaluation] = run_checks(session, session_defs, [ledger_hash_chain.check_key], scratch_world)
    assert not evaluation.passed
    assert "line 10" in str(evaluation.metadata["error"].value)
    assert check_passed(session.instance, scratch_world) is False
    verify = cli("worlds", "verify", scratch_world)
    assert verify.exit_code == 1 and "ledger_hash_chain [" in verify.stderr
    materialize(session, session_defs, ["ledger"], [scratch_world])  # regenerates identical bytes
    assert check_passed(session.instance, scratch_world) is True


def test_worlds_rm_leaves_nothing_behind(session: Session, session_defs: dg.Definitions,
                                         small_world: str, scratch_world: str) -> None:
    populate_world(session, session_defs, scratch_world)
    kept_before = world_artefacts(session.paths, session.instance, small_world)
    # Every kind of artefact this stage knows exists for the world (populate_world creates them all).
    assert set(world_artefacts(session.paths, session.instance, scratch_world)) == {
        a.name for a in WORLD_ARTEFACTS}

    result = cli("worlds", "rm", scratch_world)
    assert result.exit_code == 0, result.output
    assert "Dagster partition" in result.output and "ledger files" in result.output
    assert "Dagster world-day partitions" in result.output  # issue 20
    assert world_day_partition_keys(session.instance, scratch_world) == {}
    # issue 6: the world's operational-store databases (<world>_<yyyymmdd>) are dropped
    assert "operational store" in result.output
    mongo = mongo_client(session.urls.mongodb)
    try:
        assert world_databases(mongo, scratch_world) == {}
    finally:
        mongo.close()

    assert world_artefacts(session.paths, session.instance, scratch_world) == []
    # issue 13: its results catalog rows and results files are gone
    assert "results catalog rows" in result.output and "evaluation results" in result.output
    assert RunCatalog(session.urls.warehouse).runs(scratch_world) == []
    assert not session.paths.results_dir(scratch_world).exists()
    assert not is_registered(session.instance, scratch_world)
    assert not session.paths.world_dir(scratch_world).exists()
    assert scratch_world not in cli("worlds", "list").output
    # Nothing of any other world was touched.
    assert world_artefacts(session.paths, session.instance, small_world) == kept_before
    assert is_registered(session.instance, small_world)

    again = cli("worlds", "rm", scratch_world)
    assert again.exit_code == 1 and f"no world {scratch_world}" in again.stderr


def test_gc_removes_artefacts_of_unregistered_worlds(session: Session, session_defs: dg.Definitions,
                                                     small_world: str, scratch_world: str) -> None:
    populate_world(session, session_defs, scratch_world)
    kept_before = world_artefacts(session.paths, session.instance, small_world)
    session.instance.delete_dynamic_partition(WORLD_PARTITIONS_NAME, scratch_world)  # as the UI can
    listing = cli("worlds", "list").output
    assert "not registered (gc removes it)" in next(x for x in listing.splitlines() if scratch_world in x)

    result = cli("gc")
    assert result.exit_code == 0, result.output
    assert f"removed unregistered world {scratch_world}" in result.output
    assert world_artefacts(session.paths, session.instance, scratch_world) == []
    assert world_artefacts(session.paths, session.instance, small_world) == kept_before
    assert cli("gc").output.strip() == "nothing to collect"
