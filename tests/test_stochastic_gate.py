"""The stochastic agent's gate and its measurement, on synthetic verdict matrices with known properties.

The matrices are drawn here: tasks grouped in templates, each repeat correct with a per-task chance, shifted
per repeat and template by a shared effect (the tasks of one template move together, as a model's answers to
one wording do). Known: with no shared effect both standard errors are right; with a strong one, an A/A split
gated with the clustered standard error stays near alpha while the same gate with every task its own cluster
raises about twice as many false alarms. Repeats that never differ leave the gate untested; a real drop is
detected.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from churn_assets.sweeps.stochastic_gate import (
    ALPHA,
    POWER,
    StochasticGateError,
    aa_false_alarms,
    gate_verdict,
    llm_baseline_path,
    load_stochastic_baseline,
    make_stochastic_baseline,
    paired_test,
    power_against,
    repeats_vary,
    stochastic_gate,
)

C, W = "correct", "reasoning_error"


def synthetic(seed: int, *, templates: int = 12, per_template: int = 5, repeats: int = 20, shift: float = 0.0,
              shared_sd: float = 0.0) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(task -> verdict per repeat, task -> template): logit of correct = task base + shift + shared effect of
    (repeat, template)."""
    rng = random.Random(seed)
    tasks = [(f"t{g}_{j}", f"g{g}") for g in range(templates) for j in range(per_template)]
    base = {t: rng.gauss(1.0, 1.0) for t, _ in tasks}
    shared = [{f"g{g}": rng.gauss(0.0, shared_sd) for g in range(templates)} for _ in range(repeats)]
    matrix = {t: [C if rng.random() < 1 / (1 + math.exp(-(base[t] + shift + shared[r][g]))) else W
                  for r in range(repeats)] for t, g in tasks}
    return matrix, dict(tasks)


def test_identical_runs_pass_and_a_drop_in_most_templates_fails() -> None:
    matrix, templates = synthetic(0, repeats=4)
    same = paired_test(matrix, matrix, templates)
    assert same.difference == 0.0 and not same.significant_drop and same.no_variance and same.mde == 0.0
    worse = {t: [W] * 4 if i % 3 else v for i, (t, v) in enumerate(matrix.items())}
    drop = paired_test(matrix, worse, templates)
    assert drop.significant_drop and drop.difference < 0 and drop.t is not None and drop.t < 0
    assert drop.p_value is not None and drop.p_value < ALPHA and drop.mde > 0
    assert "DROP" in drop.describe() and "minimum detectable drop" in drop.describe()
    better = paired_test(worse, matrix, templates)
    assert not better.significant_drop  # one-sided: an improvement never fails
    with pytest.raises(StochasticGateError, match="different task sets"):
        paired_test(matrix, {t: v for t, v in list(matrix.items())[1:]}, templates)


def test_a_single_template_has_no_measurable_spread() -> None:
    matrix = {"a": [C, W], "b": [C, C]}
    one = paired_test(matrix, {"a": [W, W], "b": [C, W]}, {"a": "T", "b": "T"})
    assert one.no_variance and one.significant_drop  # SE 0 (one cluster): only the sign of a drop is seen


def test_aa_false_alarms_stay_near_alpha_with_clustered_errors_and_not_without() -> None:
    clustered = naive = comparisons = 0
    for seed in range(6):
        matrix, templates = synthetic(seed, shared_sd=1.5)
        aa = aa_false_alarms(matrix, templates, comparisons=120, seed=seed)
        alone = aa_false_alarms(matrix, {t: t for t in matrix}, comparisons=120, seed=seed)
        clustered, naive, comparisons = clustered + aa.alarms, naive + alone.alarms, comparisons + aa.comparisons
        assert aa.kind == "a/a" and aa.group_size == 10 and aa.repeats == 20 and not aa.untested
    assert clustered / comparisons <= 2 * ALPHA
    assert naive / comparisons > 2 * ALPHA and naive > 1.5 * clustered


def test_without_a_shared_effect_the_aa_rate_is_acceptable() -> None:
    matrix, templates = synthetic(3)
    aa = aa_false_alarms(matrix, templates, comparisons=200, seed=0)
    assert aa.comparisons == 200 and aa.aa_rule_holds is True
    lo, hi = aa.interval_90
    assert lo <= aa.rate <= hi and aa.describe().endswith("; the A/A rule holds")
    assert "acceptable" not in aa.describe()  # the A/A rule alone is not the gate's verdict


def test_repeats_without_variance_leave_the_gate_untested() -> None:
    matrix, templates = synthetic(1, repeats=10)
    frozen = {t: [v[0]] * 10 for t, v in matrix.items()}  # every repeat gives the first repeat's verdict
    assert repeats_vary(matrix) and not repeats_vary(frozen)
    aa = aa_false_alarms(frozen, templates, comparisons=200)
    assert aa.alarms == 0 and aa.untested and aa.aa_rule_holds is None
    assert aa.describe().startswith("GATE UNTESTED")


def test_power_against_a_weaker_configuration() -> None:
    strong, templates = synthetic(2, repeats=10, shared_sd=0.5)
    weak, _ = synthetic(2, repeats=10, shared_sd=0.5, shift=-1.5)
    power = power_against(strong, weak, templates, comparisons=200, seed=0)
    assert power.kind == "power" and power.rate >= 0.9 and power.group_size == 5
    same = power_against(strong, strong, templates, comparisons=200, seed=0)
    assert same.rate <= 2 * ALPHA  # against itself the "power" is the false-alarm rate
    with pytest.raises(StochasticGateError, match="2"):
        aa_false_alarms({t: v[:1] for t, v in strong.items()}, templates)


def test_the_gate_is_acceptable_only_with_the_aa_rule_and_power() -> None:
    """Issue 46: a gate that never alarms passes the A/A rule; it is "acceptable" only with power >= 0.8 too."""
    strong, templates = synthetic(2, repeats=10, shared_sd=0.5)
    weak, _ = synthetic(2, repeats=10, shared_sd=0.5, shift=-1.5)
    slightly, _ = synthetic(2, repeats=10, shared_sd=0.5, shift=-0.15)
    aa = aa_false_alarms(strong, templates, comparisons=200, seed=0)
    assert aa.aa_rule_holds
    seen = power_against(strong, weak, templates, comparisons=200, seed=0)
    assert seen.rate >= POWER
    assert gate_verdict(aa, seen).acceptable and gate_verdict(aa, seen).describe() == "gate: acceptable"
    faint = power_against(strong, slightly, templates, comparisons=200, seed=0)
    assert faint.rate < POWER  # a drop this small is seen less often than 80% of the time at K = 10
    verdict = gate_verdict(aa, faint)
    assert verdict.verdict == "no power" and not verdict.acceptable
    assert verdict.describe().startswith(f"gate: no power (power {100 * faint.rate:.1f}% against the other ")
    assert gate_verdict(aa, None).describe().startswith("gate: no power (power not measured: give --against RUN")
    frozen = {t: [v[0]] * 10 for t, v in strong.items()}
    untested = aa_false_alarms(frozen, templates, comparisons=200)
    assert gate_verdict(untested, seen).verdict == "no power"  # an A/A of 0 alarms that can see nothing
    # Too many false alarms (every task its own cluster under a shared effect) is "not acceptable", power or not.
    noisy, _ = synthetic(0, shared_sd=1.5)
    alarmed = aa_false_alarms(noisy, {t: t for t in noisy}, comparisons=200, seed=0)
    assert alarmed.aa_rule_holds is False
    assert gate_verdict(alarmed, seen).describe().startswith("gate: not acceptable (false alarms ")
    with pytest.raises(ValueError, match="an A/A measurement and a power measurement"):
        gate_verdict(seen, aa)


def _cells(matrix: dict[str, list[str]], templates: dict[str, str]) -> dict[str, Any]:
    return {"tasks": {t: {"template": templates[t], "verdicts": v} for t, v in matrix.items()}}


def test_the_gate_over_cells_with_its_baseline_file(tmp_path: Any) -> None:
    a, templates = synthetic(4, repeats=3)
    b, _ = synthetic(5, repeats=3)
    hashes = {"registry": "r1", "templates": "t1", "world_configs": {"seed 42": "w1"}}
    baseline = make_stochastic_baseline({"cell A": _cells(a, templates), "cell B": _cells(b, templates)}, hashes,
                                        agent_id="llm-aaaaaa", model="qwen2.5-coder-0.5b", model_settings={},
                                        repeats=3, sweep_id="regression-x", spec={})
    path = llm_baseline_path("Qwen/Qwen2.5 Coder 0.5B", tmp_path)
    assert path.name == "regression-llm-Qwen2.5-Coder-0.5B.json"
    path.write_text(__import__("json").dumps(baseline))
    loaded = load_stochastic_baseline(path)

    same = stochastic_gate(loaded, {"cell A": _cells(a, templates), "cell B": _cells(b, templates)}, hashes,
                           "llm-bbbbbb")
    assert same.passed and same.agent_change == "llm-aaaaaa -> llm-bbbbbb"
    assert all(t.alpha == pytest.approx(ALPHA / 2) for t in same.tests.values())  # Bonferroni over 2 cells
    assert "passed" in same.summary() and len(same.lines()) == 3

    dropped = {t: [W] * 3 for t in b}
    worse = stochastic_gate(loaded, {"cell A": _cells(a, templates), "cell B": _cells(dropped, templates)},
                            {**hashes, "registry": "r2"})
    assert not worse.passed and worse.dropped == ["cell B"] and worse.hash_changes == ["registry r1 -> r2"]
    missing = stochastic_gate(loaded, {"cell A": _cells(a, templates)}, hashes)
    assert missing.missing_cells == ["cell B"] and not missing.passed
    fewer = stochastic_gate(loaded, {"cell A": _cells(dict(list(a.items())[1:]), templates),
                                     "cell B": _cells(b, templates)}, hashes)
    assert list(fewer.incomparable) == ["cell A"] and not fewer.passed

    (tmp_path / "det.json").write_text('{"format": 1, "cells": {}}')  # the deterministic gate's baseline
    with pytest.raises(StochasticGateError, match="kind 'stochastic'"):
        load_stochastic_baseline(tmp_path / "det.json")
    with pytest.raises(StochasticGateError, match="file not found"):
        load_stochastic_baseline(tmp_path / "none.json")
