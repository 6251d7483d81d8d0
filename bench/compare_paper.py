"""Compare two `churnbench paper --json` outputs: every figure of every run must be equal.

    python bench/compare_paper.py BEFORE.json AFTER.json        # exit 1, naming each difference

What is compared, per run (matched by arm, policy, T' and T): every verdict count, stale answers, exposure,
prediction, accuracy, mean cost and the route mix, plus the world, T and the SaaS profile of the whole
output. What is ignored: wall-clock figures (`seconds`, `mean_latency_ms`), SaaS calls and 429s absorbed
(docs/rules.md, "Scenario key and hashes": they may differ between identical runs) and the results folder (it
names the code version).

A restructuring that must change no figure (issue 17) is checked with it: `paper --json` before and after. A field
that only AFTER has (a figure the change adds, such as issue 34's `window`) is named, not compared: "equal on
today's fields"; a field that only BEFORE has is a difference.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

IGNORED_RUN_FIELDS = frozenset({"mean_latency_ms", "saas_calls", "saas_429s", "results"})
IGNORED_TOP_FIELDS = frozenset({"seconds", "runs"})
RUN_KEY = ("arm", "policy", "t_prime", "t")


def _runs(doc: Mapping[str, Any]) -> dict[tuple[str, ...], dict[str, Any]]:
    return {tuple(str(r[k]) for k in RUN_KEY): {k: v for k, v in r.items() if k not in IGNORED_RUN_FIELDS}
            for r in doc["runs"]}


def new_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Top-level fields and run fields that only AFTER has (not compared)."""
    runs_before = {k for r in before["runs"] for k in r}
    return sorted(set(after) - set(before)) + sorted({f"runs.{k}" for r in after["runs"] for k in r}
                                                     - {f"runs.{k}" for k in runs_before})


def differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Every figure of BEFORE's fields that differs, as readable lines (empty: the outputs agree)."""
    out = [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in sorted(set(before) - IGNORED_TOP_FIELDS)
           if before.get(k) != after.get(k)]
    a, b = _runs(before), _runs(after)
    out += [f"run {' '.join(k)}: only before" for k in sorted(a.keys() - b.keys())]
    out += [f"run {' '.join(k)}: only after" for k in sorted(b.keys() - a.keys())]
    for k in sorted(a.keys() & b.keys()):
        for field in sorted(a[k].keys()):
            if a[k].get(field) != b[k].get(field):
                out.append(f"run {' '.join(k)}: {field} {a[k].get(field)!r} -> {b[k].get(field)!r}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    before, after = (json.loads(Path(p).read_text()) for p in argv)
    found = differences(before, after)
    for line in found:
        print(line)
    added = new_fields(before, after)
    if added:
        print(f"new in AFTER, not compared: {', '.join(added)}")
    print(f"{len(before['runs'])} runs compared: " + ("equal" if not found else f"{len(found)} difference(s)"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
