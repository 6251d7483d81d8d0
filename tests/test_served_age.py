"""Served age at T per class from the days a run's reads observed (what the `served_age_within_ttl_<class>`
checks on `eval_run` report)."""

from __future__ import annotations

import datetime as dt

from churn_assets.evaluation.served_age import observed_days, served_age

T = dt.date(2024, 1, 30)


def _row(*reads: tuple[str, str]) -> dict[str, object]:
    return {"traces": [{"reads": [{"entity_class": c, "observed_day": d, "store": "staging"} for c, d in reads]}]}


def test_observed_days_come_from_the_reads_not_the_plan() -> None:
    rows = [_row(("prices", "2024-01-26")), {**_row(("prices", "2024-01-23"), ("assignments", "2024-01-29")),
                                            "planned_vintage": {"prices": "2024-01-30"}}, {"traces": []}]
    assert observed_days(rows) == {"prices": {dt.date(2024, 1, 26), dt.date(2024, 1, 23)},
                                   "assignments": {dt.date(2024, 1, 29)}}


def test_the_oldest_observed_day_decides() -> None:
    within = served_age("prices", 7, T, [dt.date(2024, 1, 26), dt.date(2024, 1, 23)])
    assert within.max_age == 7 and within.within_ttl  # age 7 = TTL 7: still fresh (stale only when > TTL)
    beyond = served_age("assignments", 1, T, [dt.date(2024, 1, 28)])
    assert beyond.max_age == 2 and not beyond.within_ttl
    assert "BEYOND its TTL of 1" in beyond.describe()
    unread = served_age("vendor_dims", 30, T, [])
    assert unread.within_ttl and "no answer read it" in unread.describe()
