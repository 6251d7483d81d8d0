"""What `verify-results` checks besides gold: the seal, the files made from `tasks.jsonl`, the catalog's figures,
and the content the warehouse reads observed.

Each check returns `verify.Disagreement`s (empty: confirmed), naming the file, the catalog row or the read:

- `seal_disagreements(run_dir, seals, key)`: the folder's files against each record of its seal (the catalog row's,
  Dagster's `eval_run` metadata), first (`seals.py`);
- `stale_file_disagreements(run_dir, rows)`: `stale.csv` made again from `tasks.jsonl`, byte for byte;
- `catalog_disagreements(row, rows)`: the catalog's figures that `tasks.jsonl` determines (tasks, accuracy, the
  verdict counts, stale answers, exposure, mean cost), recomputed from the rows;
- `warehouse_disagreements(rows, views_now)`: every warehouse read's `observed_hash` against the hash of what its
  as-of view reads now (`fabric/warehouse_content.py`): the warehouse the run read is the one there now.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from churn_assets.evaluation.results import STALE_FILE, stale_csv
from churn_assets.evaluation.seals import broken_seal
from churn_assets.evaluation.verdicts import STALE_VERDICTS, VERDICTS
from churn_assets.evaluation.verify import Disagreement
from churn_assets.seal_key import SealKey


def seal_disagreements(run_dir: Path, seals: Mapping[str, Mapping[str, Any]], key: SealKey | None = None,
                       folder_name: str | None = None) -> list[Disagreement]:
    """The folder against each record of its seal (record name -> seal), keyed ones under `key`; raises
    `seals.KeyChanged` for a seal made under another key."""
    return [Disagreement(None, "seal", None, None, where=f"files (against the {record}'s seal)", message=problem)
            for record, seal in seals.items() for problem in broken_seal(run_dir, seal, key, folder_name)]


def stale_file_disagreements(run_dir: Path, rows: Sequence[Mapping[str, Any]]) -> list[Disagreement]:
    path = run_dir / STALE_FILE
    expected = stale_csv([dict(r) for r in rows])
    try:
        found = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return [Disagreement(None, STALE_FILE, None, None, where=STALE_FILE, message=f"cannot be read ({e})")]
    if found == expected:
        return []
    listed = {line.split(",", 1)[0] for line in found.splitlines()[1:]}
    made = {line.split(",", 1)[0] for line in expected.splitlines()[1:]}
    return [Disagreement(None, STALE_FILE, sorted(listed - made), sorted(made - listed), where=STALE_FILE,
                         message=f"is not the list tasks.jsonl makes (tasks listed but not stale there: "
                                 f"{sorted(listed - made)}; stale there but not listed: {sorted(made - listed)})")]


def figures_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The catalog's figures that the rows determine."""
    counts = Counter(r.get("verdict") for r in rows)
    n = len(rows)
    out: dict[str, Any] = {
        "tasks": n, "accuracy": round(counts.get("correct", 0) / n, 4) if n else None,
        **{f"verdicts.{v}": counts.get(v, 0) for v in VERDICTS},
        "stale_answers": sum(counts.get(v, 0) for v in STALE_VERDICTS),
        "mean_cost_units": round(statistics.fmean(r["cost_units"] for r in rows), 3) if n else None,
    }
    if n and all(r.get("exposed") is not None for r in rows):
        out["exposure"] = sum(1 for r in rows if r.get("exposed"))
    return out


def catalog_disagreements(row: Any, rows: Sequence[Mapping[str, Any]]) -> list[Disagreement]:
    """The catalog row's figures (`catalog.CatalogRun`) against the ones recomputed from `tasks.jsonl`."""
    out = []
    for field, value in figures_of(rows).items():
        stored = (row.verdicts.get(field.split(".", 1)[1]) if field.startswith("verdicts.")
                  else getattr(row, field))
        if field.startswith("verdicts.") and stored is None:
            stored = 0  # a verdict the run's code did not have yet reads as none of it
        if stored != value:
            out.append(Disagreement(None, field, stored, value, where=f"catalog row {row.run_id}"))
    return out


def warehouse_reads(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """(task id, read) of every warehouse read in the rows' traces."""
    return [(str(r.get("task_id")), read) for r in rows for entry in (r.get("traces") or [])
            for read in (entry.get("reads") or []) if read.get("store") == "warehouse"]


def warehouse_disagreements(rows: Sequence[Mapping[str, Any]], views_now: Mapping[str, str]) -> list[Disagreement]:
    """Every warehouse read whose observed hash is not the hash of what its view reads now (or is missing)."""
    out = []
    for task_id, read in warehouse_reads(rows):
        view = str(read.get("table", "")).rsplit(".", 1)[-1]
        now = views_now.get(view)
        if read.get("observed_hash") != now:
            out.append(Disagreement(task_id, f"observed_hash of {read.get('table')}", read.get("observed_hash"), now,
                                    message=f"warehouse read of {read.get('table')}: observed content "
                                            f"{str(read.get('observed_hash'))[:12] or 'unhashed'}, the warehouse "
                                            f"holds {str(now)[:12]} now (it changed since the run, or the trace "
                                            "was edited)"))
    return out
