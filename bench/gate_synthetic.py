"""The stochastic gate's A/A false-alarm rate on synthetic verdict matrices (decision 237, docs/llm.md).

    python bench/gate_synthetic.py [--datasets 20] [--comparisons 200]

For each data set (the generator of `tests/test_stochastic_gate.py`: 60 tasks in 12 templates, K = 20 repeats,
logit of correct = task base + a per-repeat effect shared by a template's tasks), with the shared effect's sd 0
and 1.5: the mean A/A false-alarm rate of the gate as built (clustered SE, Student's t with G - 1 degrees of
freedom), of the same gate with every task its own cluster, and of the gate with the normal quantile instead of
t. Prints one line per (variant, sd).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import churn_assets.sweeps.stochastic_gate as gate

NORMAL = statistics.NormalDist()


def synthetic(seed: int, shared_sd: float) -> Any:
    """The test module's generator (one source of the synthetic data)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_stochastic_gate import synthetic as generate

    return generate(seed, shared_sd=shared_sd)


def mean_rate(datasets: int, comparisons: int, sd: float, per_task: bool) -> float:
    rates = []
    for seed in range(datasets):
        matrix, templates = synthetic(seed, shared_sd=sd)
        clusters = {t: t for t in matrix} if per_task else templates
        rates.append(gate.aa_false_alarms(matrix, clusters, comparisons=comparisons, seed=1).rate)
    return statistics.fmean(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=20)
    parser.add_argument("--comparisons", type=int, default=200)
    args = parser.parse_args()
    for variant in ("student-t, clustered", "student-t, per task", "normal, clustered"):
        if variant.startswith("normal"):
            gate.student_t_quantile = lambda p, df: NORMAL.inv_cdf(p)  # type: ignore[assignment]
            gate.student_t_cdf = lambda t, df: NORMAL.cdf(t)  # type: ignore[assignment]
        for sd in (0.0, 1.5):
            rate = mean_rate(args.datasets, args.comparisons, sd, per_task=variant.endswith("per task"))
            print(f"{variant:22} shared sd {sd:3}: mean A/A false-alarm rate {100 * rate:.1f}% "
                  f"({args.datasets} data sets x {args.comparisons} comparisons, alpha {gate.ALPHA})")


if __name__ == "__main__":
    main()
