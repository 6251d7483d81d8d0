"""Every figure of four evaluation cells of a 30-day world equals the committed fixture
(`tests/snapshots/figures_30day.json`): a restructuring, a dependency change or a refactor that moves a verdict
count, exposure, prediction, accuracy, cost or route mix fails here (`bench/compare_paper.py` checks the same on
the default world's `churnbench paper --json`).

The cells: the grounding arm tiered at T' = T - 1 and T - 28, its off ablation at T - 28, and the hierarchical
arm at T - 28; T = 2024-01-30, 20 tasks (docs/rules.md, "Test budget"). The fixture was written by the code
before the Dagster-wing issue (commit 4f27244, the same cells run through its `run_scenario`) and rewritten once,
by issue 19 (its diff: the measured-rate predictor moved cell 1's prediction 2.46 -> 1.37; every cell gained the
`unattributed_error` count; the off cell's one stale answer equal to a degenerate served gold moved from
`freshness_error` to it, so its stale answers and exposure went 10 -> 9; nothing else moved), and extended once by
issue 33 (every cell gained the `budget_exhausted` count, 0: the deterministic agent has no read budget; added by
hand, so this test still compares every other figure with the values written before). An intended change
of figures (new question texts, say) regenerates it: `CHURNBENCH_UPDATE_FIGURES=1 pytest <this file>`, and the
diff of the fixture goes into the commit and its reason into the closing note.

The second test: two batches of cells at once on one cold state folder give the results of one cell after the
other. Two processes start together on a state folder with no services and nothing built: batch A runs three cells in
two worker processes (one of them refused: T' after T), batch B two cells in its own process; one cell is in
both, and all share the world's inputs (ledger, warehouse, dbt build, the documents and operational store of T'
and T, the task set, the staged and index partitions of T'). The services are started once, every input
partition is materialized exactly once, the shared cell is run once (its catalog row has one attempt) and
reused by the other batch, nothing half-written is left, and every summary.json and tasks.jsonl equals the one
the same cell writes when run alone in the session's state folder. The bad cell fails alone.

The world and task count are the figures test's (a 30-day world, 20 tasks), and so is the first cell: the two
tests share this file so that `--dist loadfile` runs them on one xdist worker, one after the other, and the cells
run alone here reuse the figures test's inputs (decision 191; run on its own, this test builds them, a minute more).
All cells are at T' = T - 1, so one vector index day is built (each process that builds one loads the embedding
model).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from few_tasks import use_task_count

from churn_assets.deployment import DEPLOYMENT_ENV
from churn_assets.orchestration.materialize import Session, materialize
from churn_assets.orchestration.scenario_runs import run_scenario
from churn_assets.orchestration.world_registry import add_world
from churn_assets.services import purge_embedded_data, services_status
from churn_assets.state import StatePaths
from churn_assets.world.config import load_config

pytestmark = pytest.mark.integration

WORLD_NAME, DAYS, TASKS = "figures", 30, 20  # a world of its own: no other file's partitions are reused
FIXTURE = Path(__file__).resolve().parents[1] / "snapshots" / "figures_30day.json"
UPDATE_ENV = "CHURNBENCH_UPDATE_FIGURES"
T = dt.date(2024, 1, 30)
CELLS = [("grounding", "tiered", dt.date(2024, 1, 29)), ("grounding", "tiered", dt.date(2024, 1, 2)),
         ("grounding_no_freshness_tiers", "off", dt.date(2024, 1, 2)), ("hierarchical", "tiered", dt.date(2024, 1, 2))]
FIELDS = ("tasks", "verdicts", "stale_answers", "exposure", "prediction", "accuracy", "mean_cost_units", "route_mix")


def figures(session: Session, defs: dg.Definitions, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    use_task_count(monkeypatch, TASKS)
    config = load_config(days=DAYS, name=WORLD_NAME)
    add_world(session.paths, session.instance, config)
    materialize(session, defs, ["ledger"], [config.world_id])
    out: dict[str, Any] = {"world": config.world_id, "t": T.isoformat(), "cells": []}
    for arm, policy, t_prime in CELLS:
        s = run_scenario(session, defs, config.world_id, arm, t_prime, T, policy, "default", lambda _m: None)
        out["cells"].append({"arm": arm, "policy": policy, "t_prime": t_prime.isoformat(),
                             **{k: s[k] for k in FIELDS}})
    return out


def test_four_cells_give_the_committed_figures(session: Session, session_defs: dg.Definitions,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    actual = figures(session, session_defs, monkeypatch)
    if os.environ.get(UPDATE_ENV):
        FIXTURE.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"{FIXTURE.name} rewritten ({UPDATE_ENV} is set): review its diff")
    expected = json.loads(FIXTURE.read_text())
    assert actual["world"] == expected["world"]
    for want, got in zip(expected["cells"], actual["cells"], strict=True):
        assert got == want, f"{want['arm']} {want['policy']} T'={want['t_prime']}: figures moved"
    assert all(c["tasks"] == TASKS for c in actual["cells"])
    grounding = [c for c in actual["cells"] if c["arm"].startswith("grounding")]
    assert all(c["stale_answers"] == c["exposure"] for c in grounding)  # docs/rules.md, "Exposure and prediction"


BATCH = Path(__file__).with_name("parallel_batch.py")
T_ISO = T.isoformat()
TIERED = ["grounding", "tiered", "2024-01-29", T_ISO]
OFF = ["grounding_no_freshness_tiers", "off", "2024-01-29", T_ISO]
HIERARCHICAL = ["hierarchical", "tiered", "2024-01-29", T_ISO]
REFUSED = ["grounding", "tiered", "2024-01-31", T_ISO]  # T' after T
BATCH_A = {"workers": 2, "cells": [TIERED, REFUSED, OFF]}
BATCH_B = {"workers": 1, "cells": [OFF, HIERARCHICAL]}


@pytest.fixture
def cold_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatePaths]:
    """A state folder of its own, nothing started; its services are stopped and deleted at the end."""
    paths = StatePaths.resolve(tmp_path_factory.mktemp("parallel-state"))
    try:
        yield paths
    finally:
        purge_embedded_data(paths)


def _batch(spec: dict[str, Any], env: dict[str, str]) -> subprocess.Popen[str]:
    spec = {"world_days": DAYS, "world_name": WORLD_NAME, **spec}
    return subprocess.Popen([sys.executable, str(BATCH), json.dumps(spec)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _reference(session: Session, defs: dg.Definitions, monkeypatch: pytest.MonkeyPatch,
               cell: list[str]) -> Path:
    """The cell run alone in the session's state folder (its inputs are the figures test's when it ran first)."""
    use_task_count(monkeypatch, TASKS)
    config = load_config(days=DAYS, name=WORLD_NAME)
    if add_world(session.paths, session.instance, config):
        materialize(session, defs, ["ledger"], [config.world_id])
    arm, policy, tp, t = cell
    s = run_scenario(session, defs, config.world_id, arm, dt.date.fromisoformat(tp), dt.date.fromisoformat(t),
                     policy, "default", lambda _m: None)
    return Path(s["results"])


def test_two_batches_at_once_give_the_results_of_one_after_the_other(
        cold_state: StatePaths, session: Session, session_defs: dg.Definitions, tmp_path: Path,
        cli_env: Callable[..., dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(f'calendar:\n  start: "2024-01-01"\n  days: 180\ntasks:\n  count: {TASKS}\n  seed: 0\n')
    env = cli_env(cold_state.root, **{DEPLOYMENT_ENV: str(deployment)})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                      env.get("PYTHONPATH")]))
    started = time.monotonic()
    batches = [_batch(BATCH_A, env), _batch(BATCH_B, env)]  # at once, on a folder with nothing running
    outputs = []
    for proc in batches:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        outputs.append((json.loads(out.strip().splitlines()[-1]), err))
    print(f"two batches: {time.monotonic() - started:.1f} s\n--- batch A\n{outputs[0][1]}--- batch B\n{outputs[1][1]}")
    (a, a_log), (b, b_log) = outputs

    # The refused cell failed alone, in one line; every other cell of both batches is done.
    assert a[1]["ok"] is False and "after T" in a[1]["error"] and "\n" not in a[1]["error"]
    assert all(r["ok"] for r in (a[0], a[2], *b)), (a, b)

    # One set of services for the folder, started by whichever batch came first and reused by the other.
    statuses = services_status(cold_state)
    assert all(s.state == "running" for s in statuses)
    started_lines = [line for line in (a_log + b_log).splitlines() if "services:" in line]
    assert sorted(line.split("services: ")[1] for line in started_lines) == ["reused", "started"], started_lines

    # The shared cell ran once: both batches point at one folder, written by one run.
    assert a[2]["results"] == b[0]["results"] and a[2]["experiment_hash"] == b[0]["experiment_hash"]
    from churn_assets.evaluation.catalog import RunCatalog
    from churn_assets.orchestration.materialize import open_session

    with open_session(cold_state) as cold:
        rows = RunCatalog(cold.urls.warehouse).runs()
        assert sorted(r.status for r in rows) == ["complete"] * 3
        assert all(r.attempts == 1 for r in rows), [(r.scenario_key, r.attempts) for r in rows]
        # Every input partition was materialized once, however the two batches' builds interleaved.
        twice = {}
        for key in cold.instance.get_asset_keys():
            if key.to_user_string() == "eval_run":
                continue  # the shared cell's partition is materialized by both batches (the second reuses)
            records = cold.instance.fetch_materializations(key, limit=1000).records
            counts = Counter(r.partition_key for r in records)
            twice.update({f"{key.to_user_string()}[{p}]": n for p, n in counts.items() if n > 1})
        assert not twice, twice
    # The two batches did build at the same time: one of them found inputs the other built meanwhile.
    assert "built meanwhile by another process" in a_log + b_log

    # Nothing half-written anywhere in the results.
    leftovers = [p for p in (cold_state.root / "results").rglob("*")
                 if p.name.endswith((".tmp", ".partial.jsonl"))]
    assert leftovers == []

    # The same summaries as each cell run alone, one after the other.
    for result, cell in ((a[0], TIERED), (a[2], OFF), (b[1], HIERARCHICAL)):
        alone = _reference(session, session_defs, monkeypatch, cell)
        assert alone.name == Path(result["results"]).name  # experiment hash and code version
        parallel = json.loads((Path(result["results"]) / "summary.json").read_text())
        assert parallel == json.loads((alone / "summary.json").read_text()), cell
        assert (Path(result["results"]) / "tasks.jsonl").read_bytes() == (alone / "tasks.jsonl").read_bytes()


# ---------------------------------------------------------------------------------------------------
# Repeats (issue 33): the deterministic agent's K = 2 re-answers alike; a forced difference fails the run.
# Here because the first cell's inputs (and its K = 1 result) are the figures test's: repeat 0 is reused, so
# only the new repeats are answered (about 5 s each on this world).
# ---------------------------------------------------------------------------------------------------


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from churn_assets.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _answers(folder: Path) -> list[tuple[str, Any, str]]:
    rows = [json.loads(x) for x in (folder / "tasks.jsonl").read_text().splitlines()]
    return [(r["task_id"], r["answer"], r["verdict"]) for r in rows]


def test_repeats_of_the_deterministic_agent_answer_alike_and_a_difference_fails(
        session: Session, session_defs: dg.Definitions, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import churn_assets.arms.agents.deterministic as deterministic
    from churn_assets.evaluation.catalog import RunCatalog
    from churn_assets.orchestration.cells import Cell, run_cells
    from churn_assets.orchestration.materialize import MaterializationError, repeats_tags

    use_task_count(monkeypatch, TASKS)
    config = load_config(days=DAYS, name=WORLD_NAME)
    if add_world(session.paths, session.instance, config):
        materialize(session, session_defs, ["ledger"], [config.world_id])
    arm, policy, t_prime = CELLS[0]

    def run(repeats: int) -> dict[str, Any]:
        return run_scenario(session, session_defs, config.world_id, arm, t_prime, T, policy, "default",
                            lambda _m: None, repeats=repeats)

    single = run(1)
    double = run(2)
    # K = 1 is repeat 0 of K = 2: the same folder, experiment hash and figures, so nothing of a single run moved
    first = Path(single["results"])
    assert double["results"] == single["results"] and double["experiment_hash"] == single["experiment_hash"]
    assert {k: double[k] for k in FIELDS} == {k: single[k] for k in FIELDS}
    second = first.with_name(first.name + "__rep1")
    assert (second / "summary.json").is_file() and json.loads((second / "summary.json").read_text())["repeat"] == 1
    assert _answers(second) == _answers(first)  # re-answered, not copied: its own rows, the same answers
    assert json.loads((second / "identity.json").read_text())["repeat"] == 1

    e = double["repeats"]
    assert (e["repeats"], e["tasks"], e["stability"]) == (2, TASKS, 1.0)
    assert e["pass_hat_k"]["2"] == e["pass_at_k"]["2"] == e["accuracy_mean"] == single["accuracy"]
    assert e["accuracy_per_repeat"] == [single["accuracy"]] * 2 and e["folders"][1] == second.name
    lo, hi = e["accuracy_interval_90"]
    assert lo <= e["accuracy_mean"] <= hi
    eff = e["efficiency"]
    assert eff["model_calls"] is None and eff["input_tokens"] is None  # no model: tokens absent, never 0
    assert eff["tool_calls"]["n"] == 2 * TASKS and eff["tool_calls"]["median"] >= 1 and eff["seconds"]["n"] >= TASKS
    assert e["staleness_awareness"]["applicable"] is False  # the deterministic agent states no as-of day
    summary = json.loads((first / "summary.json").read_text())
    assert summary["efficiency"]["tool_calls"]["n"] == TASKS and "repeat" not in summary

    # The catalog: a row per repeat, and the experiment's summary over both
    catalog = RunCatalog(session.urls.warehouse)
    rows = [r for r in catalog.find(single["scenario_key"]) if r.code_version == single["code_version"]]
    assert sorted((r.repeat, r.status, r.accuracy) for r in rows) == [(0, "complete", single["accuracy"]),
                                                                     (1, "complete", single["accuracy"])]
    [recorded, *_] = catalog.experiments(single["experiment_hash"], single["code_version"])
    assert recorded.repeats == 2 and recorded.summary["stability"] == 1.0
    assert all(len(task["verdicts"]) == 2 for task in recorded.summary["per_task"].values())
    shown = _cli("results", "show", single["scenario_key"])
    assert shown.exit_code == 0 and "repeat 1 run" in shown.output and "pass^2 " in shown.output
    assert "no model calls" in shown.output and "staleness awareness: n/a" in shown.output
    checked = _cli("verify-results", single["scenario_key"])
    assert checked.exit_code == 0, checked.output
    assert checked.output.count(f"{TASKS} rows confirmed") == 2 and "repeat 1:" in checked.output
    by_path = _cli("verify-results", str(second))  # a repeat's folder by its path: checked against its own seal
    assert by_path.exit_code == 0 and by_path.output.count(f"{TASKS} rows confirmed") == 1, by_path.output

    # Through the cell pool (a sweep's path: the repeats travel as a run tag): every repeat reused
    [cell] = run_cells(session.paths, [Cell(config.world_id, arm, policy, t_prime, T)], workers=1,
                       tags=repeats_tags(2))
    assert cell.ok and cell.summary is not None and cell.summary["reused"]
    assert cell.summary["repeats"]["folders"] == e["folders"]

    # A forced difference: the agent answers one task otherwise in repeat 2 (repeats 0 and 1 are reused)
    original = deterministic.DeterministicAgent.answer
    changed: list[str] = []

    def unlike(self: Any, question: str, today: Any, tools: Any) -> Any:
        answer = original(self, question, today, tools)
        if not changed and answer.value is not None:
            changed.append(question)
            return dataclasses.replace(answer, value=None, text="unknown")
        return answer

    monkeypatch.setattr(deterministic.DeterministicAgent, "answer", unlike)
    with pytest.raises(MaterializationError, match=r"answered 1 task\(s\) differently in the 3 repeats"):
        run(3)
    assert changed and (first.with_name(first.name + "__rep2") / "summary.json").is_file()
    monkeypatch.setattr(deterministic.DeterministicAgent, "answer", original)
    with pytest.raises(MaterializationError, match="differently"):  # reused, still refused
        run(3)
    refused = _cli("verify-results", single["scenario_key"])
    assert refused.exit_code == 1 and "the deterministic agent's repeats differ in 1 task(s)" in refused.output
