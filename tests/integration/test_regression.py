"""The regression gate against the real services, in process (as `churnbench regression` runs it), on a small
regression spec (one 30-day world, grounding tiered and off at T = 2024-01-29, T' = T - 27, 20 tasks) and a
baseline of its own: the unchanged configuration passes and reuses every cell; the registry's `assignments` TTL
raised from 1 to 3 days fails the gate naming the figures that moved; a registry edit that moves no figure fails
on the hash alone; the served-age checks on `eval_run` pass for the tiered cell and are skipped for the off cell.

The world is `test_figures_unchanged.py`'s (same config, T' and task count), so a session that ran it reuses
its T' inputs (documents, vector index, staged caches of T')."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
import yaml
from few_tasks import use_task_count

from churn_assets.arms.registry import TIERED_ARM, UNTIERED_ARM
from churn_assets.grounding.registry import REGISTRY_FILE_ENV
from churn_assets.orchestration.materialize import Session
from churn_assets.orchestration.regression import run_regression
from churn_assets.orchestration.sweep_records import scenario_key_of
from churn_assets.sweeps.presets import preset_spec
from churn_assets.sweeps.regression import BASELINE_ENV
from churn_assets.sweeps.spec import WorldRecipe

pytestmark = pytest.mark.integration

TASKS = 20
TIERED = "seed 42 | grounding | tiered | gap 27"
REGISTRY_YAML = Path(__file__).resolve().parents[2] / "churn_assets" / "grounding" / "registry.yaml"


@pytest.fixture
def few_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    use_task_count(monkeypatch, TASKS)


def _registry(tmp_path: Path, name: str, **ttls: int) -> Path:
    data = yaml.safe_load(REGISTRY_YAML.read_text())
    for entity_class, ttl in ttls.items():
        data["entity_classes"][entity_class]["ttl_days"] = ttl
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _check_status(instance: dg.DagsterInstance, asset: str, check: str, partition: str) -> str:
    """The latest execution's status of a check on a partition (PLANNED and never evaluated: skipped)."""
    from dagster._core.event_api import PartitionKeyFilter

    [record] = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(dg.AssetKey(asset), check), limit=1, partition_filter=PartitionKeyFilter(key=partition))
    return record.status.value


def test_the_gate_passes_unchanged_and_names_what_a_degraded_registry_moved(
        session: Session, session_defs: dg.Definitions, few_tasks: None, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = dataclasses.replace(preset_spec("regression"), worlds=(WorldRecipe(42, name="figures", days=30),),
                               arms=(TIERED_ARM, UNTIERED_ARM))
    monkeypatch.setenv(BASELINE_ENV, str(tmp_path / "regression.json"))
    lines: list[str] = []
    made = run_regression(session, session_defs, spec=spec, update_baseline=True, echo=lines.append)
    assert made.result.passed, made.result.lines()
    assert set(made.result.to_json()) >= {"moved", "hash_changes"} and made.result.cells == 2
    assert any("[2/2]" in line for line in lines)  # progress per cell

    unchanged = run_regression(session, session_defs, spec=spec, echo=lines.append)
    assert unchanged.result.passed and all(o["reused"] for o in unchanged.record.outcomes.values())
    sweep_id = unchanged.record.sweep_id
    assert _check_status(session.instance, "regression_report", "regression_gate", sweep_id) == "SUCCEEDED"
    # The regression's report has a partition set of its own (issue 46): `sweep_report` does not list this sweep
    # as "Missing", and `regression_report` lists no ordinary sweep.
    from churn_assets.orchestration.partitions import REGRESSION_PARTITIONS_NAME, SWEEP_PARTITIONS_NAME

    assert sweep_id in session.instance.get_dynamic_partitions(REGRESSION_PARTITIONS_NAME)
    assert sweep_id not in session.instance.get_dynamic_partitions(SWEEP_PARTITIONS_NAME)
    tiered_key = scenario_key_of(next(c for c in unchanged.record.cells if c.arm == TIERED_ARM))
    off_key = scenario_key_of(next(c for c in unchanged.record.cells if c.arm == UNTIERED_ARM))
    for entity_class in ("assignments", "prices", "contract_terms"):  # observed served ages within the tiers
        check = f"served_age_within_ttl_{entity_class}"
        assert _check_status(session.instance, "eval_run", check, tiered_key) == "SUCCEEDED"
        assert _check_status(session.instance, "eval_run", check, off_key) == "PLANNED"  # off: no TTL, skipped

    # The hot class re-tiered 1 -> 3 days: the tiered cell serves older assignments, so its counts move. It runs
    # the next night: its report goes to that night's folder, and the passing night's stays as it was (issue 35).
    import churn_assets.orchestration.sweep_records as sweep_records

    passing_night = unchanged.report_dir
    assert passing_night.parent.name == "nights" and (passing_night / "regression.md").is_file()
    passed_gate = (passing_night / "regression_gate.json").read_text()
    next_night = dt.date.fromisoformat(passing_night.name) + dt.timedelta(days=1)
    import churn_assets.orchestration.regression as orchestration_regression

    for module in (sweep_records, orchestration_regression):  # where it is defined and where the run reads it
        monkeypatch.setattr(module, "regression_night", lambda now=None: next_night)
    monkeypatch.setenv(REGISTRY_FILE_ENV, str(_registry(tmp_path, "degraded", assignments=3)))
    degraded = run_regression(session, session_defs, spec=spec, echo=lines.append)
    assert degraded.report_dir == passing_night.with_name(next_night.isoformat())
    assert json.loads((degraded.report_dir / "regression_gate.json").read_text())["passed"] is False
    assert (passing_night / "regression_gate.json").read_text() == passed_gate  # not overwritten
    assert not degraded.result.passed
    moved = {(m.cell, m.figure) for m in degraded.result.moved}
    assert (TIERED, "stale_answers") in moved and (TIERED, "accuracy") in moved, degraded.result.lines()
    assert all(cell == TIERED for cell, _ in moved)  # the off cell serves T' whatever the TTL
    assert [h.split()[0] for h in degraded.result.hash_changes] == ["registry"]
    assert _check_status(session.instance, "regression_report", "regression_gate", sweep_id) == "FAILED"

    # An edit that moves nothing on this world (vendor_dims 30 -> 45 days: no refresh in 28 days either way).
    monkeypatch.setenv(REGISTRY_FILE_ENV, str(_registry(tmp_path, "retiered", vendor_dims=45)))
    edited = run_regression(session, session_defs, spec=spec, echo=lines.append)
    assert not edited.result.passed and edited.result.moved == [], edited.result.lines()
    assert [h.split()[0] for h in edited.result.hash_changes] == ["registry"]

    monkeypatch.delenv(REGISTRY_FILE_ENV)
    assert run_regression(session, session_defs, spec=spec, echo=lines.append).result.passed


def test_the_cli_refuses_a_missing_baseline_before_running(state_dir: Path, churnbench_exe: str,
                                                           cli_env: Callable[..., dict[str, str]],
                                                           services: object, tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    done = subprocess.run([churnbench_exe, "regression", "--baseline", str(missing)], env=cli_env(state_dir),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert f"regression baseline {missing}: file not found" in done.stderr
    assert "Traceback" not in done.stderr
