"""Refresh planning on the simulated clock: hand-computed schedules for the paper's windows."""

from __future__ import annotations

import datetime as dt

import pytest

from churn_assets.freshness.planning import measured_change_rates, refresh_days, served_vintage
from churn_assets.freshness.policies import (
    Budget,
    BudgetedTtl,
    Off,
    PlanningError,
    Policy,
    RateMatched,
    Tiered,
    parse_policy,
)
from churn_assets.freshness.schedule import is_stale, periodic
from churn_assets.grounding.registry import load_registry

D = dt.date.fromisoformat
T = D("2024-04-27")
D28, D1 = D("2024-03-29"), D("2024-04-26")
HOT = ["assignments", "user_status"]
WARM = ["prices", "cost_center_membership"]
COLD = ["contract_terms", "vendor_dims"]
LIVE = ["consumption", "utilization", "tickets"]


def days(*iso: str) -> list[dt.date]:
    return [D(x) for x in iso]


@pytest.fixture(scope="module")
def reg():
    return load_registry()


def test_staleness_rule_is_strictly_greater() -> None:
    assert not is_stale(D("2024-04-27"), D("2024-04-26"), 1)
    assert is_stale(D("2024-04-28"), D("2024-04-26"), 1)


def test_tiered_d28_matches_hand_computed_lists(reg) -> None:
    plan = refresh_days(reg, D28, T, Tiered())
    hot = days("2024-03-29", "2024-03-31", "2024-04-02", "2024-04-04", "2024-04-06", "2024-04-08", "2024-04-10",
               "2024-04-12", "2024-04-14", "2024-04-16", "2024-04-18", "2024-04-20", "2024-04-22", "2024-04-24",
               "2024-04-26")
    for c in HOT:
        assert plan[c] == hot
    for c in WARM:
        assert plan[c] == days("2024-03-29", "2024-04-06", "2024-04-14", "2024-04-22")
    for c in COLD:
        assert plan[c] == days("2024-03-29")
    assert set(plan) == set(HOT + WARM + COLD)  # live classes are never refreshed: they are read at T


def test_served_vintage_d28_tiered_and_off(reg) -> None:
    tiered = served_vintage(reg, D28, T, Tiered())
    assert {c: tiered[c] for c in HOT} == dict.fromkeys(HOT, D("2024-04-26"))
    assert {c: tiered[c] for c in WARM} == dict.fromkeys(WARM, D("2024-04-22"))
    assert {c: tiered[c] for c in COLD} == dict.fromkeys(COLD, D28)
    assert {c: tiered[c] for c in LIVE} == dict.fromkeys(LIVE, T)
    off = served_vintage(reg, D28, T, Off())
    assert {c: off[c] for c in HOT + WARM + COLD} == dict.fromkeys(HOT + WARM + COLD, D28)
    assert {c: off[c] for c in LIVE} == dict.fromkeys(LIVE, T)


def test_d1_is_a_control_where_tiered_equals_off(reg) -> None:
    assert served_vintage(reg, D1, T, Tiered()) == served_vintage(reg, D1, T, Off())


def test_served_age_never_exceeds_ttl_under_tiered(reg) -> None:
    for t_prime_offset in range(0, 60, 7):
        t_prime = D("2024-02-01") + dt.timedelta(days=t_prime_offset)
        for span in (0, 1, 2, 8, 29, 45):
            t = t_prime + dt.timedelta(days=span)
            plan = refresh_days(reg, t_prime, t, Tiered())
            for c in reg.staged_classes:
                refreshed = plan[c.name]
                for d in (t_prime + dt.timedelta(days=i) for i in range(span + 1)):
                    last = max(x for x in refreshed if x <= d)
                    assert (d - last).days <= c.ttl_days


def test_ttl_override_policy(reg) -> None:
    policy = Tiered({"prices": 3})
    plan = refresh_days(reg, D28, T, policy)
    assert plan["prices"] == days("2024-03-29", "2024-04-02", "2024-04-06", "2024-04-10", "2024-04-14",
                                  "2024-04-18", "2024-04-22", "2024-04-26")
    assert plan["cost_center_membership"] == days("2024-03-29", "2024-04-06", "2024-04-14", "2024-04-22")
    assert policy.policy_id.startswith("ttl-") and len(policy.policy_id) == 10
    with pytest.raises(PlanningError, match="no cached class named tickets"):
        refresh_days(reg, D28, T, Tiered({"tickets": 2}))


def test_rate_matched_ttls(reg) -> None:
    rates = {"assignments": 4.0, "user_status": 0.5, "prices": 0.2, "cost_center_membership": 0.05,
             "contract_terms": 0.1, "vendor_dims": 0.0}
    plan = refresh_days(reg, D28, T, RateMatched(1.0), rates=rates, calendar_days=180)
    assert plan["assignments"] == [D28 + dt.timedelta(days=i) for i in range(30)]  # TTL 0: every day
    assert plan["user_status"] == [D28 + dt.timedelta(days=i) for i in range(0, 30, 3)]  # TTL 2
    assert plan["prices"] == days("2024-03-29", "2024-04-04", "2024-04-10", "2024-04-16", "2024-04-22")  # TTL 5
    assert plan["cost_center_membership"] == days("2024-03-29", "2024-04-19")  # TTL 20: stale on day 21
    assert plan["vendor_dims"] == [D28]  # never changed: TTL beyond the calendar
    with pytest.raises(PlanningError, match="need measured change rates"):
        refresh_days(reg, D28, T, RateMatched(1.0))


def test_budget_policies_refresh_on_a_period_from_t_prime(reg) -> None:
    """uniform:12 over the 6 cached classes: 2 refreshes per 30 days each, every 15 days from T'; the last day
    of the window is not special (decision 206: the schedule cannot know T)."""
    uniform = refresh_days(reg, D28, T, Budget(12, "uniform"))
    for c in reg.staged_classes:
        assert uniform[c.name] == days("2024-03-29", "2024-04-13")  # the next is due 04-28, after T
    assert Budget(8, "uniform").periods(reg, None, 180) == dict.fromkeys([c.name for c in reg.staged_classes], 22.5)
    eight = refresh_days(reg, D28, T, Budget(8, "uniform"))
    assert eight["prices"] == days("2024-03-29", "2024-04-21")  # due at 22.5 days: made on day 23
    rates = {"assignments": 3.0, "user_status": 1.0, "prices": 0.0, "cost_center_membership": 0.0,
             "contract_terms": 0.0, "vendor_dims": 0.0}
    prop = Budget(8, "proportional")
    assert prop.shares(reg, rates) == {"assignments": 6.0, "user_status": 2.0, "prices": 0.0,
                                       "cost_center_membership": 0.0, "contract_terms": 0.0, "vendor_dims": 0.0}
    plan = refresh_days(reg, D28, T, prop, rates=rates)
    assert plan["assignments"] == [D28 + dt.timedelta(days=5 * i) for i in range(6)]  # every 5 days: 04-23 last
    assert plan["user_status"] == days("2024-03-29", "2024-04-13")
    assert plan["prices"] == [D28]  # no share: never refreshed
    # A budget counts refreshes per 30 days: over the 30 days after T' every policy spends at most N.
    month = D28 + dt.timedelta(days=30)
    for policy in (Budget(8, "uniform"), prop, BudgetedTtl(8, "rate"), BudgetedTtl(8, "tiers")):
        spent = sum(len(d) - 1 for d in refresh_days(reg, D28, month, policy, rates=rates).values())
        assert spent <= 8, policy


def test_periodic_schedules() -> None:
    assert periodic(D28, T, None) == []
    assert periodic(D28, D28 + dt.timedelta(days=3), 0.5) == [D28 + dt.timedelta(days=i) for i in (1, 2, 3)]
    assert periodic(D28, D28 + dt.timedelta(days=10), 30 / (8 / 6) / 5) == \
        [D28 + dt.timedelta(days=i) for i in (5, 9)]  # 4.5 days: due 4.5, 9.0 (not 10 from float noise)
    with pytest.raises(ValueError, match="must be > 0"):
        periodic(D28, T, 0)


# Every spelling `parse_policy` takes, with parameters that exercise it. A new policy class without a spelling
# here fails `test_every_policy_class_has_a_spelling_under_test`.
POLICY_SPELLINGS = ("tiered", "off", "ttl:prices=3,assignments=0", "ttl:vendor_dims=0", "rate", "rate:0.3",
                    "rate:4", "uniform:1", "uniform:8", "uniform:32", "uniform:200", "proportional:4",
                    "proportional:8", "proportional:32", "rate-matched:4", "rate-matched:8", "rate-matched:32",
                    "tier-shaped:4", "tier-shaped:8", "tier-shaped:32", "uniform:0", "tier-shaped:0")


def _policy_classes(cls: type = Policy) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        if not getattr(sub, "__abstractmethods__", None):
            out.add(sub)
        out |= _policy_classes(sub)
    return out


def test_every_policy_class_has_a_spelling_under_test() -> None:
    assert {type(parse_policy(s)) for s in POLICY_SPELLINGS} == _policy_classes()


@pytest.mark.parametrize("spelling", POLICY_SPELLINGS)
def test_a_schedule_up_to_any_day_does_not_depend_on_t(reg, spelling: str) -> None:
    """Decision 206: the refresh days up to any day D are the same whether the plan runs to T = D or to any later
    T (and so are the effective TTLs), for two T' and every D of the 40 days after them."""
    policy = parse_policy(spelling)
    rates = {"assignments": 3.4, "user_status": 0.9, "prices": 0.15, "cost_center_membership": 0.6,
             "contract_terms": 0.05, "vendor_dims": 0.0}
    for t_prime in (D28, D("2024-02-10")):
        horizon = [t_prime + dt.timedelta(days=i) for i in range(41)]
        full = refresh_days(reg, t_prime, horizon[-1], policy, rates=rates)
        ttls = policy.effective_ttls(reg, rates, 180)
        for d in horizon:
            for later in (d, d + dt.timedelta(days=1), d + dt.timedelta(days=17), horizon[-1]):
                if later < d:
                    continue
                plan = refresh_days(reg, t_prime, later, policy, rates=rates)
                assert {c: [x for x in v if x <= d] for c, v in plan.items()} == \
                    {c: [x for x in v if x <= d] for c, v in full.items()}, (spelling, t_prime, d, later)
        assert policy.effective_ttls(reg, rates, 180) == ttls


def test_policy_ids_and_parsing() -> None:
    assert parse_policy("tiered").policy_id == "tiered"
    assert parse_policy("off").policy_id == "off"
    assert parse_policy("ttl:prices=3").policy_id == Tiered({"prices": 3}).policy_id
    assert parse_policy("uniform:12").policy_id.startswith("uniform12-")
    assert parse_policy("proportional:12").policy_id.startswith("prop12-")
    assert parse_policy("rate:2").policy_id != parse_policy("rate").policy_id
    with pytest.raises(Exception, match="expected tiered"):
        parse_policy("sometimes")


def test_measured_rates_ignore_events_after_t_prime() -> None:
    recs = [
        {"at": "2024-01-01", "kind": "user_hired"},  # day 0 builds the world: not drift
        {"at": "2024-01-02", "kind": "price_changed"},
        {"at": "2024-01-03", "kind": "user_hired"},
        {"at": "2024-01-05", "kind": "price_changed"},  # after T'
    ]
    rates = measured_change_rates(recs, D("2024-01-01"), D("2024-01-03"), ["prices", "user_status", "vendor_dims"])
    assert rates == {"prices": 0.5, "user_status": 0.5, "vendor_dims": 0.0}
