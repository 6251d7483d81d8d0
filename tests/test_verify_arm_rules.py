"""Plain verification checks each deterministic arm's per-row rule of docs/rules.md, "Arm correctness" (issue 46,
item 4): naive's answers equal gold at T, grounding's and its off ablation's gold at their planned vintage,
hierarchical's single-source ones too; named (task, template, rule, both values) when a row breaks it.

The issue's case: a run of the deterministic agent on a grounding arm whose stale answers (28) fall short of its
exposure (29) passed plain verification. Here a forger hides one stale answer the way tests/test_seals.py's probe
does (its answer set to gold at T, its verdict to correct, the summary's counts, `stale.csv` and the catalog's
figures made to match): every other plain check passes, the arm's rule names the task. The run is the scripted
arm of tests/test_verify_results.py, which answers gold under its planned vintage as the deterministic grounding
arm does; the real CLI against a real run: tests/reliability/test_integrity.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_verify_results import written_run

from churn_assets.evaluation.awareness import staleness_awareness
from churn_assets.evaluation.consistency import catalog_disagreements, stale_file_disagreements
from churn_assets.evaluation.results import canonical, stale_csv
from churn_assets.evaluation.verify import (
    ARM_RULES,
    DETERMINISTIC_AGENT,
    arm_rule,
    arm_rule_disagreements,
    load_run,
    verify_rows,
)
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task

Run = tuple[GoldResolver, list[Task], Path]
RULE = ARM_RULES["grounding_no_freshness_tiers"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The scripted deterministic run with no budget failure (the deterministic agent has no read budget)."""
    return written_run(tmp_path_factory.mktemp("results"), out_of_budget=False)


def forge_stale_answer(folder: Path, *, careful: bool = True) -> tuple[str, dict[str, Any]]:
    """Hide one stale answer: answer = gold at T, verdict correct, the summary's counts to match. `careful` (as
    tests/reliability/test_integrity.py's careful forger): also the answer's text, stale.csv and the summary's
    awareness block made again from the rows; otherwise those are left as the run wrote them (what the plain
    checks then name). Returns the task and its honest row. tests/test_seals.py forges with it too."""
    stored = load_run(folder)
    rows = [dict(r) for r in stored.rows]
    victim = next(r for r in rows if r["verdict"] == "freshness_error")
    honest = dict(victim)
    victim.update(answer=victim["gold_at_t"], verdict="correct")
    if careful:
        victim["answer_text"] = str(victim["gold_at_t"])
    (folder / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = dict(stored.summary)
    summary["verdicts"] = {**summary["verdicts"], "freshness_error": summary["verdicts"]["freshness_error"] - 1,
                           "correct": summary["verdicts"]["correct"] + 1}
    summary["stale_answers"] -= 1
    summary["accuracy"] = round(summary["verdicts"]["correct"] / summary["tasks"], 4)
    if careful:
        summary["staleness_awareness"] = staleness_awareness(rows, summary["experiment"]["t"])  # what rows imply
        (folder / "stale.csv").write_text(stale_csv(rows))
    (folder / "summary.json").write_text(json.dumps(summary))
    return str(victim["task_id"]), honest


def test_the_rules_name_registered_arms_and_the_deterministic_agent() -> None:
    from churn_assets.arms.registry import arm_names
    from churn_assets.freshness.scenario import DETERMINISTIC_AGENT as SCENARIO_AGENT

    assert set(ARM_RULES) <= set(arm_names()) and DETERMINISTIC_AGENT == SCENARIO_AGENT
    assert arm_rule({"arm": "naive", "agent_id": "det"}) == ARM_RULES["naive"]
    assert arm_rule({"arm": "grounding", "agent_id": "llm-f9f773"}) is None  # a model's answers are its own
    assert arm_rule({"arm": "classic_rag", "agent_id": "det"}) is None  # misses aggregates legitimately


def test_an_honest_deterministic_run_keeps_its_rule_on_every_row(run: Run) -> None:
    resolver, tasks, run_dir = run
    stored = load_run(run_dir)
    assert arm_rule(stored.experiment) == RULE
    verdicts = {r["verdict"] for r in stored.rows}
    assert "correct" in verdicts and "freshness_error" in verdicts  # stale rows keep the rule too
    assert verify_rows(resolver, tasks, stored.rows, stored.summary).ok
    assert arm_rule_disagreements(RULE, tasks, stored.rows) == []
    # Naive's rule on the same rows names exactly the answers that are not gold at T: the stale ones.
    stale = {r["task_id"] for r in stored.rows if r["verdict"] != "correct"}
    assert {d.task_id for d in arm_rule_disagreements(ARM_RULES["naive"], tasks, stored.rows)} == stale


def test_the_issues_case_stale_answers_one_short_of_exposure_fails_plain_verification(run: Run,
                                                                                    tmp_path: Path) -> None:
    resolver, tasks, run_dir = run
    folder = tmp_path / run_dir.name
    shutil.copytree(run_dir, folder)
    before = load_run(folder).summary
    victim, honest = forge_stale_answer(folder)
    forged = load_run(folder)
    assert forged.summary["stale_answers"] == before["stale_answers"] - 1
    assert forged.summary["exposure"] == before["exposure"]  # e.g. 28 stale answers against an exposure of 29
    # Every other plain check is satisfied: gold, verdicts and counts, stale.csv, the catalog's figures.
    assert verify_rows(resolver, tasks, forged.rows, forged.summary).ok
    assert stale_file_disagreements(folder, forged.rows) == []
    catalog = SimpleNamespace(run_id=7, tasks=forged.summary["tasks"], accuracy=forged.summary["accuracy"],
                              verdicts=dict(forged.summary["verdicts"]), stale_answers=forged.summary["stale_answers"],
                              exposure=forged.summary["exposure"], mean_cost_units=forged.summary["mean_cost_units"])
    assert catalog_disagreements(catalog, forged.rows) == []
    # The arm's rule is not: the task, its template, the rule and both values are named.
    [broken] = arm_rule_disagreements(RULE, tasks, forged.rows)
    assert broken.task_id == victim
    text = str(broken)
    assert text.startswith(f"task {victim}: template {honest['template']}: breaks docs/rules.md")
    assert '"Arm correctness" (grounding_no_freshness_tiers answers every task equal to gold at its planned ' \
           "vintage)" in text
    assert f"answer {canonical(honest['gold_at_t'])}, gold_planned {canonical(honest['gold_planned'])}" in text


def test_a_transport_failure_is_not_judged_a_budget_failure_is(run: Run) -> None:
    _, tasks, run_dir = run
    rows = [dict(r) for r in load_run(run_dir).rows]
    rows[0].update(answer=None, transport_error="saas: 503", verdict="transport_failure")  # not the arm's answer
    rows[1].update(answer=None, budget_error="asked for a 9th read", verdict="budget_exhausted")
    [broken] = arm_rule_disagreements(RULE, tasks, rows)
    assert broken.task_id == rows[1]["task_id"] and "answer none (budget exhausted)" in str(broken)


def test_hierarchical_is_judged_on_single_source_tasks_only(run: Run) -> None:
    _, tasks, run_dir = run
    rows = [dict(r) for r in load_run(run_dir).rows]
    by_tier = {tier: next(i for i, t in enumerate(tasks) if t.template.task_tier == tier) for tier in (1, 2)}
    for i in by_tier.values():
        rows[i]["answer"] = "not the gold"
    found = {d.task_id for d in arm_rule_disagreements(ARM_RULES["hierarchical"], tasks, rows)}
    assert found == {tasks[by_tier[1]].task_id}
