"""Small statistics for repeated runs: quantiles, pass^k and pass@k, a bootstrap clustered by template, a
cluster-robust standard error and a binomial interval. Pure functions on plain numbers, no numpy: every figure
they give is reproducible from the same inputs (the bootstrap takes its seed).

- `quantile(values, q)`: linear interpolation between order statistics (Hyndman and Fan's type 7, numpy's
  default), so a median of an even count is the mean of the two middle values.
- `pass_hat_k(c, n, k)`: tau-bench's pass^k (Yao et al. 2024, "tau-bench"): the chance that k trials drawn
  without replacement from n trials of a task, c of them correct, are all correct: C(c, k) / C(n, k). With
  k = n it is 1 when every trial is correct, else 0.
- `pass_at_k(c, n, k)`: the chance that at least one of k such trials is correct, 1 - C(n - c, k) / C(n, k)
  (the unbiased estimator of Chen et al. 2021).
- `cluster_bootstrap_interval`: resamples whole clusters (templates) with replacement and takes the percentile
  interval of the mean over tasks: tasks of one template share their wording and their reads, so they are not
  independent draws, and resampling tasks one by one would give too narrow an interval.
- `cluster_standard_error`: the cluster-robust (CR1) standard error of a mean.
- `wilson_interval`: the Wilson score interval of a proportion.
- `student_t_cdf`, `student_t_quantile`: Student's t, for tests whose standard error rests on few clusters.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
from collections.abc import Mapping, Sequence

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
INTERVAL_LEVEL = 0.9


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) of a non-empty sequence, by linear interpolation (type 7)."""
    if not values:
        raise ValueError("the quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def spread(values: Sequence[float]) -> dict[str, float | int] | None:
    """{median, p90, total, n} of some per-task figures; None when there are none (a figure that is absent,
    never a 0)."""
    if not values:
        return None
    return {"median": round(quantile(values, 0.5), 3), "p90": round(quantile(values, 0.9), 3),
            "total": round(math.fsum(values), 3), "n": len(values)}


def pass_hat_k(correct: int, n: int, k: int) -> float:
    """tau-bench's pass^k of one task: C(correct, k) / C(n, k), 1 <= k <= n."""
    _check_trials(correct, n, k)
    return math.comb(correct, k) / math.comb(n, k)


def pass_at_k(correct: int, n: int, k: int) -> float:
    """pass@k of one task: 1 - C(n - correct, k) / C(n, k), 1 <= k <= n."""
    _check_trials(correct, n, k)
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


def _check_trials(correct: int, n: int, k: int) -> None:
    if not 0 <= correct <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= correct <= n and 1 <= k <= n, got correct={correct}, n={n}, k={k}")


def cluster_bootstrap_interval(values: Mapping[str, float], clusters: Mapping[str, str], *,
                               level: float = INTERVAL_LEVEL, resamples: int = BOOTSTRAP_RESAMPLES,
                               seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """The `level` percentile interval of the mean of `values` (one per task) when whole clusters (`clusters`:
    task -> template) are resampled with replacement. One cluster: the interval is the point itself (nothing
    to resample)."""
    if not values:
        raise ValueError("a bootstrap interval of no values")
    groups: dict[str, list[float]] = {}
    for task, value in values.items():
        groups.setdefault(clusters[task], []).append(float(value))
    sums = [(math.fsum(g), len(g)) for _, g in sorted(groups.items())]
    if len(sums) == 1:
        point = sums[0][0] / sums[0][1]
        return point, point
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        total = count = 0.0
        for _ in range(len(sums)):
            s, n = sums[rng.randrange(len(sums))]
            total += s
            count += n
        means.append(total / count)
    tail = (1.0 - level) / 2.0
    return quantile(means, tail), quantile(means, 1.0 - tail)


def cluster_standard_error(values: Mapping[str, float], clusters: Mapping[str, str]) -> float:
    """The cluster-robust (CR1) standard error of the mean of `values` (task -> value), clusters by
    `clusters` (task -> template): sqrt(G / (G - 1) * sum over clusters of (sum of deviations)^2) / n.
    0 with a single cluster (no between-cluster spread can be measured: callers say so)."""
    n = len(values)
    if n == 0:
        raise ValueError("a standard error of no values")
    mean = math.fsum(values.values()) / n
    deviations: dict[str, float] = {}
    for task, value in values.items():
        deviations[clusters[task]] = deviations.get(clusters[task], 0.0) + (float(value) - mean)
    g = len(deviations)
    if g < 2:
        return 0.0
    return math.sqrt(g / (g - 1) * math.fsum(d * d for d in deviations.values())) / n


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom, by the regularized incomplete beta function
    (Numerical Recipes' continued fraction): exact to about 1e-10, no scipy needed."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    x = df / (df + t * t)
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=256)  # a gate measurement asks the same few quantiles thousands of times
def student_t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on `student_t_cdf`, to 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if student_t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2.0


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """Lentz's evaluation of the continued fraction of the incomplete beta function."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def wilson_interval(successes: int, n: int, level: float = INTERVAL_LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a proportion successes / n."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
