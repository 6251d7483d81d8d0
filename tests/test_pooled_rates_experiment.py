"""bench/pooled_rates_experiment.py: the beta-binomial pieces, and that pooling gives a task with no measured move a
share of its group's rate (the plug-in gives it none)."""

from __future__ import annotations

import datetime as dt
import math
from types import SimpleNamespace

from bench_scripts import load_bench_script

T_PRIME = dt.date(2024, 3, 29)


class _Rates:
    """What the experiment reads of `AnswerChangeRates`: measured days, per-task rates, missed days (10 for prices)."""

    def __init__(self, hits: dict[str, int], days: int = 50) -> None:
        self.hits, self.days = hits, days

    def measured_days(self, t_prime: dt.date) -> list[dt.date]:
        return [t_prime - dt.timedelta(days=i) for i in range(self.days)]

    def rate(self, task_id: str, entity_class: str, t_prime: dt.date) -> float:
        return self.hits[task_id] / self.days

    def missed_days(self, task: object, vintage: object, anchor: dt.date) -> dict[str, tuple[int, int]]:
        return {"prices": (0, 9)}


def _task(task_id: str) -> SimpleNamespace:
    return SimpleNamespace(task_id=task_id, template_id="t1_list_price",
                           template=SimpleNamespace(classes=("prices",)))


def test_unmoved_is_the_beta_mean_of_staying_unmoved() -> None:
    exp = load_bench_script("pooled_rates_experiment")
    assert exp.unmoved(2.0, 8.0, 0) == 1.0
    assert math.isclose(exp.unmoved(2.0, 8.0, 1), 0.8)  # E[1 - p] = 8 / 10
    # A sharp prior is the plug-in: (1 - 0.2)^5.
    assert math.isclose(exp.unmoved(2e6, 8e6, 5), 0.8**5, rel_tol=1e-5)
    # Spread over p, staying unmoved is likelier than at the mean rate (Jensen): pooling has to raise P elsewhere.
    assert exp.unmoved(2.0, 8.0, 5) > 0.8**5
    assert (exp.unmoved(0.0, 5.0, 3), exp.unmoved(5.0, 0.0, 3)) == (1.0, 0.0)  # never moves / always moves


def test_the_prior_weight_follows_the_spread_of_the_groups_counts() -> None:
    exp = load_bench_script("pooled_rates_experiment")
    assert exp.prior_weight([1, 2], 50) == 50.0  # too few tasks: as much as one task's history
    assert exp.prior_weight([0, 0, 0], 50) == 50.0  # no move at all: the moments say nothing
    alike = exp.prior_weight([2, 2, 3, 2, 3], 50)  # no more spread than one rate gives: pool almost fully
    spread = exp.prior_weight([0, 0, 0, 0, 12], 50)  # one task moves, the others never: pool little
    assert alike > 1e5
    # mean 2.4, variance 23.04, p 0.048: rho = (23.04 / (50 * 0.048 * 0.952) - 1) / 49, m = 1 / rho - 1
    assert math.isclose(spread, 4.394, abs_tol=1e-3)


def test_pooling_gives_a_task_with_no_measured_move_a_share_of_its_groups_rate() -> None:
    exp = load_bench_script("pooled_rates_experiment")
    rates = _Rates({"q1": 0, "q2": 3, "q3": 2, "q4": 3})
    tasks = [_task(t) for t in ("q1", "q2", "q3", "q4")]
    pooled = exp.PooledRates(rates, tasks, T_PRIME)
    fresh_by_plug_in = 1 - (1 - rates.rate("q1", "prices", T_PRIME)) ** 10
    assert fresh_by_plug_in == 0.0
    # The counts vary less than one rate gives (m at its cap): q1 takes the group's rate 8 / 200 almost exactly.
    assert math.isclose(pooled.probability(rates, tasks[0], {}, T_PRIME), 1 - 0.96**10, rel_tol=1e-4)
