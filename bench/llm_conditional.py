"""Conditional staleness of an LLM cell (issue 45): of the answers where the model called the measure and arguments
the deterministic agent calls and answered the value that call returned, how many were stale, against the
exposure of those same tasks. Also, per cell: accuracy, the measure chosen right, grounded and copied answers,
median prompt tokens and seconds per task; and, given a second cell of the same tasks, the paired accuracy
difference with its 90% interval (tasks resampled by template, the product's cluster bootstrap).

    python bench/llm_conditional.py FOLDER [FOLDER ...] [--versus FOLDER]

FOLDER: a results folder of an LLM cell (any repeat's; every complete repeat of its experiment and code version is
read, as `results show` does). More folders of the same experiment hash join the cell: the repeats of one run
whose folders carry different code-version labels (a repeat's label is the working tree's when it starts).
`--versus`: another cell of the same task set (the raw-views setting), paired per task.

The deterministic agent's call is computed from the question (its template's measure with the parsed parameters,
checked by the semantic model as any call is), not read from a deterministic run: the comparison needs no second
run, and it is the call the deterministic agent makes (tests/test_deterministic_agent.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def deterministic_call(question: str) -> str:
    from churn_assets.grounding.measures import SemanticModel
    from churn_assets.tasks.parser import parse_question

    parsed = parse_question(question)
    return SemanticModel().check(parsed.template.measure, parsed.params).describe()


def chose_and_used(row: Mapping[str, Any]) -> tuple[bool, bool]:
    """(the model called the deterministic agent's call, and answered the value that call returned)."""
    from churn_assets.tasks.templates import TEMPLATES_BY_ID

    if row.get("parse_error") or row.get("budget_error"):
        return False, False  # no answer: it used nothing
    wanted = deterministic_call(str(row["question_text"]))
    values = [c["value"] for c in row.get("measures_called") or [] if c["call"] == wanted]
    if not values:
        return False, False
    answer_type = TEMPLATES_BY_ID[str(row["template"])].answer
    answer = row.get("answer")
    for value in values:
        typed = answer_type.normalize(value)
        if (typed is None and answer is None and row.get("answer_text")) or (
                typed is not None and answer is not None and answer_type.equal(answer, typed)):
            return True, True
    return True, False


def cell_figures(rows_by_repeat: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    from churn_assets.evaluation.verdicts import CORRECT, STALE_VERDICTS

    rows = [r for rows in rows_by_repeat for r in rows]
    judged = [(r, *chose_and_used(r)) for r in rows]
    conditional = [r for r, chose, used in judged if chose and used]
    tokens = [r["usage"]["input_tokens"] for r in rows if r.get("usage")]
    seconds = [r["usage"]["seconds"] for r in rows if r.get("usage")]
    return {
        "repeats": len(rows_by_repeat), "answers": len(rows),
        "correct": sum(r["verdict"] == CORRECT for r in rows),
        "stale": sum(r["verdict"] in STALE_VERDICTS for r in rows),
        "stale_per_repeat": [sum(r["verdict"] in STALE_VERDICTS for r in rs) for rs in rows_by_repeat],
        "exposed": sum(bool(r.get("exposed")) for r in rows),
        "with_a_measure_call": sum(bool(r.get("measure_calls")) for r in rows),
        "chose_the_deterministic_call": sum(chose for _, chose, _ in judged),
        "conditional_answers": len(conditional),
        "conditional_stale": sum(r["verdict"] in STALE_VERDICTS for r in conditional),
        "conditional_exposed": sum(bool(r.get("exposed")) for r in conditional),
        "grounded": sum(r.get("grounded") is True for r in rows),
        "judged": sum(r.get("grounded") is not None for r in rows),
        "copied_example": sum(r.get("copied_example") is True for r in rows),
        "median_input_tokens": statistics.median(tokens) if tokens else None,
        "median_seconds": statistics.median(seconds) if seconds else None,
    }


def paired_difference(a: Sequence[Sequence[Mapping[str, Any]]], b: Sequence[Sequence[Mapping[str, Any]]]
                      ) -> tuple[float, tuple[float, float]]:
    """Mean over tasks of (a's share of correct repeats - b's), with its 90% cluster-bootstrap interval."""
    from churn_assets.evaluation.stats import cluster_bootstrap_interval
    from churn_assets.evaluation.verdicts import CORRECT

    def share(cell: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, float]:
        out: dict[str, list[int]] = {}
        for rows in cell:
            for r in rows:
                out.setdefault(str(r["task_id"]), []).append(r["verdict"] == CORRECT)
        return {t: sum(v) / len(v) for t, v in out.items()}

    sa, sb = share(a), share(b)
    if set(sa) != set(sb):
        raise SystemExit("the two cells do not answer the same tasks")
    templates = {str(r["task_id"]): str(r["template"]) for r in a[0]}
    diff = {t: sa[t] - sb[t] for t in sa}
    return statistics.fmean(diff.values()), cluster_bootstrap_interval(diff, templates)


def read_cell(*folders: Path) -> list[list[dict[str, Any]]]:
    """The complete repeats of the folders' experiment (one experiment hash: the folder names' first part): each
    folder's experiment as `results show` reads it, and a repeat folder whose repeat 0 has another code-version
    label on its own."""
    from churn_assets.errors import UserFacingError
    from churn_assets.evaluation.repeats import experiment_keys
    from churn_assets.evaluation.results import ResultsStore, RunKey, parse_folder_name

    hashes = {f.name.split("__")[0] for f in folders}
    if len(hashes) > 1:
        raise SystemExit(f"the folders are of {len(hashes)} experiments ({', '.join(sorted(hashes))}): give one's")
    keys: dict[int, RunKey] = {}
    for folder in (f.resolve() for f in folders):
        store = ResultsStore(folder.parents[2])
        try:
            found = experiment_keys(folder)
        except UserFacingError:  # its repeat 0 carries another code-version label
            found = []
        if not found:  # a repeat folder alone
            base, repeat, _retry = parse_folder_name(folder.name)
            experiment_hash, _, code = base.partition("__")
            own = store.latest_complete(RunKey(folder.parent.parent.name, folder.parent.name, experiment_hash, code,
                                               repeat=repeat))
            found = [own] if own is not None else []
        if not found:
            raise SystemExit(f"{folder}: no complete repeat")
        for k in found:
            keys.setdefault(k.repeat, k)
    store = ResultsStore(folders[0].resolve().parents[2])
    return [store.read_tasks(keys[r]) for r in sorted(keys)]


def line(name: str, f: Mapping[str, Any]) -> str:
    n = f["answers"]
    tokens = "-" if f["median_input_tokens"] is None else f"{f['median_input_tokens']:,.0f}"
    seconds = "-" if f["median_seconds"] is None else f"{f['median_seconds']:.1f}"
    return (f"| {name} | {f['repeats']} | {f['correct']}/{n} | {', '.join(map(str, f['stale_per_repeat']))} "
            f"| {f['exposed']} | {f['with_a_measure_call']} | {f['chose_the_deterministic_call']} "
            f"| {f['conditional_answers']}: {f['conditional_stale']} stale, {f['conditional_exposed']} exposed "
            f"| {f['grounded']}/{f['judged']} | {f['copied_example']} | {tokens} | {seconds} |")


HEADER = ("| cell | K | correct | stale per repeat | exposed answers | with a measure call | the deterministic call "
          "| conditional: stale, exposed | grounded / judged | copied example | median prompt tokens | median s |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, nargs="+")
    parser.add_argument("--versus", type=Path, default=None)
    args = parser.parse_args(argv)
    cells = [(args.folder[0], read_cell(*args.folder))] + (
        [(args.versus, read_cell(args.versus))] if args.versus else [])
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    for folder, rows in cells:
        print(line(folder.parent.name, cell_figures(rows)))
    if args.versus:
        mean, (lo, hi) = paired_difference(cells[0][1], cells[1][1])
        print(f"\npaired accuracy difference (first - versus), mean over tasks: {100 * mean:+.1f} points, "
              f"90% interval [{100 * lo:+.1f}, {100 * hi:+.1f}] (tasks resampled by template)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
