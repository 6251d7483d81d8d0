"""The regression gate for a stochastic agent (issue 33, item 6), and the measurement of that gate.

Pure values: no Dagster, no stores. The deterministic gate (`sweeps/regression.py`) asks that nothing moves; a
model's answers move between any two runs, so this gate asks whether accuracy *dropped*, beyond what the
runs' own noise explains:

- per cell, per task i: d_i = (share of the current run's repeats that are correct) - (the baseline's share);
  the tasks are paired by task id (both runs answer the same task set);
- D = mean of d_i, with the cluster-robust standard error SE over templates (`evaluation/stats.py`): tasks of
  one template share wording and reads, so their differences are not independent;
- one-sided test of "no drop": the cell fails when t = D / SE < -t_(1 - a; G - 1), Student's t with G - 1
  degrees of freedom for G templates (a clustered SE rests on G clusters, not on the task count: with the
  normal quantile instead, synthetic A/A runs of 12 templates gave false alarms above alpha), a = alpha / C for
  C cells (Bonferroni, so the whole gate's false-alarm rate stays at most alpha); SE = 0 (one template, or no
  difference anywhere) fails only a negative D;
- every result states its minimum detectable effect, MDE = (t_(1 - a) + t_power) * SE: the drop in accuracy
  the gate detects with probability `POWER` (0.8) at that SE.

`ALPHA` (0.05, one-sided) is the documented level; a baseline file may set its own `alpha`.

The baseline (`baselines/regression-llm-<model>.json`, written by `churnbench regression --agent llm
--update-baseline`) holds per cell, per task, the template and the verdict of every repeat, and the config
hashes the deterministic gate checks; a changed hash fails the gate (the baseline must be remade on purpose), a
changed agent id (other settings of the same model) is reported and compared anyway: that is what the gate is
for.

The gate is measured, not assumed (`aa_false_alarms`, `power_against`): K >= 10 repeats of one configuration
split at random into two halves many times (A/A: every alarm is a false one), and halves of two configurations
(power). `repeats_vary` says whether the repeats differ at all: when every task's repeats are all correct or all
wrong, every A/A difference is 0 and the gate is untested, whatever rate comes out.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.stats import (
    cluster_standard_error,
    student_t_cdf,
    student_t_quantile,
    wilson_interval,
)
from churn_assets.evaluation.verdicts import CORRECT
from churn_assets.sweeps.regression import _flat_hashes
from churn_assets.unique_keys import load_json, not_text

ALPHA = 0.05
POWER = 0.8
BASELINE_KIND = "stochastic"
BASELINE_FORMAT = 1
MIN_COMPARISONS = 200
MIN_MEASURED_REPEATS = 10

Verdicts = Mapping[str, Sequence[str]]  # task id -> the verdict of each repeat


class StochasticGateError(UserFacingError, ValueError):
    """Verdicts the gate cannot compare (different task sets, no repeats), or a baseline it cannot read."""


@dataclass(frozen=True)
class PairedTest:
    """One cell's paired comparison: current minus baseline accuracy, its clustered standard error, the
    one-sided test at `alpha` and the minimum detectable effect."""

    tasks: int
    templates: int
    baseline_repeats: int
    current_repeats: int
    baseline_accuracy: float
    current_accuracy: float
    difference: float
    standard_error: float
    t: float | None  # D / SE; None when the standard error is 0
    p_value: float | None  # one-sided, P(T <= t), G - 1 degrees of freedom
    alpha: float
    mde: float
    significant_drop: bool

    @property
    def no_variance(self) -> bool:
        return self.standard_error == 0.0

    def describe(self) -> str:
        test = (f"t {self.t:+.2f}, one-sided p {self.p_value:.3f}" if self.t is not None and self.p_value is not None
                else "no variance between the runs (SE 0): only a drop in every task could be seen")
        verdict = "DROP (significant)" if self.significant_drop else "no significant drop"
        return (f"accuracy {100 * self.baseline_accuracy:.1f}% -> {100 * self.current_accuracy:.1f}% "
                f"({100 * self.difference:+.1f} points, SE {100 * self.standard_error:.1f}; {test}; alpha "
                f"{self.alpha:.4g}); minimum detectable drop {100 * self.mde:.1f} points at power {POWER:g}; "
                f"{self.tasks} tasks, {self.templates} templates, {self.baseline_repeats} vs {self.current_repeats} "
                f"repeat(s): {verdict}")


def correct_share(verdicts: Sequence[str]) -> float:
    if not verdicts:
        raise StochasticGateError("a task with no repeats")
    return sum(v == CORRECT for v in verdicts) / len(verdicts)


def paired_test(baseline: Verdicts, current: Verdicts, templates: Mapping[str, str], *, alpha: float = ALPHA,
                power: float = POWER) -> PairedTest:
    """The paired comparison of the module doc for one cell. `templates`: task id -> template (the clusters)."""
    if set(baseline) != set(current):
        only_b, only_c = sorted(set(baseline) - set(current)), sorted(set(current) - set(baseline))
        raise StochasticGateError(f"the runs answered different task sets ({len(only_b)} task(s) only in the "
                                  f"baseline, e.g. {only_b[:1]}; {len(only_c)} only in this run, e.g. {only_c[:1]})")
    if not baseline:
        raise StochasticGateError("no tasks to compare")
    before = {t: correct_share(v) for t, v in baseline.items()}
    now = {t: correct_share(current[t]) for t in baseline}
    diffs = {t: now[t] - before[t] for t in baseline}
    n = len(diffs)
    d = math.fsum(diffs.values()) / n
    se = cluster_standard_error(diffs, templates)
    g = len({templates[t] for t in diffs})
    df = max(1, g - 1)
    critical = student_t_quantile(1.0 - alpha, df)
    t = d / se if se > 0 else None
    p = student_t_cdf(t, df) if t is not None else None
    drop = (t < -critical) if t is not None else d < 0
    return PairedTest(
        tasks=n, templates=g,
        baseline_repeats=min(len(v) for v in baseline.values()), current_repeats=min(len(v) for v in current.values()),
        baseline_accuracy=round(math.fsum(before.values()) / n, 6),
        current_accuracy=round(math.fsum(now.values()) / n, 6),
        difference=round(d, 6), standard_error=round(se, 6), t=None if t is None else round(t, 4),
        p_value=None if p is None else round(p, 6), alpha=alpha,
        mde=round((critical + student_t_quantile(power, df)) * se, 6),
        significant_drop=drop)


# ---------------------------------------------------------------------------------------------------
# the gate over a regression sweep's cells
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StochasticGateResult:
    tests: dict[str, PairedTest] = field(default_factory=dict)  # cell label -> its test
    hash_changes: list[str] = field(default_factory=list)
    missing_cells: list[str] = field(default_factory=list)
    new_cells: list[str] = field(default_factory=list)
    incomparable: dict[str, str] = field(default_factory=dict)  # cell -> why (different task sets, ...)
    agent_change: str = ""  # "llm-abc123 -> llm-def456": reported, not failing
    alpha: float = ALPHA

    @property
    def dropped(self) -> list[str]:
        return [c for c, t in self.tests.items() if t.significant_drop]

    @property
    def passed(self) -> bool:
        return not (self.dropped or self.hash_changes or self.missing_cells or self.new_cells or self.incomparable)

    def lines(self) -> list[str]:
        """One line per cell tested, then every other finding."""
        return ([f"{'DROP' if t.significant_drop else 'ok'}: {cell}: {t.describe()}" for cell, t in self.tests.items()]
                + [f"hash changed without a baseline update: {h}" for h in self.hash_changes]
                + [f"missing cell (in the baseline, not finished now): {c}" for c in self.missing_cells]
                + [f"new cell (not in the baseline): {c}" for c in self.new_cells]
                + [f"cannot compare {c}: {why}" for c, why in self.incomparable.items()]
                + ([f"agent settings changed since the baseline ({self.agent_change}): compared anyway"]
                   if self.agent_change else []))

    def summary(self) -> str:
        per_cell = self.alpha / max(1, len(self.tests))
        head = (f"{len(self.tests)} cell(s) at alpha {self.alpha:g} one-sided (Bonferroni: {per_cell:.4g} per cell)")
        if self.passed:
            return f"stochastic regression gate passed: {head}, no significant drop, hashes equal"
        return (f"stochastic regression gate FAILED: {head}; {len(self.dropped)} significant drop(s), "
                f"{len(self.hash_changes)} hash(es) changed, {len(self.missing_cells)} cell(s) missing, "
                f"{len(self.new_cells)} new, {len(self.incomparable)} not comparable")

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary(), "alpha": self.alpha, "power": POWER,
                "tests": {c: asdict(t) for c, t in self.tests.items()}, "hash_changes": self.hash_changes,
                "missing_cells": self.missing_cells, "new_cells": self.new_cells,
                "incomparable": self.incomparable, "agent_change": self.agent_change}


def cell_verdicts(cell: Mapping[str, Any]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(task -> verdicts, task -> template) of a baseline cell or a current one (same shape)."""
    tasks = cell.get("tasks") or {}
    return ({t: list(v["verdicts"]) for t, v in tasks.items()}, {t: str(v["template"]) for t, v in tasks.items()})


def stochastic_gate(baseline: Mapping[str, Any], current: Mapping[str, Mapping[str, Any]],
                    hashes: Mapping[str, Any], agent_id: str = "") -> StochasticGateResult:
    """Compare a run's cells (label -> {"tasks": {task: {"template", "verdicts"}}}) with the baseline's."""
    alpha = float(baseline.get("alpha") or ALPHA)
    base_cells: Mapping[str, Mapping[str, Any]] = baseline.get("cells") or {}
    both = sorted(set(base_cells) & set(current))
    per_cell = alpha / max(1, len(both))
    tests: dict[str, PairedTest] = {}
    incomparable: dict[str, str] = {}
    for label in both:
        b, templates = cell_verdicts(base_cells[label])
        c, now_templates = cell_verdicts(current[label])
        try:
            tests[label] = paired_test(b, c, {**now_templates, **templates}, alpha=per_cell)
        except StochasticGateError as e:
            incomparable[label] = str(e)
    before_h, now_h = _flat_hashes(baseline.get("hashes") or {}), _flat_hashes(hashes)
    changes = [f"{k} {before_h.get(k, '-')} -> {now_h.get(k, '-')}" for k in sorted(set(before_h) | set(now_h))
               if before_h.get(k) != now_h.get(k)]
    before_agent = str(baseline.get("agent_id") or "")
    agent_change = f"{before_agent} -> {agent_id}" if agent_id and before_agent and agent_id != before_agent else ""
    return StochasticGateResult(tests, changes, sorted(set(base_cells) - set(current)),
                                sorted(set(current) - set(base_cells)), incomparable, agent_change, alpha)


def make_stochastic_baseline(cells: Mapping[str, Mapping[str, Any]], hashes: Mapping[str, Any], *, agent_id: str,
                             model: str, model_settings: Mapping[str, Any], repeats: int, sweep_id: str,
                             spec: Mapping[str, Any], alpha: float = ALPHA, code_version: str = "") -> dict[str, Any]:
    return {"format": BASELINE_FORMAT, "kind": BASELINE_KIND, "model": model, "agent_id": agent_id,
            "model_settings": dict(model_settings), "repeats": repeats, "alpha": alpha, "power": POWER,
            "sweep_id": sweep_id, "made_with_code_version": code_version, "hashes": dict(hashes),
            "cells": {k: dict(v) for k, v in sorted(cells.items())}, "spec": dict(spec)}


def load_stochastic_baseline(path: Path) -> dict[str, Any]:
    try:
        data = load_json(path.read_text(), str(path))
    except FileNotFoundError:
        raise StochasticGateError(f"stochastic baseline {path}: file not found (make one with `churnbench "
                                  "regression --agent llm --update-baseline`)") from None
    except json.JSONDecodeError as e:
        raise StochasticGateError(f"stochastic baseline {path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise StochasticGateError(not_text(f"stochastic baseline {path}", e)) from None
    if not (isinstance(data, dict) and data.get("format") == BASELINE_FORMAT and data.get("kind") == BASELINE_KIND
            and isinstance(data.get("cells"), dict)):
        raise StochasticGateError(f"stochastic baseline {path}: not a format-{BASELINE_FORMAT} baseline of kind "
                                  f"{BASELINE_KIND!r} (needs `format`, `kind`, `alpha`, `hashes` and `cells`)")
    return data


def llm_baseline_path(model: str, folder: Path) -> Path:
    """`<folder>/regression-llm-<model>.json`, the model's name reduced to letters, digits, `.`, `_`, `-`."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model.rsplit("/", 1)[-1]).strip("-.") or "model"
    return folder / f"regression-llm-{slug}.json"


def report_markdown(result: StochasticGateResult, baseline_path: str) -> str:
    lines = [f"**{result.summary()}** (baseline `{baseline_path}`)", ""]
    lines += [f"- {line}" for line in result.lines()] or ["- no cell compared"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------
# measuring the gate: A/A false alarms and power
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateMeasurement:
    """Alarms in `comparisons` random half-versus-half comparisons, with the Wilson 90% interval of the rate.
    The comparisons reuse the same repeats, so they are not independent draws: the interval is a guide."""

    kind: str  # "a/a" or "power"
    comparisons: int
    alarms: int
    rate: float
    interval_90: tuple[float, float]
    alpha: float
    repeats: int  # repeats available (per configuration)
    group_size: int  # repeats on each side of a comparison
    tasks: int
    median_mde: float
    untested: str = ""  # why the measurement says nothing (the repeats do not vary), else ""

    @property
    def aa_rule_holds(self) -> bool | None:
        """A/A only: the false-alarm interval contains alpha or its upper bound is at most 2 alpha (None:
        untested, or a power measurement). The rule alone does not make a gate acceptable: `gate_verdict`."""
        if self.kind != "a/a" or self.untested:
            return None
        lo, hi = self.interval_90
        return lo <= self.alpha <= hi or hi <= 2 * self.alpha

    def describe(self) -> str:
        lo, hi = self.interval_90
        what = "false alarms" if self.kind == "a/a" else "detections (power)"
        text = (f"{what}: {self.alarms}/{self.comparisons} = {100 * self.rate:.1f}% (90% interval "
                f"{100 * lo:.1f}-{100 * hi:.1f}%) at alpha {self.alpha:g}; {self.group_size} vs {self.group_size} "
                f"repeats of {self.repeats}, {self.tasks} tasks; median minimum detectable drop "
                f"{100 * self.median_mde:.1f} points")
        if self.untested:
            return f"GATE UNTESTED: {self.untested}; {text}"
        if self.kind == "a/a":
            text += ("; the A/A rule holds" if self.aa_rule_holds
                     else "; the A/A rule fails (interval above alpha and above 2 alpha)")
        return text


@dataclass(frozen=True)
class GateVerdict:
    """What `gate-power` concludes: `acceptable` only for a gate that both rarely cries wolf (A/A) and would see a
    real drop (power against another configuration at least `POWER`); `no power` or `not acceptable` otherwise."""

    verdict: str  # "acceptable", "no power" or "not acceptable"
    reason: str  # why not, else ""

    @property
    def acceptable(self) -> bool:
        return self.verdict == ACCEPTABLE

    def describe(self) -> str:
        return f"gate: {self.verdict}" + (f" ({self.reason})" if self.reason else "")


ACCEPTABLE, NO_POWER, NOT_ACCEPTABLE = "acceptable", "no power", "not acceptable"


def gate_verdict(aa: GateMeasurement, power: GateMeasurement | None) -> GateVerdict:
    """The gate's verdict from its A/A measurement and its power against another configuration (None: not
    measured). A gate that never alarms passes any A/A rule, so the A/A rule alone would call a gate that can see
    nothing "acceptable" (issue 46): without measured power of at least `POWER` the verdict is "no power". A gate
    with too many false alarms is "not acceptable" whatever its power: that failure is not a lack of power."""
    if aa.kind != "a/a" or (power is not None and power.kind != "power"):
        raise ValueError("gate_verdict takes an A/A measurement and a power measurement")
    if aa.untested:
        return GateVerdict(NO_POWER, "the repeats do not vary, so no drop can be seen")
    if not aa.aa_rule_holds:
        lo, hi = aa.interval_90
        return GateVerdict(NOT_ACCEPTABLE, f"false alarms {100 * aa.rate:.1f}%, 90% interval {100 * lo:.1f}-"
                                           f"{100 * hi:.1f}%, above alpha {aa.alpha:g} and above 2 alpha")
    if power is None:
        return GateVerdict(NO_POWER, "power not measured: give --against RUN, the `off` ablation's repeats")
    if power.untested:
        return GateVerdict(NO_POWER, power.untested)
    if power.rate < POWER:
        return GateVerdict(NO_POWER, f"power {100 * power.rate:.1f}% against the other configuration, below "
                                     f"{100 * POWER:.0f}%")
    return GateVerdict(ACCEPTABLE, "")


def repeats_vary(matrix: Verdicts) -> bool:
    """Whether any task is correct in some repeats and not in others (the only variance the gate sees)."""
    return any(len({v == CORRECT for v in vs}) > 1 for vs in matrix.values())


def _check_matrix(matrix: Verdicts, what: str) -> int:
    counts = {len(v) for v in matrix.values()}
    if not matrix or len(counts) != 1:
        raise StochasticGateError(f"{what}: every task needs the same number of repeats (got {sorted(counts)})")
    k = counts.pop()
    if k < 2:
        raise StochasticGateError(f"{what}: {k} repeat(s); splitting needs at least 2")
    return k


def _pick(matrix: Verdicts, indices: Sequence[int]) -> dict[str, list[str]]:
    return {t: [vs[i] for i in indices] for t, vs in matrix.items()}


def _measure(kind: str, pairs: list[tuple[dict[str, list[str]], dict[str, list[str]]]], templates: Mapping[str, str],
             alpha: float, repeats: int, group: int, untested: str) -> GateMeasurement:
    tests = [paired_test(b, c, templates, alpha=alpha) for b, c in pairs]
    alarms = sum(t.significant_drop for t in tests)
    n = len(tests)
    return GateMeasurement(kind, n, alarms, round(alarms / n, 4), wilson_interval(alarms, n), alpha, repeats, group,
                           tests[0].tasks, round(statistics.median(t.mde for t in tests), 6), untested)


def aa_false_alarms(matrix: Verdicts, templates: Mapping[str, str], *, comparisons: int = 400,
                    alpha: float = ALPHA, seed: int = 0) -> GateMeasurement:
    """A/A: `comparisons` times, split the K repeats at random into two halves of K // 2 (one left out when K
    is odd), gate the second half against the first. Every alarm is false. Says "untested" when the repeats do
    not vary."""
    k = _check_matrix(matrix, "A/A")
    if comparisons < 1:
        raise StochasticGateError("at least one comparison")
    rng = random.Random(seed)
    half = k // 2
    pairs = []
    for _ in range(comparisons):
        order = list(range(k))
        rng.shuffle(order)
        pairs.append((_pick(matrix, order[:half]), _pick(matrix, order[half:2 * half])))
    untested = "" if repeats_vary(matrix) else (
        f"the {k} repeats give every task the same verdict correctness, so every A/A difference is 0 and the "
        "false-alarm rate measures nothing")
    return _measure("a/a", pairs, templates, alpha, k, half, untested)


def power_against(baseline: Verdicts, other: Verdicts, templates: Mapping[str, str], *, comparisons: int = 400,
                  alpha: float = ALPHA, seed: int = 0) -> GateMeasurement:
    """Power: `comparisons` times, a random half of the baseline configuration's repeats against a random half
    (same size) of the other configuration's, on the same tasks; a detection is a significant drop."""
    k_b, k_o = _check_matrix(baseline, "power (baseline)"), _check_matrix(other, "power (other)")
    if set(baseline) != set(other):
        raise StochasticGateError("power: the two configurations answered different task sets")
    rng = random.Random(seed)
    half = min(k_b, k_o) // 2
    pairs = [(_pick(baseline, rng.sample(range(k_b), half)), _pick(other, rng.sample(range(k_o), half)))
             for _ in range(comparisons)]
    untested = "" if repeats_vary(baseline) else (
        "the baseline configuration's repeats do not vary: its A/A rate is untested, so is this power")
    return _measure("power", pairs, templates, alpha, min(k_b, k_o), half, untested)
