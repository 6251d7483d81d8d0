"""Each verdict from a constructed case: an answer, the tables it read (their data times), gold."""

from __future__ import annotations

import datetime as dt

import pytest
from test_gold import WORLD

from churn_assets.evaluation.verdicts import (
    BUDGET_EXHAUSTED,
    CORRECT,
    FRESHNESS_ERROR,
    MIXED_VINTAGE_ERROR,
    PARSE_FAILURE,
    REASONING_ERROR,
    STALE_VERDICTS,
    TRANSPORT_FAILURE,
    UNATTRIBUTED_ERROR,
    VERDICTS,
    Outcome,
    score,
    verdict,
)
from churn_assets.tasks.answers import MONEY
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task
from churn_assets.tasks.templates import template

D = dt.date.fromisoformat
T = D("2024-01-20")
SPEND_CLASSES = ("assignments", "user_status", "cost_center_membership", "prices")


@pytest.fixture(scope="module")
def resolver() -> GoldResolver:
    return GoldResolver(WORLD)


def _task(template_id: str, params: dict) -> Task:
    return Task("q001", "hand-made", T.isoformat(), template_id, params, template(template_id).render(params))


SPEND = _task("t2_cost_center_spend", {"cost_center": "cc_001"})  # gold at T: 560.00 (see test_gold)


def _read(day: str, classes: tuple[str, ...] = SPEND_CLASSES) -> dict[str, dt.date]:
    return dict.fromkeys(classes, D(day))


@pytest.mark.parametrize(("outcome", "expected"), [
    # Everything read at T, the right amount (written as an agent would).
    (Outcome(answer_text="$560.00", read_days=_read("2024-01-20")), CORRECT),
    (Outcome(answer_text="560", read_days={}), CORRECT),
    # All four classes read as of 01-15: 320.00 there (P2 at 200, u3's and u4's licenses not yet in cc_001).
    (Outcome(answer_text="$320.00", read_days=_read("2024-01-15")), FRESHNESS_ERROR),
    # The same amount from hot tables as of 01-19 joined with warm ones as of 01-15: several data times.
    (Outcome(answer_text="320.00", read_days={**_read("2024-01-19", ("assignments", "user_status")),
                                              **_read("2024-01-15", ("cost_center_membership", "prices"))}),
     MIXED_VINTAGE_ERROR),
    # A staged read joined with a read at T is mixed too: with memberships as of T, u3 (moved to cc_001 on
    # 01-16) brings L6 (P1 at 50 as of 01-15) into cc_001: 200 + 120 + 50.
    (Outcome(answer_text="370.00", read_days={**_read("2024-01-15", ("assignments", "user_status", "prices")),
                                              "cost_center_membership": T}), MIXED_VINTAGE_ERROR),
    # Wrong against T and against what it read.
    (Outcome(answer_text="$999.99", read_days=_read("2024-01-15")), REASONING_ERROR),
    # Stale tables whose answer did not change: a wrong answer is a reasoning error, not a stale one.
    (Outcome(answer_text="$320.00", read_days=_read("2024-01-20")), REASONING_ERROR),
    (Outcome(answer_text="a lot", read_days=_read("2024-01-20")), PARSE_FAILURE),
    (Outcome(question_parsed=False), PARSE_FAILURE),
    (Outcome(transport_failed=True, read_days=_read("2024-01-15")), TRANSPORT_FAILURE),
    # A model that asked to read past its budget: no answer (its empty text is not parsed).
    (Outcome(answer_text="", budget_exhausted=True, read_days=_read("2024-01-15")), BUDGET_EXHAUSTED),
    (Outcome(transport_failed=True, budget_exhausted=True), TRANSPORT_FAILURE),
    # A typed value from the deterministic agent, one cent off gold: wrong (money compares at the cent).
    (Outcome(answer=560.01, has_value=True, read_days=_read("2024-01-20")), REASONING_ERROR),
    (Outcome(answer=560.004, has_value=True, read_days=_read("2024-01-20")), CORRECT),
])
def test_verdict_of_a_spend_answer(resolver: GoldResolver, outcome: Outcome, expected: str) -> None:
    assert score(resolver, SPEND, outcome).verdict == expected


def test_an_entity_unknown_to_the_served_data_is_unattributed(resolver: GoldResolver) -> None:
    # ctr_0002 was signed on 01-14; documents as of 01-10 do not have it, and the agent says "unknown". Stale
    # data gives that answer, and so does an arm that knows nothing: it is not counted as stale.
    task = _task("t3_contract_status", {"contract": "ctr_0002"})
    scored = score(resolver, task, Outcome(answer_text="unknown", read_days={"contract_terms": D("2024-01-10")}))
    assert (scored.verdict, scored.gold_at_anchor, scored.served_gold) == (UNATTRIBUTED_ERROR, "active", None)
    assert scored.served_degenerate and not scored.stale


def test_scored_records_what_was_compared(resolver: GoldResolver) -> None:
    read = _read("2024-01-15")
    scored = score(resolver, SPEND, Outcome(answer_text="$320.00", read_days=read))
    assert (scored.answer, scored.gold_at_anchor, scored.served_gold) == (320.0, 560.0, 320.0)
    assert scored.served_vintage == read


def test_the_pure_verdict_function() -> None:
    day = D("2024-01-15")
    assert verdict(MONEY, 1.0, 1.0, 2.0, {day}) == CORRECT
    assert verdict(MONEY, 2.0, 1.0, 2.0, {day}) == FRESHNESS_ERROR
    assert verdict(MONEY, 2.0, 1.0, 2.0, {day, T}) == MIXED_VINTAGE_ERROR
    assert verdict(MONEY, 3.0, 1.0, 2.0, {day}) == REASONING_ERROR
    assert verdict(MONEY, 2.0, 1.0, 2.0, {day}, transport_failed=True) == TRANSPORT_FAILURE
    assert verdict(MONEY, None, 1.0, 2.0, {day}, parse_failed=True) == PARSE_FAILURE
    # precedence: a failed source, then an exhausted budget, then an unparseable answer
    assert verdict(MONEY, None, 1.0, 2.0, {day}, budget_exhausted=True) == BUDGET_EXHAUSTED
    assert verdict(MONEY, None, 1.0, 2.0, {day}, budget_exhausted=True, parse_failed=True) == BUDGET_EXHAUSTED
    assert verdict(MONEY, None, 1.0, 2.0, {day}, transport_failed=True, budget_exhausted=True) == TRANSPORT_FAILURE
    assert verdict(MONEY, 1.0, 1.0, 2.0, {day}, budget_exhausted=True) == BUDGET_EXHAUSTED  # no answer counts
    assert verdict(MONEY, 0.0, 1.0, 0.0, {day}, served_degenerate=True) == UNATTRIBUTED_ERROR
    assert verdict(MONEY, 3.0, 1.0, 0.0, {day}, served_degenerate=True) == REASONING_ERROR
    assert set(STALE_VERDICTS) <= set(VERDICTS) and len(VERDICTS) == 8 and BUDGET_EXHAUSTED not in STALE_VERDICTS
    assert UNATTRIBUTED_ERROR not in STALE_VERDICTS
