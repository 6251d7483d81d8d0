"""Compare the evaluated cells two state folders hold: the same scenario and experiment hash, every summary field
equal apart from where the results are, the code version and the timing fields. Or two sweep reports' cell tables
(`cells.csv`): the same cells (arm, policy, T', T, world), every column equal apart from the results path, `reused`
and `status`.

    python bench/compare_cells.py STATE_A STATE_B [--world default-s42-2906f8]
    python bench/compare_cells.py CELLS_A.csv CELLS_B.csv     (each a sweep report's cells.csv)

Used to check that a change left evaluated figures alone (issue 36: `cache-age` before and after). Repeat and
retry folders are left out (a cell's first answering is compared). Exits 1 when a common cell differs or when
there is no common cell.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

# Fields that say where, when, how fast or with which code a cell ran, not what it found.
NOT_FIGURES = {"results", "code_version", "mean_latency_ms", "efficiency", "saas"}
NOT_CSV_FIGURES = {"results", "reused", "status"}  # where a sweep's cell is, and whether this run evaluated it


def cells(state: Path, world: str) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((state / "results" / world).glob("*/*/summary.json")):
        if "__rep" in path.parent.name or "__retry" in path.parent.name:
            continue
        summary = json.loads(path.read_text(encoding="utf-8"))
        out.setdefault((path.parent.parent.name, str(summary.get("experiment_hash"))), summary)
    return out


def table_cells(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {(f"{r['world_id']} {r['arm']} {r['policy']} T'={r['t_prime']} T={r['t']}", r["kind"]):
            {k: v for k, v in r.items() if k not in NOT_CSV_FIGURES} for r in rows}


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [f for f in sorted((set(a) | set(b)) - NOT_FIGURES) if a.get(f) != b.get(f)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("state_a", type=Path)
    parser.add_argument("state_b", type=Path)
    parser.add_argument("--world", default="default-s42-2906f8")
    args = parser.parse_args(argv)
    if args.state_a.suffix == ".csv" and args.state_b.suffix == ".csv":
        a, b = table_cells(args.state_a), table_cells(args.state_b)
    else:
        a, b = cells(args.state_a, args.world), cells(args.state_b, args.world)
    common = sorted(set(a) & set(b))
    differ = 0
    for key in common:
        fields = differences(a[key], b[key])
        if fields:
            differ += 1
            print(f"{key[0]} ({key[1]}): differs in {', '.join(fields)}")
    print(f"{len(common)} cells compared ({len(a)} in {args.state_a}, {len(b)} in {args.state_b}): "
          + ("equal" if common and not differ else f"{differ} differ"))
    return 0 if common and not differ else 1


if __name__ == "__main__":
    sys.exit(main())
