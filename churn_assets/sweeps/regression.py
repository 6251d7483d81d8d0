"""The nightly regression's gate: a regression sweep's figures against a committed baseline.

Pure values: no Dagster, no stores. `figures_of(record)` reads, per evaluated cell of a sweep record, the figures
the gate watches (verdict counts, stale answers, exposure, accuracy); `config_hashes` names what the figures were
made from (the world configs, the registry, the templates), each through its own module's hash function. A
baseline (`baselines/regression.json`) holds both, and the thresholds: how far each kind of figure may move.
`gate(baseline, figures, hashes)` says what moved beyond its threshold and which hashes changed; a changed hash
fails the gate even when no figure moved (the baseline must be remade on purpose, `--update-baseline`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.verdicts import VERDICTS
from churn_assets.files import atomic_write_text
from churn_assets.grounding.registry import load_registry
from churn_assets.sweeps.markdown import table
from churn_assets.sweeps.spec import resolve_worlds
from churn_assets.tasks.templates import templates_hash
from churn_assets.unique_keys import load_json

BASELINE_FORMAT = 1
COUNT_FIGURES = ("tasks", "stale_answers", "exposure", *(f"verdict/{v}" for v in VERDICTS))
RATIO_FIGURES = ("accuracy",)
# The deterministic agent answers the same tasks the same way: by default nothing may move at all.
DEFAULT_THRESHOLDS: dict[str, float] = {"counts": 0, "accuracy": 0.0}


class BaselineError(UserFacingError, ValueError):
    """The baseline file is missing or unreadable; the message names the file and the problem."""


def cell_label(cell: Mapping[str, Any]) -> str:
    """A cell's name in the baseline, stable across world ids (a world config edit changes the id, not the
    label): `seed 42 | grounding | tiered | gap 28`."""
    gap = (dt.date.fromisoformat(cell["t"]) - dt.date.fromisoformat(cell["t_prime"])).days
    return f"{cell.get('world_label') or cell['world_id']} | {cell['arm']} | {cell['policy']} | gap {gap}"


def figures_of(record: Mapping[str, Any]) -> dict[str, dict[str, float | int | None]]:
    """Cell label -> the gate's figures, for every evaluated cell of a sweep record (`SweepRecord.to_json()`);
    a cell that did not finish has no figures (the gate reports it missing)."""
    out: dict[str, dict[str, float | int | None]] = {}
    for outcome in record.get("outcomes", {}).values():
        if outcome.get("status") != "done":
            continue
        verdicts = outcome.get("verdicts") or {}
        accuracy = outcome.get("accuracy")
        out[cell_label(outcome["cell"])] = {
            "tasks": outcome.get("tasks"), "stale_answers": outcome.get("stale_answers"),
            "exposure": outcome.get("exposure"),
            **{f"verdict/{v}": int(verdicts.get(v, 0)) for v in VERDICTS},
            "accuracy": None if accuracy is None else round(float(accuracy), 6),
        }
    return dict(sorted(out.items()))


def config_hashes(world_configs: Mapping[str, str], registry_hash: str, templates_hash: str) -> dict[str, Any]:
    """What the figures were made from: world label -> config hash, the registry's and the templates' hashes."""
    return {"world_configs": dict(sorted(world_configs.items())), "registry": registry_hash,
            "templates": templates_hash}


@dataclass(frozen=True)
class Moved:
    cell: str
    figure: str
    baseline: float | int | None
    current: float | int | None
    threshold: float

    def describe(self) -> str:
        return f"{self.cell}: {self.figure} {self.baseline} -> {self.current} (threshold {self.threshold:g})"


@dataclass(frozen=True)
class GateResult:
    moved: list[Moved] = field(default_factory=list)
    hash_changes: list[str] = field(default_factory=list)  # "registry 1a2b... -> 3c4d..."
    missing_cells: list[str] = field(default_factory=list)  # in the baseline, not finished in this run
    new_cells: list[str] = field(default_factory=list)  # finished in this run, not in the baseline
    cells: int = 0

    @property
    def passed(self) -> bool:
        return not (self.moved or self.hash_changes or self.missing_cells or self.new_cells)

    def lines(self) -> list[str]:
        """One line per finding (empty when the gate passes)."""
        return ([f"hash changed without a baseline update: {h}" for h in self.hash_changes]
                + [f"moved: {m.describe()}" for m in self.moved]
                + [f"missing cell (in the baseline, not finished now): {c}" for c in self.missing_cells]
                + [f"new cell (not in the baseline): {c}" for c in self.new_cells])

    def summary(self) -> str:
        if self.passed:
            return f"regression gate passed: {self.cells} cell(s), every figure within its threshold, hashes equal"
        return (f"regression gate FAILED: {len(self.moved)} figure(s) moved, {len(self.hash_changes)} hash(es) "
                f"changed, {len(self.missing_cells)} cell(s) missing, {len(self.new_cells)} new")

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary(), "cells": self.cells,
                "moved": [m.__dict__ for m in self.moved], "hash_changes": self.hash_changes,
                "missing_cells": self.missing_cells, "new_cells": self.new_cells}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateResult:
        """The result as `to_json` wrote it (the report's `regression_gate.json`)."""
        return cls([Moved(**m) for m in data.get("moved", [])], list(data.get("hash_changes", [])),
                   list(data.get("missing_cells", [])), list(data.get("new_cells", [])), int(data.get("cells", 0)))


def _flat_hashes(hashes: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for name, value in hashes.items():
        if isinstance(value, Mapping):
            out.update({f"{name}[{k}]": str(v) for k, v in value.items()})
        else:
            out[name] = str(value)
    return out


def _threshold(thresholds: Mapping[str, float], figure: str) -> float:
    if figure in thresholds:
        return float(thresholds[figure])
    return float(thresholds.get("accuracy" if figure in RATIO_FIGURES else "counts", 0))


def gate(baseline: Mapping[str, Any], figures: Mapping[str, Mapping[str, Any]],
         hashes: Mapping[str, Any]) -> GateResult:
    """Compare a run's figures and hashes with the baseline. A figure moved when |current - baseline| exceeds
    its threshold (the baseline's `thresholds`: `counts`, `accuracy`, or a figure's own name); a figure present
    on one side only counts as moved."""
    thresholds = {**DEFAULT_THRESHOLDS, **(baseline.get("thresholds") or {})}
    base_cells: Mapping[str, Mapping[str, Any]] = baseline.get("cells") or {}
    moved: list[Moved] = []
    for label in sorted(set(base_cells) & set(figures)):
        before, now = base_cells[label], figures[label]
        for figure in sorted(set(before) | set(now)):
            b, c, limit = before.get(figure), now.get(figure), _threshold(thresholds, figure)
            if b is None or c is None:
                if b != c:
                    moved.append(Moved(label, figure, b, c, limit))
            elif abs(float(c) - float(b)) > limit + 1e-12:
                moved.append(Moved(label, figure, b, c, limit))
    before_h, now_h = _flat_hashes(baseline.get("hashes") or {}), _flat_hashes(hashes)
    changes = [f"{k} {before_h.get(k, '-')} -> {now_h.get(k, '-')}" for k in sorted(set(before_h) | set(now_h))
               if before_h.get(k) != now_h.get(k)]
    return GateResult(moved, changes, sorted(set(base_cells) - set(figures)), sorted(set(figures) - set(base_cells)),
                      cells=len(figures))


def make_baseline(figures: Mapping[str, Mapping[str, Any]], hashes: Mapping[str, Any], *, sweep_id: str,
                  spec: Mapping[str, Any], thresholds: Mapping[str, float] | None = None,
                  code_version: str = "") -> dict[str, Any]:
    """The baseline file's content (thresholds kept from the previous baseline when given)."""
    return {"format": BASELINE_FORMAT, "preset": spec.get("preset"), "sweep_id": sweep_id,
            "made_with_code_version": code_version,
            "thresholds": dict(thresholds or DEFAULT_THRESHOLDS), "hashes": dict(hashes),
            "cells": {k: dict(v) for k, v in sorted(figures.items())}, "spec": dict(spec)}


def load_baseline(path: Path) -> dict[str, Any]:
    try:
        data = load_json(path.read_text(), f"regression baseline {path}")
    except FileNotFoundError:
        raise BaselineError(f"regression baseline {path}: file not found (make one with "
                            "`churnbench regression --update-baseline`)") from None
    except json.JSONDecodeError as e:
        raise BaselineError(f"regression baseline {path}: not valid JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or not isinstance(data.get("cells"), dict):
        raise BaselineError(f"regression baseline {path}: not a format-{BASELINE_FORMAT} baseline (needs `format`, "
                            "`thresholds`, `hashes` and `cells`)")
    return data


def write_baseline(path: Path, baseline: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(baseline, indent=1, sort_keys=True) + "\n")


FIGURE_COLUMNS: tuple[str, ...] = ("cell", *COUNT_FIGURES, *RATIO_FIGURES)  # the report's table, left to right


def figure_rows(figures: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell: its label (the baseline's key, `|` and all) and every figure the gate watches."""
    return [{"cell": label, **{k: f.get(k) for k in FIGURE_COLUMNS[1:]}} for label, f in figures.items()]


def report_markdown(result: GateResult, figures: Mapping[str, Mapping[str, Any]], hashes: Mapping[str, Any],
                    baseline_path: str) -> str:
    """The report shown in the UI: the verdict, every finding, then every cell's figures, one table row per cell
    (`sweeps/markdown.py` escapes the `|` of the labels, so each row has one cell per column)."""
    lines = [f"**{result.summary()}** (baseline `{baseline_path}`)", ""]
    lines += [f"- {line}" for line in result.lines()] or ["- nothing moved"]
    lines += ["", table(figure_rows(figures), FIGURE_COLUMNS).rstrip("\n")]
    lines += ["", "hashes: " + ", ".join(f"{k} `{v}`" for k, v in _flat_hashes(hashes).items())]
    return "\n".join(lines)


# --- where the baseline is, and what the current configuration hashes to ------------------------------------

BASELINE_ENV = "CHURNBENCH_REGRESSION_BASELINE"  # another baseline file (a test's, a fork's)
COMMITTED_BASELINE = Path(__file__).resolve().parents[2] / "baselines" / "regression.json"  # beside the package


def baseline_path() -> Path:
    """The baseline the gate compares with: `CHURNBENCH_REGRESSION_BASELINE`, else the committed one."""
    return Path(os.environ.get(BASELINE_ENV) or COMMITTED_BASELINE)


def current_hashes(spec: Any) -> dict[str, Any]:
    """The hashes of what a regression sweep (`SweepSpec`) is made from today: each world's config, the registry
    the code reads (`CHURNBENCH_REGISTRY` or the packaged one), the template list."""
    worlds = {w.label: (w.config.config_hash if w.config is not None else w.world_id) for w in resolve_worlds(spec)}
    return config_hashes(worlds, load_registry().content_hash, templates_hash())
