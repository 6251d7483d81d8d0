"""The glue of issue 33 without services: a sweep's `repeats` (its id unchanged at 1), the repeats run tag, the
lines the CLI prints for an experiment, `churnbench gate-power` on repeat folders, and the stochastic
regression's baseline and gate over a sweep's repeat folders (the sweep itself replaced at its seam: the cells'
folders are written here)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from churn_assets.cli import main
from churn_assets.commands.experiment_lines import experiment_lines
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.repeats import experiment_keys, experiment_summary, verdict_matrix
from churn_assets.evaluation.results import ResultsStore, RunKey
from churn_assets.orchestration.materialize import REPEATS_TAG, repeats_of, repeats_tags
from churn_assets.sweeps.presets import customize, preset_spec

WORLD, SCENARIO = "default-s42-abcdef", "grounding__tiered__tp2024-01-02__t2024-01-29__det__default__default-s42-abcdef"


def test_a_sweep_with_one_repeat_is_the_sweep_it_was() -> None:
    spec = preset_spec("smoke")
    assert "repeats" not in spec.to_json() and customize(spec, repeats=1).sweep_id == spec.sweep_id
    three = customize(spec, repeats=3)
    assert three.sweep_id != spec.sweep_id and three.to_json()["repeats"] == 3
    assert type(three).from_json(three.to_json()) == three
    with pytest.raises(UserFacingError, match="repeats must be a whole number from 1 to 100"):
        dataclasses.replace(spec, repeats=0)


def test_the_repeats_tag() -> None:
    assert repeats_tags(1) == {} and repeats_tags(4) == {REPEATS_TAG: "4"}
    assert repeats_of(None) == 1 and repeats_of({REPEATS_TAG: "4"}) == 4
    for bad in ("x", "0", "101"):
        with pytest.raises(UserFacingError):
            repeats_of({REPEATS_TAG: bad})
    refused = CliRunner().invoke(main, ["run", "--world", WORLD, "--arm", "naive", "--t-prime", "2024-01-02",
                                        "--t", "2024-01-29", "--repeats", "0"])
    assert refused.exit_code == 2 and "--repeats" in refused.output  # click refuses before anything starts


def _row(task: str, template: str, verdict: str, answer: Any, **extra: Any) -> dict[str, Any]:
    return {"task_id": task, "template": template, "verdict": verdict, "answer": answer, "answer_text": str(answer),
            "traces": [{"route": "staged_sql", "reads": [{"observed_day": "2024-01-02"}]}], **extra}


def test_the_lines_of_an_experiment() -> None:
    det = experiment_summary([[_row("a", "A", "correct", 1)], [_row("a", "A", "correct", 1)]], [{"a": 12.0}, {}],
                             t="2024-01-29")
    lines = experiment_lines(det)
    assert lines[0].startswith("repeats 2: accuracy mean 100.0% [90% 100.0%-100.0%")
    assert "pass^2 100.0%" in lines[0] and "stability 100.0% (1/1 tasks answered alike)" in lines[0]
    assert "tool calls 1 (p90 1)" in lines[1] and "no model calls, input tokens, output tokens" in lines[1]
    assert "(the agent calls no model)" in lines[1] and lines[2].endswith("n/a (no answer states the as-of day "
                                                                          "of its data)")
    usage = {"calls": 2, "tool_calls": 1, "input_tokens": 800, "output_tokens": 40}
    llm = experiment_summary([[_row("a", "A", "freshness_error", 2, usage=usage, data_as_of="2024-01-02")]],
                             [{"a": 2500.0}], t="2024-01-29")
    eff, aware = experiment_lines(llm)  # one repeat: no repeats line
    assert eff.startswith("efficiency") and "input tokens 800 (p90 800)" in eff and "; no " not in eff
    assert eff.endswith("seconds 2.5 (p90 2.5)")
    assert aware.startswith("staleness awareness: stated as-of day = oldest day read 1/1 (100.0%)")
    assert "revealing it (stated day < T) 1/1 (100.0%)" in aware
    assert experiment_lines(None) == []


def _write_experiment(root: Path, scenario: str, experiment_hash: str, matrix: dict[str, list[str]],
                      templates: dict[str, str]) -> Path:
    store = ResultsStore(root)
    key = RunKey(WORLD, scenario, experiment_hash, "git-test")
    k = len(next(iter(matrix.values())))
    for r in range(k):
        writer = store.open_run(key.repeated(r), {"x": 1})
        for task, verdicts in matrix.items():
            writer.append(_row(task, templates[task], verdicts[r], r))
        writer.finish(list(matrix), {"tasks": len(matrix)}, {})
    return store.run_dir(key)


def _matrix(seed: int, repeats: int, p: float) -> tuple[dict[str, list[str]], dict[str, str]]:
    rng = random.Random(seed)
    templates = {f"t{g}_{i}": f"g{g}" for g in range(6) for i in range(4)}
    return ({t: ["correct" if rng.random() < p else "reasoning_error" for _ in range(repeats)] for t in templates},
            templates)


def test_gate_power_measures_from_repeat_folders(tmp_path: Path) -> None:
    matrix, templates = _matrix(0, 10, 0.7)
    folder = _write_experiment(tmp_path, SCENARIO, "aaaa000000000001", matrix, templates)
    assert len(experiment_keys(folder)) == 10 and len(experiment_keys(folder, limit=3)) == 3
    assert verdict_matrix(folder.with_name(folder.name + "__rep4"))[0] == matrix  # any repeat's folder
    weak, _ = _matrix(1, 10, 0.2)
    other = _write_experiment(tmp_path, SCENARIO.replace("tiered", "off"), "bbbb000000000002", weak, templates)
    out = CliRunner().invoke(main, ["gate-power", str(folder), "--against", str(other), "--comparisons", "200",
                                    "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert (data["verdict"], data["verdict_reason"], data["aa"]["rule_holds"]) == ("acceptable", "", True)
    assert (data["repeats"], data["tasks"], data["templates"]) == (10, 24, 6)
    assert data["aa"]["comparisons"] == 200 and data["aa"]["group_size"] == 5 and data["aa"]["untested"] == ""
    assert data["power"]["rate"] > 0.9 and data["power"]["against_repeats"] == 10
    text = CliRunner().invoke(main, ["gate-power", str(folder), "--comparisons", "200"])
    assert text.exit_code == 1 and text.output.startswith(f"A/A on {folder} (10 repeats, 24 tasks): false alarms")
    assert text.output.splitlines()[-1].startswith("gate: no power (power not measured")  # A/A alone is not enough

    frozen = _write_experiment(tmp_path, SCENARIO.replace("default__", "unlimited__"), "cccc000000000003",
                               {t: [v[0]] * 10 for t, v in matrix.items()}, templates)
    untested = CliRunner().invoke(main, ["gate-power", str(frozen)])
    assert untested.exit_code == 1 and "GATE UNTESTED" in untested.output
    assert untested.output.splitlines()[-1] == "gate: no power (the repeats do not vary, so no drop can be seen)"
    few = _write_experiment(tmp_path, SCENARIO.replace("grounding", "naive"), "dddd000000000004",
                            {t: v[:4] for t, v in matrix.items()}, templates)
    refused = CliRunner().invoke(main, ["gate-power", str(few)])
    assert refused.exit_code == 1 and "has 4 complete repeat(s); the measurement needs at least 10" in refused.stderr


def test_the_stochastic_regression_writes_its_baseline_then_gates(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import churn_assets.orchestration.regression as regression
    from churn_assets.orchestration.sweep_records import DONE, SweepRecord
    from churn_assets.state import StatePaths
    from churn_assets.sweeps.spec import LLM, cells, resolve_worlds

    monkeypatch.setenv("CHURNBENCH_LLM_BASE_URL", "http://llm.invalid/v1")
    monkeypatch.setenv("CHURNBENCH_LLM_MODEL", "qwen2.5-coder-0.5b")
    paths = StatePaths.resolve(tmp_path / "state")
    spec = customize(preset_spec("regression"), agent=LLM, repeats=3, arms=("grounding",))
    drop = {"on": False}

    def fake_sweep(session: Any, definitions: Any, spec: Any, **_: Any) -> SweepRecord:
        from churn_assets.orchestration.sweeps import with_llm_settings

        spec, _settings = with_llm_settings(spec)
        evaluated, _ = cells(spec, resolve_worlds(spec), {"grounding": None})
        record = SweepRecord(spec, evaluated, [])
        for i, cell in enumerate(evaluated):
            matrix, templates = _matrix(10 + i, 3, 0.05 if drop["on"] and i == 1 else 0.8)
            folder = _write_experiment(paths.results_root, f"cell{i}-{drop['on']}", f"{i}{drop['on']:d}" * 8,
                                       matrix, templates)
            record.outcomes[f"cell{i}"] = {"status": DONE, "cell": cell.to_json(), "results": str(folder)}
        return record

    monkeypatch.setattr(regression, "run_sweep", fake_sweep)
    session = type("FakeSession", (), {"paths": paths})()
    baseline = tmp_path / "regression-llm-test.json"
    lines: list[str] = []
    made = regression.run_stochastic_regression(session, None, echo=lines.append, update_baseline=True,
                                                baseline=baseline, spec=spec)
    assert made.result.passed and made.baseline_updated and "2 cell(s), 3 repeat(s) each" in lines[-1]
    stored = json.loads(baseline.read_text())
    assert stored["kind"] == "stochastic" and stored["repeats"] == 3 and stored["alpha"] == 0.05
    [first_cell, _] = stored["cells"].values()
    assert len(next(iter(first_cell["tasks"].values()))["verdicts"]) == 3
    assert (made.report_dir / "regression-llm.md").is_file()

    drop["on"] = True
    gated = regression.run_stochastic_regression(session, None, echo=lines.append, baseline=baseline, spec=spec)
    assert not gated.result.passed and len(gated.result.dropped) == 1
    report = json.loads((gated.report_dir / "regression-llm.json").read_text())
    assert report["passed"] is False and report["repeats"] == 3
    assert all("minimum detectable drop" in line for line in gated.result.lines()[:2])
    with pytest.raises(UserFacingError, match="file not found"):
        regression.run_stochastic_regression(session, None, echo=lines.append, baseline=tmp_path / "none.json",
                                             spec=spec)
    assert dt.date.fromisoformat(stored["spec"]["t"]) == spec.t


def test_a_sweep_report_table_of_repeats() -> None:
    from churn_assets.sweeps.analysis import repeats_table

    e = experiment_summary([[_row("a", "A", "correct", 1)], [_row("a", "A", "reasoning_error", 2)]], [{}, {}],
                           t="2024-01-29")
    cell = {"world_id": WORLD, "arm": "grounding", "policy": "tiered", "t_prime": "2024-01-02", "t": "2024-01-29"}
    record = {"outcomes": {"k": {"status": "done", "cell": cell, "repeats": e},
                           "f": {"status": "failed", "cell": cell}}}
    [row] = repeats_table(record)
    assert (row["gap"], row["repeats"], row["accuracy_mean"], row["pass_hat_k"], row["pass_at_k"]) == (
        27, 2, 0.5, 0.0, 1.0)
    assert row["stability"] == 0.0 and row["median_tool_calls"] == 1 and row["median_model_calls"] is None


def test_run_checks_its_request_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: `churnbench run` checked the request, threw the result away, and `run_scenario` checked it again.
    The scenario the command line checked (before any service opens) is the one evaluated. Seams: the check, the
    session, the definitions and the evaluation itself (the real path runs in the integration tests)."""
    import contextlib

    import churn_assets.commands.run as run_command
    import churn_assets.orchestration.definitions as definitions
    import churn_assets.orchestration.materialize as materialize
    import churn_assets.orchestration.requests as requests

    checked, calls = object(), []
    monkeypatch.setattr(requests, "check_run", lambda *args, **kwargs: calls.append(args) or checked)
    monkeypatch.setattr(materialize, "open_session", lambda paths: contextlib.nullcontext(object()))
    monkeypatch.setattr(definitions, "defs_for", lambda root: None)

    def evaluated(*args: Any, **kwargs: Any) -> dict[str, Any]:
        assert kwargs["checked"] is checked  # the command's own check, not a second one
        return {"scenario_key": SCENARIO, "verdicts": {"correct": 1}, "accuracy": 1.0, "exposure": 0,
                "prediction": 0.0, "results": "/nowhere"}

    monkeypatch.setattr(run_command, "run_scenario", evaluated)
    got = CliRunner().invoke(main, ["run", "--world", WORLD, "--arm", "naive", "--t-prime", "2024-01-02", "--t",
                                    "2024-01-29"])
    assert got.exit_code == 0, got.output
    assert len(calls) == 1 and got.output.startswith(f"{SCENARIO}: ") and "resumed" not in got.output

    # A run that finished an interrupted one's checkpoint says so (issue 46: it never did).
    monkeypatch.setattr(run_command, "run_scenario", lambda *a, **k: {**evaluated(*a, **k), "resumed_tasks": 3,
                                                                       "verdicts": {"correct": 1, "parse_failure": 4}})
    got = CliRunner().invoke(main, ["run", "--world", WORLD, "--arm", "naive", "--t-prime", "2024-01-02", "--t",
                                    "2024-01-29"])
    assert "resumed: 3 of 5 answers kept from the interrupted run's checkpoint" in got.output, got.output
