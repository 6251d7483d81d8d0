"""The file steps of `churnbench migrate` (format 1 -> 2) on a state folder on disk: results folders, summaries,
definition files and sweep records renamed to today's scenario keys, idempotently (the Dagster and catalog steps
are in tests/integration/test_state_migration.py, on a folder made by the code of before)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from churn_assets.arms.registry import define_scenario
from churn_assets.orchestration.state_migration import (
    MigrationError,
    MigrationReport,
    _move_results,
    _rename_in_sweep_records,
    _rename_scenario_files,
    _rewrite_summaries,
    renamed_key,
)
from churn_assets.state import StatePaths

WORLD = "default-s42-3f9a1c"
SCENARIO = define_scenario(WORLD, "grounding", "tiered", dt.date(2024, 3, 29), dt.date(2024, 4, 27))
OLD, NEW = SCENARIO.key_parts.legacy, SCENARIO.key
RUN = "0123456789abcdef__git-000000000000"


def _old_folder(root: Path) -> StatePaths:
    paths = StatePaths.resolve(root)
    run = paths.root / "results" / WORLD / OLD / RUN
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"scenario_key": OLD, "experiment_hash": "0123456789abcdef"}))
    (run / "tasks.jsonl").write_text("{}\n")
    (paths.root / "results" / "sweeps" / "s1").mkdir(parents=True)  # a sweep report folder: no scenario key
    paths.scenario_file(OLD).parent.mkdir(parents=True)
    paths.scenario_file(OLD).write_text(json.dumps({"scenario": SCENARIO.to_json()}))
    (paths.root / "sweeps").mkdir()
    (paths.root / "sweeps" / "s1.json").write_text(json.dumps({"sweep_id": "s1", "outcomes": {
        OLD: {"status": "done", "scenario_key": OLD, "results": str(run)},
        "not-a-key": {"status": "failed"}}}))
    return paths


def _migrate_files(paths: StatePaths) -> MigrationReport:
    report = MigrationReport(paths.root, 1)
    _move_results(paths, report)
    _rewrite_summaries(paths, report)
    _rename_scenario_files(paths, report)
    _rename_in_sweep_records(paths, report)
    return report


def test_renamed_key() -> None:
    assert renamed_key(OLD) == NEW
    assert renamed_key(NEW) is None and renamed_key("sweeps") is None


def test_file_steps_rename_every_old_key_and_a_second_pass_changes_nothing(tmp_path: Path) -> None:
    paths = _old_folder(tmp_path)
    report = _migrate_files(paths)
    assert (report.results_folders, report.summaries, report.scenario_files, report.sweep_records) == (1, 1, 1, 1)
    run = paths.root / "results" / WORLD / NEW / RUN
    assert not (paths.root / "results" / WORLD / OLD).exists() and (run / "tasks.jsonl").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary == {"scenario_key": NEW, "experiment_hash": "0123456789abcdef"}
    assert paths.scenario_file(NEW).exists() and not paths.scenario_file(OLD).exists()
    assert (paths.root / "results" / "sweeps" / "s1").is_dir()
    outcomes = json.loads((paths.root / "sweeps" / "s1.json").read_text())["outcomes"]
    assert set(outcomes) == {NEW, "not-a-key"}
    assert outcomes[NEW] == {"status": "done", "scenario_key": NEW, "results": str(run)}

    again = _migrate_files(paths)
    assert (again.results_folders, again.summaries, again.scenario_files, again.sweep_records) == (0, 0, 0, 0)


def test_a_migration_cut_short_is_finished_and_a_run_under_both_keys_is_refused(tmp_path: Path) -> None:
    paths = _old_folder(tmp_path)
    # Cut short after moving the folder, before the summary: the next pass rewrites the summary it finds.
    _move_results(paths, MigrationReport(paths.root, 1))
    assert _migrate_files(paths).summaries == 1
    # The same run folder under the old key and the new one: never merged silently.
    clash = paths.root / "results" / WORLD / OLD / RUN
    clash.mkdir(parents=True)
    with pytest.raises(MigrationError, match="exists under the new key too"):
        _move_results(paths, MigrationReport(paths.root, 1))
