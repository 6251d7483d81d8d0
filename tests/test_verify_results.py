"""`verify-results` at the results-file seam: a run written by the real runner is confirmed row by row from
the ledger, and any tampered per-task row (verdict, gold, answer) is rejected, naming the task.

The arm is scripted (it answers gold under its planned vintage, as the deterministic grounding arm does),
so the run has correct and stale rows; real arms against the services are verified in
tests/integration/test_eval_run.py.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from scripted_answer import ScriptedAnswer

from churn_assets.evaluation.exposure import run_exposure
from churn_assets.evaluation.results import ResultsStore
from churn_assets.evaluation.runner import RunSpec, evaluate
from churn_assets.evaluation.verify import load_run, verify_rows
from churn_assets.freshness.planning import served_vintage
from churn_assets.freshness.policies import Off
from churn_assets.freshness.scenario import Scenario
from churn_assets.grounding.registry import load_registry
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task, task_set_hash
from churn_assets.world.config import load_config
from churn_assets.world.simulator import simulate

T = dt.date(2024, 1, 28)
T_PRIME = dt.date(2024, 1, 10)


class PlannedArm:
    """Answers gold under its planned vintage, except one task whose agent ran out of its read budget (as a model
    agent does: no answer, what it read traced)."""

    name = "grounding_no_freshness_tiers"

    def __init__(self, resolver: GoldResolver, planned: dict[str, dt.date], out_of_budget: str = "") -> None:
        self.resolver, self.planned_vintage, self.out_of_budget = resolver, planned, out_of_budget

    def answer(self, task: Task) -> ScriptedAnswer:
        read = {c: self.planned_vintage[c] for c in task.template.classes}
        if task.task_id == self.out_of_budget:
            return ScriptedAnswer(task.task_id, None, "", read, budget_error="asked for a 9th read")
        value = self.resolver.gold(task.template, task.params, anchor=T, vintage=self.planned_vintage)
        return ScriptedAnswer(task.task_id, None, task.template.answer.format(value), read)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[GoldResolver, list[Task], Path]:
    return written_run(tmp_path_factory.mktemp("results"))


def written_run(root: Path, *, out_of_budget: bool = True) -> tuple[GoldResolver, list[Task], Path]:
    """A run of the scripted arm (policy off, T' = 2024-01-10, T = 2024-01-28, 20 tasks) written under `root`; with
    `out_of_budget`, its third task ran out of its read budget (a model agent's failure: the deterministic agent's
    own runs have none, tests/test_verify_arm_rules.py)."""
    config = load_config(days=30)
    records = [{"seq": i, "at": e.at.isoformat(), "kind": e.kind, "entity_type": e.entity_type,
                "entity_id": e.entity_id, "payload": e.payload} for i, e in enumerate(simulate(config))]
    resolver = GoldResolver(records)
    tasks = list(generate_task_set(records, world_id=config.world_id, anchor=T, n=20, resolver=resolver).tasks)
    planned = served_vintage(load_registry(), T_PRIME, T, Off())
    exposure = run_exposure(records, tasks, anchor=T, t_prime=T_PRIME, vintage=planned, resolver=resolver)
    store = ResultsStore(root)
    spec = RunSpec(Scenario(config.world_id, PlannedArm.name, "off", T_PRIME, T), config.config_hash,
                   task_set_hash(tasks))
    arm = PlannedArm(resolver, planned, out_of_budget=tasks[2].task_id if out_of_budget else "")
    evaluate(arm, tasks, resolver, store, spec, exposure=exposure, code="git-test")
    return resolver, tasks, store.run_dir(spec.key("git-test"))


def _tampered(run_dir: Path, tmp_path: Path, task_index: int, **changes: Any) -> Path:
    """A copy of the run's files with one row changed."""
    stored = load_run(run_dir)
    rows = [dict(r) for r in stored.rows]
    rows[task_index].update(changes)
    out = tmp_path / "tampered"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(stored.summary))
    (out / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_an_honest_run_is_confirmed_row_by_row(run) -> None:
    resolver, tasks, run_dir = run
    stored = load_run(run_dir)
    verdicts = {r["verdict"] for r in stored.rows}
    assert "correct" in verdicts and verdicts & {"freshness_error", "mixed_vintage_error"}  # both kinds checked
    assert stored.rows[2]["verdict"] == "budget_exhausted" and stored.summary["verdicts"]["budget_exhausted"] == 1
    report = verify_rows(resolver, tasks, stored.rows, stored.summary)
    assert report.ok, [str(d) for d in report.disagreements]
    assert report.rows == len(tasks) == 20


@pytest.mark.parametrize("verdict_from", ["correct", "stale"])
def test_a_changed_verdict_is_rejected_naming_the_task(run, tmp_path: Path, verdict_from: str) -> None:
    resolver, tasks, run_dir = run
    rows = load_run(run_dir).rows
    i = next(i for i, r in enumerate(rows) if (r["verdict"] == "correct") == (verdict_from == "correct"))
    forged = "freshness_error" if verdict_from == "correct" else "correct"
    stored = load_run(_tampered(run_dir, tmp_path, i, verdict=forged))
    report = verify_rows(resolver, tasks, stored.rows, stored.summary)
    task_id = rows[i]["task_id"]
    assert not report.ok
    assert report.tasks_disagreeing == [task_id]
    [bad] = [d for d in report.disagreements if d.task_id is not None]
    assert (bad.field, bad.stored, bad.recomputed) == ("verdict", forged, rows[i]["verdict"])
    assert f"task {task_id}: verdict stored" in str(bad)
    # The summary's counts no longer match the rows either.
    assert {d.field for d in report.disagreements if d.task_id is None} >= {"verdicts.correct"}


@pytest.mark.parametrize("gold_field", ["gold_at_t", "gold_served", "gold_planned"])
def test_a_changed_gold_is_rejected_naming_the_task(run, tmp_path: Path, gold_field: str) -> None:
    resolver, tasks, run_dir = run
    rows = load_run(run_dir).rows
    i = next(i for i, r in enumerate(rows) if isinstance(r[gold_field], int | float) and r["verdict"] == "correct")
    forged = rows[i][gold_field] + 1
    stored = load_run(_tampered(run_dir, tmp_path, i, **{gold_field: forged}))
    report = verify_rows(resolver, tasks, stored.rows, stored.summary)
    assert [(d.task_id, d.field, d.stored) for d in report.disagreements] == [(rows[i]["task_id"], gold_field, forged)]


def test_a_changed_answer_no_longer_supports_its_verdict(run, tmp_path: Path) -> None:
    resolver, tasks, run_dir = run
    rows = load_run(run_dir).rows
    i = next(i for i, r in enumerate(rows) if r["verdict"] == "correct" and isinstance(r["answer"], int | float))
    stored = load_run(_tampered(run_dir, tmp_path, i, answer=rows[i]["answer"] + 7))
    report = verify_rows(resolver, tasks, stored.rows, stored.summary)
    assert [(d.task_id, d.field, d.stored, d.recomputed) for d in report.disagreements] == [
        (rows[i]["task_id"], "verdict", "correct", "reasoning_error")]


@pytest.mark.parametrize("forgery", ["hidden", "claimed"])
def test_an_exhausted_budget_is_checked_like_a_verdict(run, tmp_path: Path, forgery: str) -> None:
    """A budget-exhausted row whose budget error is removed no longer supports its verdict (it becomes a parse
    failure: no answer text), and a correct row that claims an exhausted budget is not a budget verdict."""
    resolver, tasks, run_dir = run
    rows = load_run(run_dir).rows
    if forgery == "hidden":
        i, changes, recomputed = 2, {"budget_error": None}, "parse_failure"
    else:
        i = next(i for i, r in enumerate(rows) if r["verdict"] == "correct")
        changes, recomputed = {"budget_error": "forged"}, "budget_exhausted"
    stored = load_run(_tampered(run_dir, tmp_path, i, **changes))
    report = verify_rows(resolver, tasks, stored.rows, stored.summary)
    assert report.tasks_disagreeing == [rows[i]["task_id"]]
    assert (rows[i]["task_id"], "verdict", rows[i]["verdict"], recomputed) in [
        (d.task_id, d.field, d.stored, d.recomputed) for d in report.disagreements]


def test_rows_must_be_the_task_set(run) -> None:
    resolver, tasks, run_dir = run
    stored = load_run(run_dir)
    report = verify_rows(resolver, tasks, stored.rows[:-1], None)
    assert [(d.task_id, d.field) for d in report.disagreements] == [(tasks[-1].task_id, "task_id")]


def test_a_served_vintage_that_its_traces_do_not_show_is_rejected(run, tmp_path: Path) -> None:
    """The verdict rests on the served vintage: a stale answer re-labelled as read at T (its traces still show
    the older day) must not pass, even though the verdict then agrees with the forged map."""
    resolver, tasks, run_dir = run
    rows = load_run(run_dir).rows
    i = next(i for i, r in enumerate(rows) if r["verdict"] == "freshness_error")
    at_t = dict.fromkeys(rows[i]["served_vintage"], tasks[i].anchor)
    stored = load_run(_tampered(run_dir, tmp_path, i, served_vintage=at_t))
    report = verify_rows(resolver, tasks, stored.rows, stored.summary)
    assert rows[i]["task_id"] in report.tasks_disagreeing
    assert ("served_vintage", at_t) in [(d.field, d.stored) for d in report.disagreements]


def test_world_without_all_is_refused() -> None:
    from click.testing import CliRunner

    from churn_assets.commands.verify import verify_results

    got = CliRunner().invoke(verify_results, ["7", "--world", "w"])
    assert got.exit_code == 2 and "--world selects the runs of --all" in got.output


# ---------------------------------------------------------------------------------------------------
# --independent at the seam: a second gold stands in for the SQL gold (the real one is tested against the truth
# schema in tests/integration/test_differential_gold.py and test_verify_independent.py)
# ---------------------------------------------------------------------------------------------------


class SecondGold:
    """The SQL gold's interface (`gold(t, params, anchor=, vintage=)` with a partial map), answering like the
    Python gold except, when asked, one template is off by one: a planted wrong answer."""

    def __init__(self, resolver: GoldResolver, wrong_template: str | None = None) -> None:
        self.resolver, self.wrong_template = resolver, wrong_template

    def gold(self, t: Any, params: dict[str, Any], *, anchor: dt.date, vintage: dict[str, dt.date]) -> Any:
        from churn_assets.tasks.gold import complete_vintage

        value = self.resolver.gold(t, params, anchor=anchor, vintage=complete_vintage(vintage, anchor))
        if t.template_id == self.wrong_template and isinstance(value, int | float):
            return value + 1
        return value


def test_independent_an_honest_run_is_confirmed(run) -> None:
    from churn_assets.evaluation.verify import verify_rows_independent

    resolver, tasks, run_dir = run
    stored = load_run(run_dir)
    report = verify_rows_independent(resolver, SecondGold(resolver), tasks, stored.rows, stored.summary)
    assert report.ok, [str(d) for d in report.disagreements]


def test_independent_a_second_gold_that_differs_names_every_task_of_the_template(run) -> None:
    from churn_assets.evaluation.verify import verify_rows_independent

    resolver, tasks, run_dir = run
    stored = load_run(run_dir)
    numeric = [t for t, r in zip(tasks, stored.rows, strict=True) if isinstance(r["gold_at_t"], int | float)]
    wrong = numeric[0].template_id
    report = verify_rows_independent(resolver, SecondGold(resolver, wrong), tasks, stored.rows, stored.summary)
    assert report.tasks_disagreeing == sorted(t.task_id for t in tasks if t.template_id == wrong)
    fields = {d.field for d in report.disagreements}
    assert {"gold_at_t (stored vs sql gold)", "gold_at_t (python gold vs sql gold)"} <= fields
    # the verdict is re-derived from the second gold: a correct answer no longer is
    assert "verdict (from the observed data times and the sql golds)" in fields


def test_independent_the_verdict_follows_the_observed_data_times(run, tmp_path: Path) -> None:
    """A stale row whose reads observed T (their data was fresh) cannot stay a freshness error: the independent
    check derives the vintage from each read's observed day, not from the stored map."""
    from churn_assets.evaluation.verify import verify_rows_independent

    resolver, tasks, run_dir = run
    rows = load_run(run_dir).rows
    i = next(i for i, r in enumerate(rows) if r["verdict"] == "freshness_error")
    at_t = {c: tasks[i].anchor for c in rows[i]["served_vintage"]}
    reads = [{"store": "staging", "table": f"s.{c}", "entity_class": c, "observed_day": d, "rows": 1}
             for c, d in at_t.items()]
    stored = load_run(_tampered(run_dir, tmp_path, i, traces=[{"route": "staged_sql", "data_times": at_t,
                                                                "reads": reads}]))
    report = verify_rows_independent(resolver, SecondGold(resolver), tasks, stored.rows, stored.summary)
    found = {(d.task_id, d.field) for d in report.disagreements}
    tid = rows[i]["task_id"]
    assert (tid, "served_vintage (observed in the traces)") in found
    assert [d.recomputed for d in report.disagreements
            if d.field.startswith("verdict (")] == ["reasoning_error"]


def test_independent_data_times_that_their_reads_do_not_show_are_rejected(run, tmp_path: Path) -> None:
    from churn_assets.evaluation.verify import observed_vintage, verify_rows_independent

    resolver, tasks, run_dir = run
    rows = load_run(run_dir).rows
    i = next(i for i, r in enumerate(rows) if r["verdict"] == "freshness_error")
    stated = rows[i]["served_vintage"]
    reads = [{"store": "staging", "table": f"s.{c}", "entity_class": c, "observed_day": tasks[i].anchor, "rows": 1}
             for c in stated]
    traces = [{"route": "staged_sql", "data_times": stated, "reads": reads}]
    observed, problems = observed_vintage(traces)
    assert observed == {c: dt.date.fromisoformat(tasks[i].anchor) for c in stated}
    assert len(problems) == 1 and "states data times" in problems[0]
    stored = load_run(_tampered(run_dir, tmp_path, i, traces=traces))
    report = verify_rows_independent(resolver, SecondGold(resolver), tasks, stored.rows, stored.summary)
    assert (rows[i]["task_id"], "traces") in {(d.task_id, d.field) for d in report.disagreements}


def test_observed_vintage_reads_days_per_class_over_every_retrieval() -> None:
    from churn_assets.evaluation.verify import observed_vintage

    traces = [
        {"route": "staged_sql", "data_times": {"prices": "2024-04-22"},
         "reads": [{"entity_class": "prices", "observed_day": "2024-04-22"},
                   {"entity_class": None, "observed_day": "2024-03-29"}]},
        {"route": "coordinator", "data_times": {}, "reads": []},
        {"route": "saas_origin", "data_times": {"tickets": "2024-04-27"}},  # no reads recorded: its data times
    ]
    assert observed_vintage(traces) == ({"prices": dt.date(2024, 4, 22), "tickets": dt.date(2024, 4, 27)}, [])
    twice = [*traces, {"route": "live_warehouse", "data_times": {"prices": "2024-04-27"},
                       "reads": [{"entity_class": "prices", "observed_day": "2024-04-27"}]}]
    assert observed_vintage(twice)[1] == ["prices observed at 2024-04-22 and at 2024-04-27"]
    assert observed_vintage("x")[1] == ["traces are not a list (str)"]
