"""The analytic anchor (issue 46, item 6): Cho and Garcia-Molina's formula against a simulated Poisson element,
and the committed `docs/figures/sweeps/analytic_anchor.csv` against what `bench/analytic_anchor.py` computes.

One element changes as a Poisson process of rate lambda (changes per day) and is refreshed every I days. Fresh at
an instant means no change since the last refresh. Two clocks:

- **Continuous time** (the paper's): refreshes at 0, I, 2I, ...; the copy's age at a uniform instant is uniform
  on [0, I), so the long-run fresh share is (1/I) * integral_0^I e^(-lambda a) da = (1 - e^(-lambda I)) /
  (lambda I), `cho_freshness`.
- **Whole days** (the simulator's, docs/rules.md "Staleness rule"): a class with TTL k is refreshed on each day
  d with d - last_refresh > k, before the answers of d, so it is refreshed every I = k + 1 days (`ttl_schedule`;
  the anchor's I is `Policy.periods`, TTL + 1). A question on day d is served the last refresh r <= d and its
  answer is fresh when nothing changed on days r+1 .. d (a change on day r is in the copy). The age d - r runs
  over the whole days 0 .. I - 1, each equally often, and a day's changes are Poisson(lambda), so the fresh share
  is (1/I) * sum_{a=0}^{I-1} e^(-lambda a) = (1 - e^(-lambda I)) / (I (1 - e^(-lambda))), the formula times
  lambda / (1 - e^(-lambda)) (about 1 + lambda/2: the mean age is (I - 1)/2 days, not I/2). For TTL 1 (I = 2):
  (1 + e^(-lambda)) / 2, as docs/sweeps.md says. The simulator is fresher than the formula by that factor; the
  second test shows the difference is measurable, so the anchor's `cho` column is the continuous figure on purpose.

Each share is estimated from one observation per refresh cycle at a uniform instant (day) of the cycle: the
cycles' changes are independent (a Poisson process has independent increments), so the count of fresh
observations is binomial and its 99% interval (`wilson_interval`) must hold the predicted share. Each test also
shows that it can fail: the same counts reject the period I + 1 (and, on whole days, the continuous formula).
"""

from __future__ import annotations

import bisect
import csv
import datetime as dt
import itertools
import math
import random
from pathlib import Path

import pytest
from bench_scripts import load_bench_script

from churn_assets.evaluation.stats import wilson_interval
from churn_assets.freshness.analytic import cho_freshness
from churn_assets.freshness.schedule import periodic, ttl_schedule

SEED = 46
LEVEL = 0.99
# (lambda per day, I days): rates and periods like the anchor's (user_status and assignments under TTL 1, a hot
# class under TTL 4, prices' order of rate under TTL 7). Each pair's 99% interval of `CYCLES` observations is
# narrower than the distance from I to I + 1, so the test can tell them apart; a 31-day period cannot be told from
# 32 days without about 10 times more cycles (the formula's slope in I is small there), so no pair has one.
PAIRS = ((0.8, 2), (0.27, 2), (0.3, 5), (0.1, 8))
CYCLES = 20_000
T_PRIME = dt.date(2024, 1, 1)
COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "figures" / "sweeps" / "analytic_anchor.csv"


def poisson_changes(lam: float, horizon: float, rng: random.Random) -> list[float]:
    """The change instants in [0, horizon) of a Poisson process of rate `lam` (exponential gaps), sorted."""
    out, at = [], rng.expovariate(lam)
    while at < horizon:
        out.append(at)
        at += rng.expovariate(lam)
    return out


def changed_in(changes: list[float], after: float, until: float) -> bool:
    """Whether a change falls in (after, until]."""
    i = bisect.bisect_right(changes, after)
    return i < len(changes) and changes[i] <= until


def day_grained(lam: float, period: int) -> float:
    """The whole-day convention's fresh share (module doc): the mean of e^(-lambda a) over ages a = 0 .. I - 1."""
    return sum(math.exp(-lam * a) for a in range(period)) / period


def continuous_fresh(lam: float, period: int, rng: random.Random) -> int:
    """Fresh observations, one at a uniform instant of each of `CYCLES` cycles, refreshed on the budget
    policies' schedule (`periodic`: every `period` days from T', exact for a whole-day period)."""
    refreshes = [0.0] + [float((d - T_PRIME).days) for d in
                         periodic(T_PRIME, T_PRIME + dt.timedelta(days=CYCLES * period), period)]
    changes = poisson_changes(lam, refreshes[-1], rng)
    return sum(not changed_in(changes, start, start + rng.random() * (end - start))
               for start, end in itertools.pairwise(refreshes))


def whole_day_fresh(lam: float, period: int, rng: random.Random) -> int:
    """Fresh questions, one on a uniform day of each of `CYCLES` cycles of the staleness rule with TTL period - 1
    (`ttl_schedule`), served the last refresh day r <= d and fresh when no change fell on days r+1 .. d."""
    refreshes = [0] + [(d - T_PRIME).days for d in
                       ttl_schedule(T_PRIME, T_PRIME + dt.timedelta(days=CYCLES * period), period - 1)]
    assert {b - a for a, b in itertools.pairwise(refreshes)} == {period}  # I = TTL + 1
    # A change at instant x falls on day floor(x); nothing changed on days r+1 .. d means no instant in [r+1, d+1).
    changes = poisson_changes(lam, refreshes[-1], rng)
    fresh = 0
    for start, end in itertools.pairwise(refreshes):
        asked = start + rng.randrange(end - start)
        i = bisect.bisect_left(changes, start + 1)
        fresh += not (i < len(changes) and changes[i] < asked + 1)
    return fresh


def test_cho_freshness_is_the_papers_formula() -> None:
    assert cho_freshness(0.5, 2) == pytest.approx((1 - math.exp(-1)) / 1)
    assert cho_freshness(0.0, 30) == 1.0 and cho_freshness(0.0, None) == 1.0  # never changes: always fresh
    assert cho_freshness(0.2, None) == 0.0  # never refreshed: stale in the long run
    assert day_grained(0.3, 2) == pytest.approx((1 + math.exp(-0.3)) / 2)  # docs/sweeps.md's TTL 1
    assert day_grained(0.3, 8) == pytest.approx(cho_freshness(0.3, 8) * 0.3 / (1 - math.exp(-0.3)))


@pytest.mark.parametrize(("lam", "period"), PAIRS)
def test_a_poisson_element_is_fresh_the_share_the_formula_says(lam: float, period: int) -> None:
    fresh = continuous_fresh(lam, period, random.Random(f"{SEED}-{lam}-{period}"))
    lo, hi = wilson_interval(fresh, CYCLES, LEVEL)
    assert lo <= cho_freshness(lam, period) <= hi, (fresh / CYCLES, (lo, hi), cho_freshness(lam, period))
    # It can fail: the interval is narrower than the distance to the period one day longer, which is outside it.
    longer = cho_freshness(lam, period + 1)
    assert hi - lo < abs(cho_freshness(lam, period) - longer) and not lo <= longer <= hi, (lo, hi, longer)


@pytest.mark.parametrize(("lam", "period"), PAIRS)
def test_on_whole_days_the_staleness_rule_is_fresher_by_half_a_day(lam: float, period: int) -> None:
    fresh = whole_day_fresh(lam, period, random.Random(f"{SEED}-days-{lam}-{period}"))
    lo, hi = wilson_interval(fresh, CYCLES, LEVEL)
    assert lo <= day_grained(lam, period) <= hi, (fresh / CYCLES, (lo, hi), day_grained(lam, period))
    # The whole-day share is told apart from the continuous formula's and from a period a day longer.
    for other in (cho_freshness(lam, period), day_grained(lam, period + 1)):
        assert hi - lo < abs(day_grained(lam, period) - other) and not lo <= other <= hi, (lo, hi, other)


@pytest.mark.slow  # about 35 s of CPU (40-70 s wall): the default world of seed 42 simulated, ten policies' windows
def test_the_committed_anchor_csv_is_what_the_script_computes(tmp_path: Path) -> None:
    """`analytic_anchor.csv` (seed 42, the D+28 window) computed again in process by the script's own functions,
    row by row: an edit of the file, or of code that moves one of its figures, fails here."""
    script = load_bench_script("analytic_anchor")
    result = script.anchor(42, 28, echo=lambda _: None)
    script.write_csv(tmp_path / "analytic_anchor.csv", result["class_rows"])
    with COMMITTED.open(newline="") as fh:
        committed = list(csv.DictReader(fh))
    with (tmp_path / "analytic_anchor.csv").open(newline="") as fh:
        computed = list(csv.DictReader(fh))
    assert len(computed) == len(committed) == 70, (len(computed), len(committed))
    for n, (want, got) in enumerate(zip(committed, computed, strict=True), start=2):
        differ = {k: (want[k], got.get(k)) for k in want if want[k] != got.get(k)}
        assert not differ and want.keys() == got.keys(), \
            f"analytic_anchor.csv line {n} ({want['class']}, {want['policy']}): committed, computed {differ}"
    assert (tmp_path / "analytic_anchor.csv").read_bytes() == COMMITTED.read_bytes()  # formatting too
