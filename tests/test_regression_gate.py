"""The regression gate on plain values (no runs): figures read from a sweep record, moved figures named with their
cell, thresholds from the baseline file, a hash change failing alone; the preset, the baseline file's errors,
the templates hash, the nightly schedule's tick and its deployment settings."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from churn_assets.sweeps.markdown import parse_table
from churn_assets.sweeps.presets import preset_spec
from churn_assets.sweeps.regression import (
    FIGURE_COLUMNS,
    BaselineError,
    GateResult,
    figures_of,
    gate,
    load_baseline,
    make_baseline,
    report_markdown,
    write_baseline,
)

CELL = {"world_id": "default-s42-1baecb", "world_label": "seed 42", "arm": "grounding", "policy": "tiered",
        "t_prime": "2024-01-02", "t": "2024-01-30"}
LABEL = "seed 42 | grounding | tiered | gap 28"
HASHES = {"world_configs": {"seed 42": "aa"}, "registry": "r1", "templates": "t1"}


def _record(stale: int = 7, accuracy: float = 0.9611, status: str = "done") -> dict[str, Any]:
    verdicts = {"correct": 173 - (stale - 7), "freshness_error": stale}
    return {"outcomes": {"k": {"status": status, "cell": CELL, "tasks": 180, "stale_answers": stale,
                               "exposure": stale, "accuracy": accuracy, "verdicts": verdicts}}}


def _baseline(**kw: Any) -> dict[str, Any]:
    return make_baseline(figures_of(_record()), HASHES, sweep_id="regression-x", spec={"preset": "regression"}, **kw)


def test_figures_are_read_per_cell_with_every_verdict() -> None:
    figures = figures_of(_record())
    assert list(figures) == [LABEL]
    f = figures[LABEL]
    assert (f["tasks"], f["stale_answers"], f["exposure"], f["accuracy"]) == (180, 7, 7, 0.9611)
    assert f["verdict/freshness_error"] == 7 and f["verdict/reasoning_error"] == 0  # absent verdicts count 0
    assert figures_of(_record(status="failed")) == {}


def test_the_unchanged_run_passes() -> None:
    result = gate(_baseline(), figures_of(_record()), HASHES)
    assert result.passed and result.lines() == []


def test_a_moved_figure_fails_and_is_named_with_its_cell() -> None:
    result = gate(_baseline(), figures_of(_record(stale=12, accuracy=0.93)), HASHES)
    assert not result.passed
    moved = {m.figure: (m.baseline, m.current) for m in result.moved}
    assert moved["stale_answers"] == (7, 12) and moved["exposure"] == (7, 12)
    assert moved["verdict/freshness_error"] == (7, 12) and moved["accuracy"] == (0.9611, 0.93)
    assert f"moved: {LABEL}: stale_answers 7 -> 12 (threshold 0)" in result.lines()
    assert result.hash_changes == []


def test_thresholds_come_from_the_baseline_file() -> None:
    loose = _baseline(thresholds={"counts": 5, "accuracy": 0.05})
    assert gate(loose, figures_of(_record(stale=12, accuracy=0.93)), HASHES).passed
    per_figure = _baseline(thresholds={"counts": 5, "accuracy": 0.05, "stale_answers": 0})
    [moved] = gate(per_figure, figures_of(_record(stale=12, accuracy=0.93)), HASHES).moved
    assert moved.figure == "stale_answers"


def test_a_hash_change_fails_without_any_figure_moving() -> None:
    result = gate(_baseline(), figures_of(_record()), {**HASHES, "registry": "r2"})
    assert not result.passed and result.moved == []
    assert result.hash_changes == ["registry r1 -> r2"]
    world = gate(_baseline(), figures_of(_record()), {**HASHES, "world_configs": {"seed 42": "bb"}})
    assert world.hash_changes == ["world_configs[seed 42] aa -> bb"]


def test_missing_and_new_cells_fail() -> None:
    result = gate(_baseline(), {}, HASHES)
    assert result.missing_cells == [LABEL] and not result.passed
    other = figures_of({"outcomes": {"k": {**_record()["outcomes"]["k"], "cell": {**CELL, "arm": "naive"}}}})
    assert gate(_baseline(), {**figures_of(_record()), **other}, HASHES).new_cells == [
        "seed 42 | naive | tiered | gap 28"]


def test_the_report_table_shows_every_figure_of_every_cell_under_its_header() -> None:
    """The cell labels hold `|` (they are the baseline's keys): rendered, parsed back, each row has one cell per
    header and every figure reads back as the value it had."""
    record = _record()
    other = {**CELL, "world_label": "seed 7", "arm": "naive"}
    record["outcomes"]["n"] = {"status": "done", "cell": other, "tasks": 180, "stale_answers": 0, "exposure": 12,
                               "accuracy": 0.5, "verdicts": {"correct": 90, "reasoning_error": 90}}
    figures = figures_of(record)
    markdown = report_markdown(gate(_baseline(), figures, HASHES), figures, HASHES, "baseline.json")
    rows = parse_table(markdown)
    assert [r["cell"] for r in rows] == [LABEL, "seed 7 | naive | tiered | gap 28"]
    assert tuple(rows[0]) == FIGURE_COLUMNS
    for row in rows:
        for figure, value in figures[row["cell"]].items():
            assert row[figure] == ("" if value is None else str(value)), (row["cell"], figure)
    assert rows[1]["stale_answers"] == "0" and rows[1]["exposure"] == "12" and rows[1]["accuracy"] == "0.5"


def test_a_gate_result_reads_back_from_its_file() -> None:
    result = gate(_baseline(), figures_of(_record(stale=9)), {**HASHES, "registry": "r2"})
    again = GateResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result and again.lines() == result.lines() and not again.passed


def test_baseline_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "b" / "regression.json"
    write_baseline(path, _baseline())
    assert load_baseline(path)["cells"][LABEL]["stale_answers"] == 7
    with pytest.raises(BaselineError, match="file not found"):
        load_baseline(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(BaselineError, match="not valid JSON"):
        load_baseline(tmp_path / "bad.json")
    (tmp_path / "old.json").write_text(json.dumps({"cells": {}}))
    with pytest.raises(BaselineError, match="format-1"):
        load_baseline(tmp_path / "old.json")


def test_the_committed_baseline_is_the_regression_presets() -> None:
    from churn_assets.sweeps.regression import COMMITTED_BASELINE, current_hashes

    baseline = load_baseline(COMMITTED_BASELINE)
    spec = preset_spec("regression")
    assert baseline["sweep_id"] == spec.sweep_id
    assert baseline["hashes"] == current_hashes(spec)  # a registry/template/world edit updates the baseline too
    assert len(baseline["cells"]) == 6


def test_the_regression_preset_is_small_and_deterministic() -> None:
    spec = preset_spec("regression")
    assert spec.agent == "deterministic" and len(spec.worlds) == 2 and len(spec.arms) == 3
    assert spec.gaps == (27,) and spec.t == dt.date(2024, 1, 29)


def test_the_templates_hash_covers_the_question_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import churn_assets.tasks.templates as templates

    before = templates.templates_hash()
    first = dataclasses.replace(templates.TEMPLATES[0], text=templates.TEMPLATES[0].text + " ")
    monkeypatch.setattr(templates, "TEMPLATES", (first, *templates.TEMPLATES[1:]))
    assert templates.templates_hash() != before


def test_the_nightly_schedule_requests_the_regression_job_once_per_day() -> None:
    from churn_assets.orchestration.schedules import nightly_regression

    assert nightly_regression.cron_schedule == "0 2 * * *" and nightly_regression.execution_timezone == "UTC"
    assert nightly_regression.job_name == "regression"
    assert nightly_regression.default_status == dg.DefaultScheduleStatus.STOPPED
    tick = dt.datetime(2026, 12, 2, 2, 0, tzinfo=dt.UTC)
    [request] = nightly_regression.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=tick)).run_requests
    assert request.run_key == "nightly-regression-2026-12-02"
    assert request.tags["churnbench/scheduled_for"] == "2026-12-02"
    assert request.run_config == {}


def test_the_schedule_time_comes_from_the_deployment_config() -> None:
    from churn_assets.deployment import DeploymentConfigError, parse_deployment

    calendar = {"start": "2024-01-01", "days": 180}
    settings = parse_deployment({"calendar": calendar, "regression": {"schedule": "30 4 * * 1-5",
                                                                      "timezone": "Europe/Berlin",
                                                                      "running": True}}, "d.yaml").regression
    assert (settings.cron, settings.timezone, settings.running) == ("30 4 * * 1-5", "Europe/Berlin", True)
    assert parse_deployment({"calendar": calendar}, "d.yaml").regression.cron == "0 2 * * *"
    with pytest.raises(DeploymentConfigError, match=r"regression\.schedule"):
        parse_deployment({"calendar": calendar, "regression": {"schedule": "every night"}}, "d.yaml")
    with pytest.raises(DeploymentConfigError, match=r"regression\.timezone"):
        parse_deployment({"calendar": calendar, "regression": {"timezone": "Mars/Olympus"}}, "d.yaml")
