"""The deterministic agent's question parser: every template's text parses back to it and its params."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from churn_assets.tasks.parser import QuestionParseError, parse_question
from churn_assets.tasks.templates import TEMPLATES, template

ROOT = Path(__file__).resolve().parents[1]

# Parameters of every kind, including awkward ones (thousands separators, multi-word business units).
SAMPLE_PARAMS: dict[str, dict[str, Any]] = {
    "cost_center": {"cost_center": "cc_017"},
    "product": {"product": "prd_0039"},
    "contract": {"contract": "ctr_0060"},
    "vendor": {"vendor": "vnd_011"},
    "days": {"days": 90},
    "day1": {"day1": "2024-03-28"},
    "day2": {"day2": "2024-04-27"},
    "threshold": {"threshold": 12500},
    "priority": {"priority": "critical"},
    "tier": {"tier": "preferred"},
    "business_unit": {"business_unit": "Research Operations"},
}


def _params_for(t: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in t.params:
        out.update(SAMPLE_PARAMS[name])
    return out


@pytest.mark.parametrize("t", TEMPLATES, ids=[t.template_id for t in TEMPLATES])
def test_every_template_round_trips(t: Any) -> None:
    params = _params_for(t)
    text = t.render(params)
    parsed = parse_question(text)
    assert parsed.template.template_id == t.template_id
    assert parsed.params == params
    assert parsed.template.render(parsed.params) == text


def test_round_trip_of_the_hand_made_cases() -> None:
    from test_gold import CASES

    for template_id, params, _, _ in CASES:
        text = template(template_id).render(params)
        parsed = parse_question(text)
        assert (parsed.template.template_id, parsed.params) == (template_id, params), text


def test_spacing_differences_are_tolerated() -> None:
    text = template("t2_cost_center_spend").render({"cost_center": "cc_004"})
    wrapped = "  " + text.replace(" ", "\n  ", 3) + "\n"
    assert parse_question(wrapped).params == {"cost_center": "cc_004"}


@pytest.mark.parametrize("text", [
    "What is the meaning of life?",
    "What is the current monthly list price per seat of product prd_0001",  # no question mark
    "How many users were offboarded in the last ten days (including today)?",
    "How many medium-rare-priority support tickets are currently open or in progress?",
    # Two days must be the same day where the text repeats it.
    "What was the net change in the number of licenses with a holder between 2024-03-01 and 2024-04-01 "
    "(count at the end of 2024-04-02 minus count at the end of 2024-03-01)?",
])
def test_unknown_questions_are_refused(text: str) -> None:
    with pytest.raises(QuestionParseError):
        parse_question(text)


def test_parser_and_templates_import_no_fold_and_no_gold() -> None:
    # Arms use the parser; the layering test forbids arms to import the fold or gold, so the parser and
    # what it imports must not either.
    forbidden = ("churn_assets.world.fold", "churn_assets.world.ledger", "churn_assets.tasks.gold",
                 "churn_assets.tasks.generator")
    for module in ("parser", "templates", "answers", "task_set"):
        tree = ast.parse((ROOT / "churn_assets" / "tasks" / f"{module}.py").read_text())
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in imported if m.startswith(forbidden)], module
