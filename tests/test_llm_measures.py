"""The LLM agent calling the registry's measures (issue 45) at the chat-model seam: a scripted fake chat model, a
fake router behind the real `TracingTools` and the real semantic model (`grounding/measures/`). The real local
model calls a measure in tests/integration/test_llm_local.py.

What is pinned: semantic first (the first JSON turn may only call a measure; the tool loop offers the measure
tool beside retrieve); a measure call reads through the arm's traced tools; bad calls (unknown measure, missing
or mistyped argument, an id the question does not name) get one line back and count against the read budget;
an id the question names that the served data do not know answers "unknown"; the `views` interface and arms
without a semantic model offer no measure; `grounded` and `copied_example` judge the answer.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from test_llm_agent import PRICE_QUESTION, QUESTION, SETTINGS, FakeRouter, T, agent, calls, final
from test_llm_json_actions import JSON_SETTINGS, answer, read, schema_of, turn

from churn_assets.arms.agents import json_actions
from churn_assets.arms.agents.llm_measures import (
    measure_actions,
    prompt_lines,
    question_pools,
    ready_answer,
)
from churn_assets.arms.agents.llm_prompts import system_prompt
from churn_assets.arms.agents.llm_settings import (
    JSON_ACTIONS,
    PROMPT_VERSION,
    VIEWS_ONLY,
    LlmConfigError,
    LlmSettings,
    check_agent_settings,
)
from churn_assets.arms.base import TracingTools
from churn_assets.grounding.measures import MeasureResult, SemanticModel

MODEL = SemanticModel()
HELD = "licenses_held_by_active_users"  # the measure of QUESTION's template (t2_license_holders_product)


def measure(name: str, **args: Any) -> Any:
    return turn({"action": "measure", "measure": name, **args})


def tools(router: FakeRouter | None = None, semantic: SemanticModel | None = MODEL) -> TracingTools:
    return TracingTools(router or FakeRouter(), semantic_model=semantic)  # type: ignore[arg-type]


def results(chat: Any) -> list[str]:
    """The results the model was sent in the JSON loop (the user messages after the task)."""
    return [str(m.content) for m in chat.received[-1][2:] if isinstance(m, HumanMessage)]


def test_a_measure_call_reads_through_the_arms_traced_tools_and_grounds_the_answer() -> None:
    llm, chat = agent(measure(HELD, product="prd_0001"), answer(2, "2024-04-27"), settings=JSON_SETTINGS)
    router = FakeRouter()
    arm_tools = tools(router)
    got = llm.answer(QUESTION, T, arm_tools)

    assert (got.value, got.parse_error, got.budget_error) == (2, None, None)
    assert (got.grounded, got.copied_example, got.measure_calls) == (True, False, 1)
    assert got.measures_called == ((f"{HELD}(product=prd_0001)", 2),)  # what ran, with its value
    assert got.usage is not None and got.usage.tool_calls == 1  # a measure call is a read against the budget
    # the measure's reads are the arm's traced reads, of the classes it declares
    assert router.calls and len(arm_tools.traces) == len(router.calls)
    assert {r.entity_class for reqs, _ in router.calls for r in reqs} <= set(MODEL.registry.measures[HELD].reads)
    [result] = results(chat)
    assert result.startswith(f"Result of measure:\n{HELD} = 2 (count); as of: ")
    # the value is followed by the invitation to answer with it (a bad call's error is not: see below)
    assert result.endswith('reply now with this answer: {"action": "answer", "answer": 2, "data_as_of": '
                           '"2024-04-27"}; otherwise call the measure that is. (7 read(s) left.)')
    # the system prompt lists every measure by name and arguments
    sent = chat.received[-1]
    assert isinstance(sent[0], SystemMessage)
    assert sent[0].content == system_prompt(JSON_ACTIONS, False, True, prompt_lines(MODEL.registry))
    assert f"{HELD}(product)" in sent[0].content and "Measure first" in sent[0].content


def test_semantic_first_the_first_turn_may_only_call_a_measure() -> None:
    llm, chat = agent(read("holdings", product="prd_0001"), measure(HELD, product="prd_0001"),
                      read("users"), answer(2), settings=JSON_SETTINGS)
    got = llm.answer(QUESTION, T, tools())
    assert got.value == 2 and got.measure_calls == 1
    first, *later = (schema_of(k) for k in chat.call_kwargs)
    assert {a["properties"]["action"]["const"] for a in first["anyOf"]} == {"measure"}
    # the question names a product: every measure but those taking a cost center, contract or vendor
    other_ids = {"cost_center", "contract", "vendor"}
    assert [a["properties"]["measure"]["const"] for a in first["anyOf"]] == [
        m.name for m in MODEL.registry.measures.values() if not other_ids & set(m.args)]
    assert later[0] == first  # the invalid first reply read nothing: still the first turn
    assert {a["properties"]["action"]["const"] for a in later[1]["anyOf"]} == {"measure", "retrieve", "answer"}
    # the retrieve on the first turn was told to the model as invalid, and not run
    assert "action 'retrieve' is not one of measure" in results(chat)[0]


def test_the_grammar_offers_the_ids_the_question_names_and_typed_arguments() -> None:
    pools = question_pools("How much did cost center cc_0003 spend on product prd_0001 in the last 30 days?")
    # each id argument takes the ids of its own type the question names, no other
    assert (pools["product"], pools["cost_center"], pools["contract"]) == (["prd_0001"], ["cc_0003"], [])
    assert pools["priority"]
    by_name = {a["properties"]["measure"]["const"]: a for a in measure_actions(MODEL.registry, pools)}
    held = by_name[HELD]
    assert held["required"] == ["action", "measure", "product"] and held["additionalProperties"] is False
    assert held["properties"]["product"] == {"enum": ["prd_0001"]}
    assert "contract_status" not in by_name  # it takes a contract, and the question names none
    typed = {a: s for m in by_name.values() for a, s in m["properties"].items()}
    assert typed["days"]["type"] == "integer" and typed["day1"]["pattern"] == json_actions.DAY_PATTERN


@pytest.mark.parametrize(("call", "fragment"), [
    ({"measure": "total_cost_of_everything", "product": "prd_0001"}, "unknown measure 'total_cost_of_everything'"),
    ({"measure": HELD}, f"measure {HELD} takes (product); missing product"),
    ({"measure": HELD, "product": "prd_0001", "days": 7}, "unexpected days"),
    ({"measure": "licenses_purchased", "days": "a week"}, "argument days must be a whole number"),
    ({"measure": HELD, "product": "prd_0042"}, "product 'prd_0042' is not one the question names"),
])
def test_a_bad_measure_call_gets_one_line_back_and_counts_as_a_read(call: dict[str, Any], fragment: str) -> None:
    llm, chat = agent(calls(("measure", call)), calls(("measure", {"measure": HELD, "product": "prd_0001"})),
                      final("ANSWER: 2\nDATA_AS_OF: 2024-04-27"))
    router = FakeRouter()
    got = llm.answer(QUESTION, T, tools(router))
    bad, good = (json.loads(str(m.content)) if str(m.content).startswith("{") else str(m.content)
                 for m in chat.received[-1] if isinstance(m, ToolMessage))
    assert isinstance(bad, dict) and fragment in bad["error"] and "\n" not in bad["error"]
    assert isinstance(good, str) and good.startswith(f"{HELD} = 2 ")
    assert got.measure_calls == 2 and got.usage is not None and got.usage.tool_calls == 2
    assert got.value == 2 and got.grounded is True
    # the tool loop offers the measure tool beside retrieve, the measure names enumerated
    offered = {spec["function"]["name"]: spec for spec in chat.bound[0]}
    assert set(offered) == {"measure", "retrieve"}
    assert offered["measure"]["function"]["parameters"]["properties"]["measure"]["enum"] == list(
        MODEL.registry.measures)


def test_an_id_the_served_data_do_not_know_answers_unknown_not_an_error() -> None:
    question = PRICE_QUESTION.replace("prd_0001", "prd_0009")  # named by the question, absent from the served rows
    llm, chat = agent(measure("list_price", product="prd_0009"), answer("unknown", None), settings=JSON_SETTINGS)
    got = llm.answer(question, T, tools())
    [result] = results(chat)
    assert "list_price = unknown (usd)" in result and "error" not in result
    assert got.value is None and got.text == "unknown" and got.grounded is True


def test_an_answer_no_call_returned_is_not_grounded_and_the_formats_example_is_flagged() -> None:
    llm, _ = agent(measure(HELD, product="prd_0001"), answer(12), settings=JSON_SETTINGS)
    got = llm.answer(QUESTION, T, tools())
    assert (got.value, got.grounded, got.copied_example) == (12, False, True)


def test_measure_calls_share_the_read_budget() -> None:
    settings = dataclasses.replace(JSON_SETTINGS, max_tool_calls=2)
    llm, _ = agent(*[measure(HELD, product="prd_0001")] * 3, settings=settings)
    got = llm.answer(QUESTION, T, tools())
    assert got.budget_error is not None and "another measure after 2 reads" in got.budget_error
    assert got.grounded is None and got.copied_example is None


@pytest.mark.parametrize("case", ["views interface", "arm without a semantic model"])
def test_no_measure_is_offered_on_the_views_interface_or_an_arm_without_one(case: str) -> None:
    settings = dataclasses.replace(JSON_SETTINGS, interface=VIEWS_ONLY) if case == "views interface" else JSON_SETTINGS
    llm, chat = agent(read("licenses", product="prd_0001"), read("holdings", product="prd_0001"), read("users"),
                      answer(2), settings=settings)
    got = llm.answer(QUESTION, T, tools(semantic=MODEL if case == "views interface" else None))
    assert got.value == 2 and got.measure_calls == 0 and got.grounded is True  # grounded in the rows shown
    first = schema_of(chat.call_kwargs[0])
    assert first == json_actions.action_schema(False, may_answer=False)
    assert chat.received[-1][0].content == system_prompt(JSON_ACTIONS, False)  # the views prompt, unchanged


def test_the_interface_is_part_of_the_agent_id_and_a_bad_one_is_refused() -> None:
    assert dataclasses.replace(SETTINGS, interface=VIEWS_ONLY).agent_id != SETTINGS.agent_id
    with pytest.raises(LlmConfigError, match="interface 'raw' is not one of measures, views"):
        dataclasses.replace(SETTINGS, interface="raw")


def test_a_scenario_defined_with_earlier_prompts_is_refused_in_one_line() -> None:
    old = {**SETTINGS.to_json(), "prompt_version": "2"}
    with pytest.raises(LlmConfigError, match=f"prompt version 2; this code's prompts are version {PROMPT_VERSION}"):
        check_agent_settings(SETTINGS.agent_id, old)


def test_settings_from_the_environment_take_the_interface() -> None:
    env = {"CHURNBENCH_LLM_BASE_URL": "http://llm.invalid/v1", "CHURNBENCH_LLM_MODEL": "m",
           "CHURNBENCH_LLM_INTERFACE": "views"}
    assert LlmSettings.from_env(env).interface == VIEWS_ONLY


def test_a_window_the_source_refuses_is_told_to_the_model_and_the_run_goes_on() -> None:
    """Seen with SmolLM2 on a grounding cell: seat_utilization(product, days=2024); the SaaS API answers 422
    (window_days at most 366). Told to the model like a refused `retrieve`, never a failed run."""
    from churn_assets.fabric.saas_client import SaasRequestError

    class Refusing(FakeRouter):
        def retrieve(self, requests: Any, note: str = "") -> Any:
            if any(r.window_days == 2024 for r in requests):
                raise SaasRequestError("GET /v1/.../utilization: 422 window_days must be <= 366", status=422)
            return super().retrieve(requests, note)

    llm, chat = agent(measure("seat_utilization", product="prd_0001", days=2024),
                      measure(HELD, product="prd_0001"), answer(2), settings=JSON_SETTINGS)
    got = llm.answer(QUESTION, T, tools(Refusing()))
    refused, held = results(chat)
    header, error, _ = refused.split("\n")  # one line of error between the header and the note
    assert header == "Result of measure:" and "the source refused this request" in error and "422" in error
    assert refused.endswith("\n(7 read(s) left.)")
    assert held.startswith(f"Result of measure:\n{HELD} = 2 ")
    assert (got.value, got.measure_calls) == (2, 2)


def test_a_measure_of_another_answer_type_does_not_ground_the_answer() -> None:
    """Seen with Qwen2.5-Coder-0.5B: a measure returning a list (contracts) before a numeric answer; the judgement
    skips a value of another type instead of failing the run."""
    llm, _ = agent(measure("contracts_expiring", days=30), measure(HELD, product="prd_0001"), answer(2),
                   settings=JSON_SETTINGS)
    got = llm.answer(QUESTION, T, tools())
    assert (got.value, got.grounded, got.measure_calls) == (2, True, 2)
    llm, _ = agent(measure("contracts_expiring", days=30), answer(5), settings=JSON_SETTINGS)
    assert llm.answer(QUESTION, T, tools()).grounded is False


def test_a_question_naming_no_id_offers_no_measure_taking_one() -> None:
    question = "How many list-price changes were recorded in the last 45 days (including today)?"
    pools = question_pools(question)
    assert pools["product"] == [] and pools["contract"] == []
    offered = {a["properties"]["measure"]["const"] for a in measure_actions(MODEL.registry, pools)}
    assert "price_changes" in offered and "list_price" not in offered and HELD not in offered
    # the tool loop, without a grammar, says so in one line
    llm, chat = agent(calls(("measure", {"measure": "list_price", "product": "prd_0042"})), final("ANSWER: 3"))
    llm.answer(question, T, tools())
    [told] = [json.loads(str(m.content)) for m in chat.received[-1] if isinstance(m, ToolMessage)]
    assert told["error"] == "product 'prd_0042' is not one the question names (it names none)"


@pytest.mark.parametrize("days", [0, 99_999_999, 10**12, "²", "2024-W01-1", True])
def test_a_window_out_of_range_is_one_line_not_a_crash(days: Any) -> None:
    llm, chat = agent(calls(("measure", {"measure": "licenses_purchased", "days": days})), final("ANSWER: 3"))
    got = llm.answer("How many licenses were purchased in the last 30 days (including today)?", T, tools())
    [told] = [json.loads(str(m.content)) for m in chat.received[-1] if isinstance(m, ToolMessage)]
    assert "argument days must be a whole number of days 1..3660" in told["error"] and got.text == "3"


def test_the_system_prompt_gives_each_measure_its_meaning_and_unit() -> None:
    prompt = system_prompt(JSON_ACTIONS, False, True, prompt_lines(MODEL.registry))
    for m in MODEL.registry.measures.values():
        assert f"{m.name}({', '.join(m.args)}): {m.meaning} ({m.unit})" in prompt.splitlines()


@pytest.mark.parametrize(("value", "as_of", "expected"), [
    (2, {"assignments": dt.date(2024, 4, 20), "user_status": dt.date(2024, 4, 27)}, (2, "2024-04-20")),
    (["cc_002", "cc_005"], {"assignments": dt.date(2024, 4, 27)}, ("cc_002, cc_005", "2024-04-27")),
    ([], {"contract_terms": None}, ("none", None)),
    (None, {"vendor_dims": dt.date(2024, 4, 1)}, ("unknown", "2024-04-01")),
    (dt.date(2026, 2, 23), {"contract_terms": dt.date(2024, 3, 30)}, ("2026-02-23", "2024-03-30")),
])
def test_the_ready_answer_is_the_value_as_the_result_line_writes_it(value: Any, as_of: dict[str, Any],
                                                                      expected: tuple[Any, str | None]) -> None:
    call = MODEL.check(HELD, {"product": "prd_0001"})
    got = json.loads(ready_answer(MeasureResult(call, value, "count", as_of, 3)))
    assert got == {"action": "answer", "answer": expected[0], "data_as_of": expected[1]}


def test_unknown_is_grounded_only_by_the_templates_own_measure() -> None:
    unknown_price = PRICE_QUESTION.replace("prd_0001", "prd_0009")
    # an unrelated measure that knows nothing, or a read that missed the class the question needs: not grounded
    llm, _ = agent(measure("vendor_name", vendor="prd_0009"), answer("unknown", None), settings=JSON_SETTINGS)
    assert llm.answer(unknown_price, T, tools()).grounded is False
    llm, _ = agent(measure(HELD, product="prd_0009"), read("users"), answer("unknown", None), settings=JSON_SETTINGS)
    assert llm.answer(unknown_price, T, tools()).grounded is False
    # the template's own measure answering unknown: grounded
    llm, _ = agent(measure("list_price", product="prd_0009"), answer("unknown", None), settings=JSON_SETTINGS)
    assert llm.answer(unknown_price, T, tools()).grounded is True


def test_an_amount_too_large_for_its_type_is_a_parse_error_not_a_crash() -> None:
    llm, _ = agent(measure("list_price", product="prd_0001"), answer(10**30), settings=JSON_SETTINGS)
    got = llm.answer(PRICE_QUESTION, T, tools())
    assert got.value is None and got.parse_error is not None and "not an amount" in got.parse_error


def test_the_deterministic_agent_records_its_one_call() -> None:
    from churn_assets.arms.agents.deterministic import DeterministicAgent

    got = DeterministicAgent().answer(QUESTION, T, tools())
    assert (got.value, got.measure_calls, got.measures_called) == (2, 1, ((f"{HELD}(product=prd_0001)", 2),))
