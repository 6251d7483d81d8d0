"""Template declarations, registry coverage of their measures, and the answer types' comparisons."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from churn_assets.grounding.registry import load_registry
from churn_assets.tasks.answers import (
    DATE,
    ENTITY,
    ENTITY_LIST,
    FRACTION_2DP,
    INTEGER,
    MONEY,
    TEXT,
    AnswerParseError,
    category,
    round_half_up,
)
from churn_assets.tasks.templates import (
    ANY,
    DEFAULT_TIER_SPLIT,
    INTENTS,
    TEMPLATES,
    TEMPLATES_BY_ID,
    measures,
    template,
    template_problems,
)

D = dt.date.fromisoformat


def test_declarations_are_consistent() -> None:
    assert template_problems() == []
    assert len(TEMPLATES_BY_ID) == len(TEMPLATES)


def test_default_weights_split_like_the_reference() -> None:
    tiers = Counter()
    intents = Counter()
    for t in TEMPLATES:
        tiers[t.task_tier] += t.weight
        intents[t.intent] += t.weight
    assert dict(tiers) == DEFAULT_TIER_SPLIT
    # The reference: spend visibility 50, criticality 48, utilization 44, savings 38.
    reference = {"spend_visibility": 50, "criticality": 48, "utilization": 44, "savings_opportunity": 38}
    assert set(intents) == set(INTENTS)
    for intent, n in reference.items():
        assert abs(intents[intent] - n) <= 3, (intent, intents[intent])


def test_every_template_names_a_registered_measure_of_its_placeholders() -> None:
    """The template's measure is registered, takes exactly the question's placeholders, and reads at least the
    classes the template's gold reads (a measure may read more: total spend splits by cost center first)."""
    registry = load_registry()
    for measure, template_ids in measures().items():
        decl = registry.measure(measure)  # raises when unregistered
        for tid in template_ids:
            assert set(decl.args) == set(template(tid).params), (measure, tid)
            assert set(template(tid).classes) <= set(decl.reads), (measure, tid)


def test_reference_families_and_additions_are_covered() -> None:
    families = {t.family for t in TEMPLATES}
    for family in ("monthly license spend of a cost center", "active users in a cost center",
                   "current list price of a product", "total monthly spend", "top-spending cost center",
                   "cost centers above a spend threshold (list)", "licenses of a product unused for N days",
                   "unassigned licenses", "idle licenses in a cost center", "monthly cost of idle licenses",
                   "reclamations in the last N days", "offboardings in the last N days",
                   "reassignments in the last N days", "contract active or expired", "months remaining on a contract",
                   "vendor of a contract", "contract annual value", "API calls of a product in a window",
                   "distinct users of a product in a window", "top product by session minutes",
                   "licenses with zero API usage", "fraction of seats actively used",
                   "contracts expiring within N days (list)", "committed seats vs assigned seats"):
        assert family in families, family
    assert any(t.answer.kind == "entity_list" for t in TEMPLATES)
    assert any("day2" in t.params for t in TEMPLATES)  # change over time


def test_spend_families_read_the_classes_of_the_spend_definition() -> None:
    # docs/rules.md, "Spend": spend = licenses assigned to active users (assignments, user_status) whose cost center
    # (cost_center_membership) pays the current list price (prices). A total counts every license.
    per_cost_center = {"assignments", "user_status", "cost_center_membership", "prices"}
    for tid in ("t2_cost_center_spend", "t2_top_cost_center", "t2_top_cost_center_in_unit",
                "t2_cost_centers_above", "t2_spend_change_cost_center", "t2_unallocated_spend"):
        assert set(template(tid).classes) == per_cost_center, tid
    assert set(template("t2_total_spend").classes) == {"assignments", "prices"}
    assert template("t1_list_price").classes == ("prices",)


def test_depends_on_and_change_windows() -> None:
    spend = template("t2_cost_center_spend")
    assert spend.depends_on({"cost_center": "cc_003"}) == frozenset({"cost_center:cc_003"})
    assert template("t2_total_spend").depends_on({}) == frozenset({ANY})
    t = D("2024-04-27")
    change = template("t1_held_licenses_change")
    assert change.change_window({"day1": "2024-04-01", "day2": "2024-04-20"}, t) == (D("2024-04-01"), D("2024-04-20"))
    assert template("t1_offboardings").change_window({"days": 7}, t) == (D("2024-04-20"), t)
    assert spend.change_window({"cost_center": "cc_003"}, t) == (None, t)
    # A current-state question over a usage window: holdings move it whenever they change.
    assert template("t2_idle_licenses_cost_center").change_window({"cost_center": "cc_003", "days": 7}, t) == (None, t)


def test_rendering_refuses_missing_or_extra_params() -> None:
    with pytest.raises(ValueError, match="missing"):
        template("t1_list_price").render({})
    with pytest.raises(ValueError, match="unexpected"):
        template("t1_list_price").render({"product": "prd_0001", "days": 3})
    assert template("t2_cost_centers_above").render({"threshold": 12500}).endswith("above $12,500?")


# --- answer types ----------------------------------------------------------------------------------------


def test_integers_are_exact() -> None:
    assert INTEGER.equal(3, 3) and not INTEGER.equal(3, 4)
    assert INTEGER.parse("1,204 licenses") == 1204
    assert INTEGER.parse("-3") == -3
    for bad in ("3.5", "3 or 4", "many"):
        with pytest.raises(AnswerParseError):
            INTEGER.parse(bad)


def test_money_is_compared_at_the_cent_with_no_percentage_tolerance() -> None:
    assert MONEY.equal(1234.565, 1234.57)  # half up at the cent
    assert MONEY.equal(0.1 + 0.2, 0.3)
    assert not MONEY.equal(1000.00, 1000.01)
    assert not MONEY.equal(100000.0, 100500.0)  # 0.5% apart: wrong, whatever the size
    assert MONEY.parse("$1,234.50") == 1234.5
    assert MONEY.parse("-$12.30") == -12.3
    assert MONEY.format(-1234.5) == "-$1,234.50"


def test_fractions_are_compared_at_their_stated_rounding() -> None:
    assert FRACTION_2DP.equal(1 / 3, 0.33)
    assert FRACTION_2DP.equal(0.125, 0.13)  # half up on the decimal value
    assert not FRACTION_2DP.equal(0.33, 0.34)
    assert FRACTION_2DP.parse("45%") == 0.45
    assert round_half_up(0.125, 2) == 0.13 and round_half_up(2.675, 2) == 2.68


def test_lists_compare_as_sets() -> None:
    assert ENTITY_LIST.equal(["cc_001", "cc_000"], ["cc_000", "cc_001", "cc_001"])
    assert not ENTITY_LIST.equal(["cc_001"], ["cc_000", "cc_001"])
    assert ENTITY_LIST.parse("cc_002, cc_000 and cc_001") == ["cc_000", "cc_001", "cc_002"]
    assert ENTITY_LIST.parse('["ctr_0001"]') == ["ctr_0001"]
    assert ENTITY_LIST.parse("none") == []
    assert ENTITY_LIST.equal([], [])


def test_ids_names_categories_and_dates() -> None:
    assert ENTITY.parse("The top product is prd_0023.") == "prd_0023"
    with pytest.raises(AnswerParseError):
        ENTITY.parse("prd_0023 or prd_0022")
    assert TEXT.equal("Bolt  Group", "bolt group")
    status = category("active", "expired", "pending")
    assert status.parse("It is Expired.") == "expired"
    with pytest.raises(AnswerParseError):
        status.parse("active or pending")
    assert DATE.parse("Notice is due by 2025-05-01.") == "2025-05-01"
    assert DATE.equal("2025-05-01", "2025-05-01") and not DATE.equal("2025-05-01", "2025-05-02")
    assert INTEGER.parse("unknown") is None and INTEGER.equal(None, None) and not INTEGER.equal(None, 0)


def test_degenerate_answers() -> None:
    assert INTEGER.is_degenerate(0) and not INTEGER.is_degenerate(2)
    assert FRACTION_2DP.is_degenerate(1.0) and FRACTION_2DP.is_degenerate(0.0)
    assert not FRACTION_2DP.is_degenerate(0.5)
    assert ENTITY_LIST.is_degenerate([]) and not ENTITY_LIST.is_degenerate(["cc_000"])
    assert ENTITY.is_degenerate(None)
