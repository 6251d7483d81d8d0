"""The LLM agent's table (docs/llm.md) from the cells' results folders.

    python bench/llm_table.py FOLDER [FOLDER ...] [--repeats K] [--load FOLDER=LOW-HIGH ...]

Each FOLDER is the results folder `churnbench run --agent llm --repeats K` printed for a cell (any repeat's); a row
per folder, in the order given, over its experiment's first K complete repeats (the product's own
`evaluation/repeats.read_repeats`, as `results show` reports it): accuracy mean with its 90% interval (clustered
by template), stale answers per repeat, pass^K, stability, staleness awareness, median tool calls (p90), median
tokens in / out, median seconds per task (p90), the verdict mix over every answer. The script only lays the
experiment summary out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

VERDICT_NAMES = {"correct": "correct", "freshness_error": "freshness", "mixed_vintage_error": "mixed",
                 "reasoning_error": "reasoning", "parse_failure": "parse", "transport_failure": "transport",
                 "unattributed_error": "unattributed", "budget_exhausted": "budget_exhausted"}
HEADER = ("| cell (arm, policy, T') | accuracy mean [90%] | stale answers per repeat | pass^K | stability | stated "
          "as-of day = oldest read | median tool calls (p90) | median tokens in / out | median s per task (p90) | "
          "verdicts of the answers | measure calls (answers with one) | grounded / judged | copied example | load |")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _median_p90(eff: dict[str, Any], name: str, digits: int = 1) -> str:
    s = eff.get(name)
    return "-" if not s else f"{s['median']:.{digits}f} ({s['p90']:.{digits}f})"


def row(cell: dict[str, Any], e: dict[str, Any], load: str = "") -> str:
    """One cell's row: `cell` its identity's experiment part (arm, policy id, T'), `e` its experiment summary."""
    k = e["repeats"]
    lo, hi = e["accuracy_interval_90"]
    eff, aware = e["efficiency"], e["staleness_awareness"]
    mix = ", ".join(f"{n} {VERDICT_NAMES[v]}" for v, n in e["verdict_totals"].items() if n)
    tokens = "-" if not eff.get("input_tokens") else \
        f"{eff['input_tokens']['median']:,.0f} / {eff['output_tokens']['median']:,.0f}"
    stated = "-" if not aware.get("applicable") else \
        f"{aware['stated_equals_oldest_observed']}/{aware['answers']} (stated {aware['stated']})"
    g = e.get("grounding") or {}  # summaries written before issue 45 have none
    grounding = ("- | - | -" if not g else f"{g['measure_calls']} ({g['answers_with_a_measure_call']}) | "
                 f"{g['grounded']}/{g['judged']} | {g['copied_example']}")
    return (f"| {cell['arm']} {cell['policy_id']}, {cell['t_prime']} | {_pct(e['accuracy_mean'])} "
            f"[{_pct(lo)}-{_pct(hi)}] | {', '.join(str(x) for x in e['stale_answers_per_repeat'])} "
            f"| {_pct(e['pass_hat_k'][str(k)])} | {e['stable_tasks']}/{e['tasks']} | {stated} "
            f"| {_median_p90(eff, 'tool_calls')} | {tokens} | {_median_p90(eff, 'seconds')} | {mix} | {grounding} "
            f"| {load} |")


def main(argv: list[str] | None = None) -> int:
    from churn_assets.errors import UserFacingError
    from churn_assets.evaluation.repeats import experiment_keys, read_repeats
    from churn_assets.evaluation.results import ResultsStore

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="results folders of the cells (any repeat's)")
    parser.add_argument("--repeats", type=int, default=3, help="K: the first K complete repeats (default 3)")
    parser.add_argument("--load", action="append", default=[], metavar="FOLDER=RANGE",
                        help="the load average range to print in a cell's row (repeatable)")
    args = parser.parse_args(argv)
    loads = dict(item.split("=", 1) for item in args.load)
    print(HEADER)
    print("|" + " --- |" * (HEADER.count(" | ") + 1))
    for folder in args.folders:
        try:
            keys = experiment_keys(folder, args.repeats)
        except UserFacingError as e:
            print(f"llm_table: {e}", file=sys.stderr)
            return 1
        if len(keys) < args.repeats:
            print(f"llm_table: {folder}: {len(keys)} complete repeat(s), not {args.repeats}", file=sys.stderr)
            return 1
        store = ResultsStore(folder.resolve().parents[2])
        cell = json.loads((store.root / keys[0].world / keys[0].scenario_key / keys[0].folder_name
                           / "identity.json").read_text())["experiment"]
        e = read_repeats(store, keys, cell["t"], deterministic=False)
        print(row(cell, e, loads.get(str(folder), loads.get(folder.name, ""))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
