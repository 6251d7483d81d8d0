"""Compare the per-task reads and verdicts of two results roots: every run's every task must have read the same.

    python bench/compare_traces.py BEFORE_RESULTS AFTER_RESULTS     # exit 1, naming each difference

A results root is `<state>/results` (one folder per world, one per scenario, one per experiment hash and code
version). Runs are matched by world and scenario folder (arm, policy, T', T, agent, SaaS profile, world), not by
experiment hash: a change that re-registers the measures changes the registry hash and so every experiment hash,
while every read must stay the same. Per task (matched by task id) it compares:

- each trace's route, rows and reads (store, table, entity class, planned and observed day, observed hash, rows,
  accesses): what `inputs_read` is made of (`orchestration/lineage.py`), so equal reads give equal input
  partitions;
- the verdict, the answer and its text, the served and planned vintages, gold at T and at the served time.

The trace's free-text `note` (which names who asked: a template before issue 45, a measure after) is not compared,
and a table that is a path under the state folder (contract documents) is compared relative to that folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TASK_FIELDS = ("verdict", "answer", "answer_text", "served_vintage", "planned_vintage", "gold_at_t", "gold_served",
               "routes", "exposed")


def runs(root: Path) -> dict[str, Path]:
    """world/scenario -> the run folder holding tasks.jsonl (the only one per scenario in a fresh state folder)."""
    out: dict[str, Path] = {}
    for tasks in sorted(root.glob("*/*/*/tasks.jsonl")):
        key = f"{tasks.parents[2].name}/{tasks.parents[1].name}"
        if key in out:
            raise SystemExit(f"{root}: two runs of {key}; compare state folders with one run per scenario")
        out[key] = tasks.parent
    return out


def _reads(task: dict[str, Any], state: str) -> list[Any]:
    """The traces without their note, with the state folder's path replaced by `<state>` (two state folders)."""
    text = json.dumps([{k: v for k, v in trace.items() if k != "note"} for trace in task.get("traces", [])])
    return json.loads(text.replace(json.dumps(state)[1:-1], "<state>"))


def compare_run(before: Path, after: Path) -> list[str]:
    """Run folders are <state>/results/<world>/<scenario>/<run>: the state folder is four levels up."""
    def load(folder: Path) -> dict[str, dict[str, Any]]:
        return {t["task_id"]: t for t in map(json.loads, (folder / "tasks.jsonl").read_text().splitlines())}

    a, b = load(before), load(after)
    problems = [f"task {tid}: only in {'before' if tid in a else 'after'}" for tid in sorted(set(a) ^ set(b))]
    for tid in sorted(set(a) & set(b)):
        for field in TASK_FIELDS:
            if a[tid].get(field) != b[tid].get(field):
                problems.append(f"task {tid}: {field} {a[tid].get(field)!r} -> {b[tid].get(field)!r}")
        if _reads(a[tid], str(before.parents[3])) != _reads(b[tid], str(after.parents[3])):
            problems.append(f"task {tid}: reads differ")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    before, after = runs(Path(argv[0])), runs(Path(argv[1]))
    problems = [f"run {k}: only in {'before' if k in before else 'after'}" for k in sorted(set(before) ^ set(after))]
    tasks = 0
    for key in sorted(set(before) & set(after)):
        problems += [f"{key}: {p}" for p in compare_run(before[key], after[key])]
        tasks += sum(1 for _ in (before[key] / "tasks.jsonl").open())
    for p in problems:
        print(p)
    common = len(set(before) & set(after))
    print(f"{common} runs, {tasks} tasks compared: " + ("equal" if not problems else f"{len(problems)} differences"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
