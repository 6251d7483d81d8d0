"""The JSON-action loop of the LLM agent at the chat-model seam (a scripted fake chat model; the real local model
runs the same loop in tests/integration/test_llm_local.py): each turn one JSON object, reads traced exactly like
tool calls, the read budget and its verdict, the stated as-of day, invalid replies."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from test_llm_agent import PRICE_QUESTION, QUESTION, SETTINGS, FakeRouter, T, agent, usage

from churn_assets.arms.agents import json_actions
from churn_assets.arms.agents.llm import MAX_INVALID_REPLIES, LlmReplyError
from churn_assets.arms.agents.llm_prompts import ANSWER_NOW_JSON, system_prompt
from churn_assets.arms.agents.llm_settings import JSON_ACTIONS, LlmSettings
from churn_assets.arms.base import TracingTools
from churn_assets.grounding.rows import VIEWS, Request

JSON_SETTINGS = dataclasses.replace(SETTINGS, mode=JSON_ACTIONS)


def turn(action: dict[str, Any] | str, finish: str = "stop", tokens: tuple[int, int] = (800, 30)) -> AIMessage:
    text = action if isinstance(action, str) else json.dumps(action)
    return AIMessage(content=text, usage_metadata=usage(*tokens), response_metadata={"finish_reason": finish})


def read(view: str, **filters: Any) -> AIMessage:
    return turn({"action": "retrieve", "view": view, **filters})


def answer(value: Any, as_of: str | None = "2024-04-27") -> AIMessage:
    return turn({"action": "answer", "answer": value, "data_as_of": as_of})


def schema_of(call_kwargs: dict[str, Any]) -> dict[str, Any]:
    return call_kwargs["extra_body"]["response_format"]["json_schema"]["schema"]


def test_reads_are_traced_requests_and_the_answer_is_read_with_the_templates_type() -> None:
    llm, chat = agent(read("holdings", product="prd_0001"), read("users"), answer(2, "2024-04-26"),
                      settings=JSON_SETTINGS)
    router = FakeRouter()
    tools = TracingTools(router)  # type: ignore[arg-type]
    got = llm.answer(QUESTION, T, tools)
    assert [reqs for reqs, _ in router.calls] == [[Request("holdings", product="prd_0001")], [Request("users")]]
    assert len(tools.traces) == 2 and all(n.startswith("llm: ") for _, n in router.calls)  # as the tool loop's
    assert (got.value, got.text, got.template_id, got.parse_error, got.budget_error) == (
        2, "2", "t2_license_holders_product", None, None)
    assert got.data_as_of == T - __import__("datetime").timedelta(days=1)
    assert got.usage is not None and (got.usage.calls, got.usage.tool_calls) == (3, 2)
    assert (got.usage.input_tokens, got.usage.output_tokens) == (2400, 90) and got.usage.seconds >= 0
    # the conversation: the arm's fixed system prompt, the task, then each reply and its result as a user message
    sent = chat.received[-1]
    assert isinstance(sent[0], SystemMessage) and sent[0].content == system_prompt(JSON_ACTIONS, False)
    assert isinstance(sent[1], HumanMessage) and "Today is 2024-04-27" in sent[1].content
    assert [type(m).__name__ for m in sent[2:]] == ["AIMessage", "HumanMessage"] * 2
    result = sent[3].content
    assert result.startswith("Result of retrieve:\n")
    rows = json.loads(result.splitlines()[1])
    assert rows["view"] == "holdings" and rows["data_as_of"] == T.isoformat() and rows["total_rows"] == 3
    # every turn asked for JSON of the action schema; the first turn could only read
    first, *later = (schema_of(k) for k in chat.call_kwargs)
    assert first == json_actions.action_schema(False, may_answer=False)
    assert later == [json_actions.action_schema(False)] * 2
    actions = [(a["properties"]["action"]["const"], a["properties"].get("view", {}).get("const"))
               for a in later[0]["anyOf"]]
    assert actions == [("retrieve", v) for v in VIEWS] + [("answer", None)]


def test_each_view_takes_only_its_filters() -> None:
    """One retrieve action per view: a read the grammar lets through is a request the router takes."""
    from churn_assets.arms.agents.llm_tools import VIEW_DOCS, request_of

    assert set(json_actions.VIEW_FILTERS) == set(VIEWS)
    for view, (required, optional) in json_actions.VIEW_FILTERS.items():
        action = json_actions.retrieve_action(view)
        assert action["required"] == ["action", "view", *required]
        assert set(action["properties"]) == {"action", "view", *required, *optional}
        for name in (*required, *optional):  # every filter offered is one the view's description names
            assert name in VIEW_DOCS[view] or (name, view) == ("products", "usage"), (view, name)
        args = {"view": view, **{f: {"first": "2024-04-01", "last": "2024-04-27", "window_days": 30}[f]
                                 for f in required}}
        assert request_of(args).view == view  # the smallest valid action is a valid request


@pytest.mark.parametrize(("value", "expected"), [(12.5, 12.5), ("$12.50", 12.5), (1234, 1234.0), ("unknown", None)])
def test_the_answer_field_takes_numbers_or_strings(value: Any, expected: Any) -> None:
    llm, _ = agent(read("prices", product="prd_0001"), answer(value), settings=JSON_SETTINGS)
    got = llm.answer(PRICE_QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert got.value == expected and got.parse_error is None


def test_numbers_are_read_in_plain_notation() -> None:
    assert [json_actions.answer_value_text(v) for v in (1e-05, 12.0, 3, 0.75, None, ["a", "b"])] == [
        "0.00001", "12", "3", "0.75", "unknown", "a, b"]
    assert json_actions.stated_day("2024-02-30") is None and json_actions.stated_day(None) is None


def test_the_read_budget_ends_in_budget_exhausted() -> None:
    settings = dataclasses.replace(JSON_SETTINGS, max_tool_rounds=8, max_tool_calls=2)  # the smaller bound rules
    llm, chat = agent(read("users"), read("holdings"), read("licenses"), settings=settings)
    router = FakeRouter()
    got = llm.answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert len(router.calls) == 2 and got.value is None and got.parse_error is None
    assert got.budget_error is not None and "max_tool_calls=2" in got.budget_error
    assert chat.received[-1][-1].content.endswith(ANSWER_NOW_JSON)  # told to answer after its last read
    assert got.usage is not None and (got.usage.calls, got.usage.tool_calls) == (3, 2)
    # answering when told to is an answer like any other
    llm, _ = agent(read("users"), read("holdings"), answer(2), settings=settings)
    assert llm.answer(QUESTION, T, TracingTools(FakeRouter())).value == 2  # type: ignore[arg-type]


def test_an_invalid_reply_is_told_to_the_model_which_replies_again() -> None:
    llm, chat = agent(turn("retrieve users please"), read("users"), answer(3), settings=JSON_SETTINGS)
    got = llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert got.value == 3 and got.usage is not None and got.usage.calls == 3
    told = chat.received[1][-1]
    assert isinstance(told, HumanMessage) and "not JSON" in told.content


def test_answering_on_the_first_turn_is_not_a_valid_reply() -> None:
    llm, chat = agent(answer(2), read("users"), answer(2), settings=JSON_SETTINGS)
    got = llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert got.value == 2 and "action 'answer' is not one of retrieve" in chat.received[1][-1].content


def test_invalid_json_again_and_again_stops_the_run_in_one_line() -> None:
    """An endpoint that does not constrain its replies: the run stops (nothing scored for that task) rather than
    scoring a failure that is the endpoint's."""
    llm, _ = agent(*[turn("Sure! The answer is 2.")] * MAX_INVALID_REPLIES, settings=JSON_SETTINGS)
    router = FakeRouter()
    with pytest.raises(LlmReplyError) as caught:
        llm.answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message and f"{MAX_INVALID_REPLIES} invalid JSON replies in a row" in message
    assert "response_format json_schema" in message and router.calls == []


def test_replies_cut_at_max_tokens_every_time_fail_that_task_only() -> None:
    """A model that runs on past max_tokens (the grammar holds, the JSON never closes) fails its own task."""
    cut = turn('{"action": "retrieve", "view": "users", "product": "prd_00000000', finish="length")
    llm, _ = agent(*[cut] * MAX_INVALID_REPLIES, settings=JSON_SETTINGS)
    got = llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert got.value is None and got.budget_error is None
    assert got.parse_error is not None and "cut at max_tokens=1024 3 times in a row" in got.parse_error


def test_search_records_in_json_mode() -> None:
    from types import SimpleNamespace

    hits = [SimpleNamespace(kind="product", entity_id="prd_0001", text="prd_0001 lists at $12.00.", day=T)]
    seen: list[Any] = []

    def search(query: str, kinds: Any, k: int) -> list[Any]:
        seen.append((query, kinds, k))
        return hits

    llm, chat = agent(turn({"action": "search_records", "query": "price prd_0001", "k": 3, "kinds": ["product"]}),
                      answer("$12.00"), settings=JSON_SETTINGS)
    got = llm.answer_from_records(PRICE_QUESTION, T, search)
    assert seen == [("price prd_0001", ("product",), 3)] and got.value == 12.0
    result = json.loads(chat.received[-1][-1].content.splitlines()[1])
    assert result["records"][0]["data_as_of"] == T.isoformat()
    assert schema_of(chat.call_kwargs[0]) == json_actions.action_schema(True, may_answer=False)
    # classic RAG: one store of everything, no kinds to name
    props = json_actions.action_schema(True, by_kind=False)["anyOf"][0]["properties"]
    assert set(props) == {"action", "query", "k"}


def test_the_system_prompt_is_one_per_arm_and_mode() -> None:
    """Fixed per mode and tool set (the server's prefix cache): no day, no question, no answer format in it."""
    prompts = {system_prompt(mode, records, by_kind) for mode in ("tools", "json") for records in (False, True)
               for by_kind in (False, True)}
    assert len(prompts) == 5  # tools: retrieve, search (kinds are in the tool schema); json: retrieve, 2 searches
    assert not any("Today is" in p for p in prompts)


def test_local_settings_hash_the_model_file_and_the_server_not_its_url() -> None:
    from churn_assets.arms.agents.llm_settings import LocalServer

    sha = "ab" * 32
    local = LlmSettings(None, "smollm2-135m", mode=JSON_ACTIONS, local=LocalServer(sha, "xllamacpp 1.0"))
    assert local.to_json()["base_url"] is None and local.to_json()["local"] == {
        "gguf_sha256": sha, "runtime": "xllamacpp 1.0", "n_ctx": 8192, "threads": 1}
    assert LlmSettings.from_json(json.loads(json.dumps(local.to_json()))) == local
    variants = [dataclasses.replace(local, local=dataclasses.replace(local.local, **change))  # type: ignore[arg-type]
                for change in ({"gguf_sha256": "cd" * 32}, {"runtime": "xllamacpp 2.0"}, {"n_ctx": 4096},
                               {"threads": 2})]
    variants += [dataclasses.replace(local, mode="tools"), dataclasses.replace(local, max_rows_per_call=20)]
    assert len({v.agent_id for v in variants} | {local.agent_id}) == len(variants) + 1
    with pytest.raises(Exception, match="not both"):
        LlmSettings("http://x/v1", "m", local=LocalServer(sha, "xllamacpp 1.0"))


def test_a_request_the_source_refuses_is_told_to_the_model() -> None:
    """A 4xx for the model's own arguments (the SaaS API's window_days above its maximum, seen with SmolLM2) is a bad
    tool argument: told to the model, not traced, the run goes on."""
    from churn_assets.fabric.saas_client import SaasRequestError

    class Refusing(FakeRouter):
        def retrieve(self, requests: Any, note: str = "") -> Any:
            if requests[0].window_days == 2024:
                raise SaasRequestError("GET /v1/.../utilization: 422 window_days must be <= 366", status=422)
            return super().retrieve(requests, note)

    llm, chat = agent(turn({"action": "retrieve", "view": "usage", "window_days": 2024, "products": ["prd_0001"]}),
                      read("users"), answer(1), settings=JSON_SETTINGS)
    tools = TracingTools(Refusing())  # type: ignore[arg-type]
    got = llm.answer(QUESTION, T, tools)
    assert got.value == 1 and len(tools.traces) == 1
    told = json.loads(chat.received[1][-1].content.splitlines()[1])
    assert "the source refused this request" in told["error"] and "422" in told["error"]
