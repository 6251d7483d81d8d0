"""The LLM agent's wiring at the chat-model seam, with a scripted fake chat model (a real model answers in
tests/integration/test_llm_local.py).

The fake model emits the tool calls, JSON actions and final text a test scripts, and records what it was sent.
The arm side is a fake router behind the real `TracingTools`: rows built by hand, one trace per retrieval, so
the tests see exactly which `Request`s the model's tool calls became.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from churn_assets.arms.agents.deterministic import DeterministicAgent
from churn_assets.arms.agents.interface import AgentAnswer
from churn_assets.arms.agents.llm import LlmAgent, LlmEndpointError, agent_for_scenario
from churn_assets.arms.agents.llm_prompts import ANSWER_NOW, answer_text, stated_as_of
from churn_assets.arms.agents.llm_settings import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODEL,
    ENV_OPENAI_API_KEY,
    LlmConfigError,
    LlmSettings,
)
from churn_assets.arms.agents.llm_usage import Price, price_for, price_table
from churn_assets.arms.agents.local_models import LocalModelError
from churn_assets.arms.base import RouterArm, TracingTools
from churn_assets.arms.registry import define_scenario, scenario_from_json
from churn_assets.fabric.saas_client import TransportError
from churn_assets.freshness.scenario import Scenario, ScenarioError
from churn_assets.grounding.rows import HoldingRow, LicenseRow, Request, Row, UserRow
from churn_assets.grounding.traces import Read, TraceEntry
from churn_assets.tasks.task_set import Task

T = dt.date(2024, 4, 27)
D = dt.date.fromisoformat
QUESTION = "How many licenses of product prd_0001 are held by active users?"  # t2_license_holders_product
PRICE_QUESTION = "What is the current monthly list price per seat of product prd_0001?"  # t1_list_price
ENV_VARS = (ENV_BASE_URL, ENV_MODEL, ENV_API_KEY, ENV_OPENAI_API_KEY, "CHURNBENCH_LLM_TEMPERATURE",
            "CHURNBENCH_LLM_MAX_TOKENS", "CHURNBENCH_LLM_MAX_TOOL_ROUNDS", "CHURNBENCH_LLM_SEED", "CHURNBENCH_LLM_GGUF",
            "CHURNBENCH_LLM_MODE", "CHURNBENCH_LLM_MAX_TOOL_CALLS", "CHURNBENCH_LLM_MAX_ROWS", "CHURNBENCH_LLM_N_CTX",
            "CHURNBENCH_LLM_THREADS")


# ---------------------------------------------------------------------------------------------------
# fakes
# ---------------------------------------------------------------------------------------------------


class ScriptedChat(BaseChatModel):
    """Replies with the scripted messages in order; records the tools bound and every message list sent."""

    script: list[Any] = Field(default_factory=list)
    received: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[list[Any]] = Field(default_factory=list)
    call_kwargs: list[dict[str, Any]] = Field(default_factory=list)  # what each call was bound with

    @property
    def _llm_type(self) -> str:
        return "scripted-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChat:  # type: ignore[override]
        self.bound.append(list(tools))
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.received.append(list(messages))
        self.call_kwargs.append(dict(kwargs))
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return ChatResult(generations=[ChatGeneration(message=step)])


def tool_results(chat: ScriptedChat) -> list[dict[str, Any]]:
    """The tool results the model was sent with its last call, as JSON."""
    return [json.loads(str(m.content)) for m in chat.received[-1] if isinstance(m, ToolMessage)]


def usage(i: int, o: int) -> dict[str, int]:
    return {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}


def calls(*specs: tuple[str, dict[str, Any]], tokens: tuple[int, int] = (1000, 50)) -> AIMessage:
    return AIMessage(content="", usage_metadata=usage(*tokens),
                     tool_calls=[{"name": n, "args": a, "id": f"call_{i}"} for i, (n, a) in enumerate(specs)])


def final(text: str, tokens: tuple[int, int] = (1500, 20)) -> AIMessage:
    return AIMessage(content=text, usage_metadata=usage(*tokens))


ROWS: dict[str, list[Row]] = {
    "licenses": [LicenseRow("lic_0001", "prd_0001", D("2024-01-01"), None, 30.0),
                 LicenseRow("lic_0002", "prd_0001", D("2024-01-01"), None, 30.0),
                 LicenseRow("lic_0003", "prd_0001", D("2024-02-01"), None, 30.0)],
    "holdings": [HoldingRow("lic_0001", "prd_0001", "usr_0001", D("2024-01-02"), None, None),
                 HoldingRow("lic_0002", "prd_0001", "usr_0002", D("2024-01-02"), None, None),
                 HoldingRow("lic_0003", "prd_0001", "usr_0003", D("2024-02-02"), D("2024-03-01"), "offboarded")],
    "users": [UserRow("usr_0001", D("2023-06-01"), None), UserRow("usr_0002", D("2023-06-01"), None),
              UserRow("usr_0003", D("2023-06-01"), D("2024-03-01"))],
}


class FakeRouter:
    """What `TracingTools` needs of a router: rows per request and one trace entry per retrieval."""

    def __init__(self, rows: dict[str, list[Row]] | None = None) -> None:
        self.rows = ROWS if rows is None else rows
        self.calls: list[tuple[list[Request], str]] = []
        self.served = {"assignments": T, "user_status": T}

    def retrieve(self, requests: Sequence[Request], note: str = "") -> tuple[list[list[Row]], TraceEntry]:
        self.calls.append((list(requests), note))
        rows = [list(self.rows.get(r.view, [])) for r in requests]
        reads = tuple(Read("staging", f"w_staging.{r.entity_class}", r.entity_class, T, len(rs))
                      for r, rs in zip(requests, rows, strict=True))
        return rows, TraceEntry("staged_sql", reads, 1.0, note=note)


SETTINGS = LlmSettings("http://llm.invalid/v1", "gpt-4o-mini")


def agent(*script: Any, settings: LlmSettings = SETTINGS, **kwargs: Any) -> tuple[LlmAgent, ScriptedChat]:
    chat = ScriptedChat(script=list(script))
    return LlmAgent(settings, chat_model=chat, **kwargs), chat


# ---------------------------------------------------------------------------------------------------
# tool calls -> traced Requests, final text -> value
# ---------------------------------------------------------------------------------------------------


def test_tool_calls_reach_tracing_tools_as_requests_and_the_answer_is_parsed() -> None:
    llm, chat = agent(
        calls(("retrieve", {"view": "licenses", "product": "prd_0001"}),
              ("retrieve", {"view": "holdings", "product": "prd_0001"})),
        calls(("retrieve", {"view": "users"})),
        final("Two licenses are held by active users (usr_0003 was offboarded).\nANSWER: 2"))
    router = FakeRouter()
    tools = TracingTools(router)  # type: ignore[arg-type]
    got = llm.answer(QUESTION, T, tools)

    assert [reqs for reqs, _ in router.calls] == [[Request("licenses", product="prd_0001")],
                                                  [Request("holdings", product="prd_0001")], [Request("users")]]
    assert len(tools.traces) == 3 and all(n.startswith("llm: ") for _, n in router.calls)
    assert got == AgentAnswer(2, "2", "t2_license_holders_product", usage=got.usage, grounded=True,
                            copied_example=False, transcript=got.transcript)
    assert got.parse_error is None
    # the transcript: each reply (with its tool calls) and each call with the hash of what the model was shown
    assert got.transcript is not None
    assert [("reply" if "reply" in t else t["call"]) for t in got.transcript] == [
        "reply", "retrieve", "retrieve", "reply", "retrieve", "reply"]
    assert [c["name"] for c in got.transcript[0]["tool_calls"]] == ["retrieve", "retrieve"]
    assert got.transcript[-1]["reply"].endswith("ANSWER: 2")
    # the model saw the rows it asked for, one ToolMessage per call, answered to the call's id
    tool_msgs = [m for m in chat.received[-1] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in tool_msgs] == ["call_0", "call_1", "call_0"]
    licenses = json.loads(tool_msgs[0].content)
    assert licenses["view"] == "licenses" and licenses["total_rows"] == 3
    assert [r[licenses["columns"].index("license_id")] for r in licenses["rows"]] == ["lic_0001", "lic_0002",
                                                                                     "lic_0003"]
    # the system prompt is the arm's fixed one (a prefix cache holds across tasks); the first user message states
    # today, the question and the answer type of its template
    system, first = chat.received[0][:2]
    assert isinstance(system, SystemMessage) and "2024-04-27" not in system.content
    assert isinstance(first, HumanMessage) and "Today is 2024-04-27" in first.content
    assert QUESTION in first.content and "whole number" in first.content
    assert [t["function"]["name"] for t in chat.bound[0]] == ["retrieve"]
    # each result states the as-of day of its data (the read's data time, from its trace)
    assert licenses["data_as_of"] == T.isoformat()


def test_tools_stay_class_restricted_like_the_deterministic_agents() -> None:
    """A view the arm does not serve answers "not served" to the model and is never traced."""
    llm, chat = agent(calls(("retrieve", {"view": "users"}), ("retrieve", {"view": "licenses",
                                                                          "product": "prd_0001"})),
                      final("ANSWER: 3"))
    router = FakeRouter()
    tools = TracingTools(router, frozenset({"assignments"}))  # type: ignore[arg-type]
    got = llm.answer(QUESTION, T, tools)
    assert [reqs for reqs, _ in router.calls] == [[Request("licenses", product="prd_0001")]]
    assert len(tools.traces) == 1 and got.value == 3
    users = tool_results(chat)[0]
    assert users["served"] is False and "user_status" in users["error"]


@pytest.mark.parametrize(("args", "fragment"), [
    ({"view": "bogus"}, "unknown view"),
    ({"view": "consumption"}, "first and last"),
    ({"view": "consumption", "first": "yesterday", "last": "2024-04-27"}, "not a day"),
    ({"view": "users", "colour": "red"}, "unknown arguments"),
    # seen with SmolLM2 in CI: a URL as a product id reached the SaaS API's path, whose 404 failed the run
    ({"view": "usage", "window_days": 30, "products": ["https://www.eBay"]}, "is not an id"),
    ({"view": "holdings", "product": "prd 1"}, "product='prd 1' is not an id"),
])
def test_bad_tool_arguments_are_told_to_the_model_and_not_traced(args: dict[str, Any], fragment: str) -> None:
    llm, chat = agent(calls(("retrieve", args)), calls(("nope", {})), final("ANSWER: unknown"))
    router = FakeRouter()
    got = llm.answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert router.calls == [] and got.value is None and got.parse_error is None
    errors = [r["error"] for r in tool_results(chat)]
    assert fragment in errors[0] and "unknown tool" in errors[1]


def test_a_consumption_request_carries_its_days() -> None:
    llm, _ = agent(calls(("retrieve", {"view": "consumption", "first": "2024-04-01", "last": "2024-04-27"}),
                         ("retrieve", {"view": "usage", "window_days": 30, "products": ["prd_0001"]})),
                   final("ANSWER: 0"))
    router = FakeRouter()
    llm.answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert [reqs[0] for reqs, _ in router.calls] == [
        Request("consumption", first=D("2024-04-01"), last=D("2024-04-27")),
        Request("usage", window_days=30, products=("prd_0001",))]


def test_rows_beyond_the_limit_are_truncated_with_a_note() -> None:
    settings = dataclasses.replace(SETTINGS, max_rows_per_call=2)
    llm, chat = agent(calls(("retrieve", {"view": "licenses"})), final("ANSWER: 3"), settings=settings)
    llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    shown = tool_results(chat)[0]
    assert len(shown["rows"]) == 2 and shown["total_rows"] == 3 and "narrow" in shown["truncated"]


@pytest.mark.parametrize(("text", "value"), [("ANSWER: $1,234.50", 1234.5), ("The price is $99.", 99.0),
                                             ("ANSWER: unknown", None)])
def test_final_text_is_read_with_the_templates_answer_type(text: str, value: Any) -> None:
    llm, _ = agent(final(text))
    got = llm.answer(PRICE_QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert got.template_id == "t1_list_price" and got.value == value and got.parse_error is None


def test_an_unreadable_answer_is_a_parse_error() -> None:
    llm, _ = agent(final("Somewhere between 2 and 3 licenses.\nANSWER: 2 or 3"))
    got = llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert got.value is None and got.text == "2 or 3"
    assert got.parse_error is not None and "whole number" in got.parse_error
    assert got.usage is not None and got.usage.calls == 1


def test_answer_text_takes_the_last_answer_line() -> None:
    assert answer_text("ANSWER: 1\nthinking again...\nANSWER: `2`.") == "2"
    assert answer_text("**ANSWER:** **$1,234.50**") == "$1,234.50"
    assert answer_text("just 7") == "just 7"
    assert answer_text("ANSWER: 3\nDATA_AS_OF: 2024-04-20") == "3"
    assert stated_as_of("ANSWER: 3\nDATA_AS_OF: `2024-04-20`") == D("2024-04-20")
    assert stated_as_of("ANSWER: 3\nDATA_AS_OF: last week") is None and stated_as_of("ANSWER: 3") is None


def test_the_tool_round_bound_exhausts_the_budget() -> None:
    settings = dataclasses.replace(SETTINGS, max_tool_rounds=2)
    looping = [calls(("retrieve", {"view": "users"})) for _ in range(3)]
    llm, chat = agent(*looping, settings=settings)
    router = FakeRouter()
    got = llm.answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert len(chat.received) == 3 and len(router.calls) == 2  # 2 rounds of tools, the third turn must answer
    assert chat.received[-1][-1].content == ANSWER_NOW and len(chat.bound) == 1  # told to, and no tools offered
    assert got.value is None and got.parse_error is None
    assert got.budget_error is not None and "max_tool_rounds=2" in got.budget_error
    assert got.usage is not None and got.usage.calls == 3 and got.usage.tool_calls == 2


def test_the_tool_call_budget_bounds_calls_across_rounds() -> None:
    """30 calls by default: whichever of it and max_tool_rounds comes first. Here 3 calls in two turns: the third
    turn is told to answer, and answering there is a normal answer."""
    settings = dataclasses.replace(SETTINGS, max_tool_calls=3)
    llm, chat = agent(calls(("retrieve", {"view": "users"}), ("retrieve", {"view": "holdings"})),
                      calls(("retrieve", {"view": "licenses"})), final("ANSWER: 2\nDATA_AS_OF: 2024-04-27"),
                      settings=settings)
    got = llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert chat.received[-1][-1].content == ANSWER_NOW
    assert (got.value, got.budget_error, got.data_as_of) == (2, None, T)
    # a turn asking for more calls than the budget has left is not run at all
    llm, _ = agent(calls(("retrieve", {"view": "users"}), ("retrieve", {"view": "holdings"})),
                   calls(*[("retrieve", {"view": "licenses"})] * 2), settings=settings)
    router = FakeRouter()
    got = llm.answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert len(router.calls) == 2 and got.budget_error is not None and "max_tool_calls=3" in got.budget_error


# ---------------------------------------------------------------------------------------------------
# record search (the RAG arms)
# ---------------------------------------------------------------------------------------------------


def test_search_records_calls_the_arms_search() -> None:
    hits = [SimpleNamespace(kind="product", entity_id="prd_0001", text="Product prd_0001 lists at $12.00 per seat.")]
    seen: list[tuple[str, Any, int]] = []

    def search(query: str, kinds: Sequence[str] | None, k: int) -> list[Any]:
        seen.append((query, kinds, k))
        return hits

    llm, chat = agent(calls(("search_records", {"query": "price of prd_0001", "k": 3, "kinds": ["product"]}),
                            ("search_records", {"query": "prd_0001", "k": 500})),
                      final("ANSWER: $12.00"))
    got = llm.answer_from_records(PRICE_QUESTION, T, search)
    assert seen == [("price of prd_0001", ("product",), 3), ("prd_0001", ("user", "license", "product", "vendor",
                                                                          "cost_center", "ticket",
                                                                          "contract_chunk", "consumption"), 10)]
    assert got.value == 12.0
    records = tool_results(chat)[0]
    assert records["records"][0]["entity_id"] == "prd_0001"
    assert [t["function"]["name"] for t in chat.bound[0]] == ["search_records"]


def test_one_store_of_everything_is_searched_whole() -> None:
    seen: list[Any] = []
    llm, chat = agent(calls(("search_records", {"query": "prd_0001"})), final("ANSWER: unknown"))
    llm.answer_from_records(PRICE_QUESTION, T, lambda q, kinds, k: seen.append(kinds) or [], by_kind=False)
    assert seen == [None]
    assert "kinds" not in chat.bound[0][0]["function"]["parameters"]["properties"]


# ---------------------------------------------------------------------------------------------------
# tokens and cost
# ---------------------------------------------------------------------------------------------------


def test_token_accounting_and_cost_follow_the_price_table() -> None:
    llm, _ = agent(calls(("retrieve", {"view": "users"}), tokens=(1000, 50)), final("ANSWER: 2", tokens=(1500, 20)))
    got = llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    price = price_table()["gpt-4o-mini"]
    assert got.usage is not None
    assert (got.usage.calls, got.usage.input_tokens, got.usage.output_tokens, got.usage.tool_calls) == (2, 2500, 70, 1)
    assert got.usage.cost_usd == pytest.approx(2500 / 1e6 * price.input + 70 / 1e6 * price.output)
    assert got.usage.model == "gpt-4o-mini" and got.usage.unreported_calls == 0


def test_price_lookup_rule() -> None:
    table = {"gpt-4o": Price(2.5, 10.0), "gpt-4o-mini": Price(0.15, 0.6)}
    assert price_for("gpt-4o-mini", table) == table["gpt-4o-mini"]
    assert price_for("gpt-4o-mini-2024-07-18", table) == table["gpt-4o-mini"]  # longest listed prefix
    assert price_for("openai/gpt-4o", table) == table["gpt-4o"]  # provider prefix dropped
    assert price_for("gpt-4oo", table) is None and price_for("llama3.1:8b", table) is None
    assert Price(2.0, 8.0).cost(1_000_000, 500_000) == 6.0
    assert "gpt-4o-mini" in price_table()  # the shipped table parses


def test_an_unpriced_model_counts_tokens_with_cost_none() -> None:
    llm, _ = agent(final("ANSWER: 2"),
                   settings=LlmSettings("http://llm.invalid/v1", "local-model"))
    got = llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert got.usage is not None and got.usage.cost_usd is None and got.usage.input_tokens == 1500


def test_usage_reaches_the_arm_answer_and_its_json() -> None:
    class FakeArm(RouterArm):
        name = "fake"

    llm, _ = agent(calls(("retrieve", {"view": "licenses", "product": "prd_0001"})), final("ANSWER: 2"))
    arm = FakeArm(Scenario("w", "grounding", "tiered", T - dt.timedelta(days=1), T), FakeRouter())  # type: ignore[arg-type]
    arm.agent = llm
    task = Task("t1", "w", T.isoformat(), "t2_license_holders_product", {"product": "prd_0001"}, QUESTION)
    got = arm.answer(task)
    assert got.value == 2 and len(got.traces) == 1 and got.usage is not None
    js = got.to_json()
    assert js["usage"]["input_tokens"] == 2500 and js["usage"]["cost_usd"] == got.usage.cost_usd
    assert "usage" not in dataclasses.replace(got, usage=None).to_json()  # det answers keep their JSON


def test_a_source_failure_keeps_the_traces_and_the_tokens_spent() -> None:
    class Failing(FakeRouter):
        def retrieve(self, requests: Sequence[Request], note: str = "") -> Any:
            raise TransportError("SaaS kept refusing", attempts=3, last_status=429)

    class FakeArm(RouterArm):
        name = "fake"

    llm, _ = agent(calls(("retrieve", {"view": "tickets"})))
    arm = FakeArm(Scenario("w", "grounding", "tiered", T, T), Failing())  # type: ignore[arg-type]
    arm.agent = llm
    got = arm.answer(Task("t1", "w", T.isoformat(), "t2_license_holders_product", {"product": "prd_0001"}, QUESTION))
    assert got.transport_error is not None and got.usage is not None and got.usage.calls == 1


def test_an_endpoint_failure_stops_with_a_clear_error() -> None:
    refused = openai.APIConnectionError(request=httpx.Request("POST", "http://llm.invalid/v1/chat/completions"))
    llm, _ = agent(refused)
    with pytest.raises(LlmEndpointError, match=r"model gpt-4o-mini at http://llm.invalid/v1.*CHURNBENCH_LLM_BASE_URL"):
        llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]


def test_the_default_chat_model_is_chat_openai_on_the_endpoint() -> None:
    from langchain_openai import ChatOpenAI

    model = LlmAgent(SETTINGS, api_key="sk-test").chat_model  # built without any network call
    assert isinstance(model, ChatOpenAI)
    assert model.openai_api_base == "http://llm.invalid/v1" and model.model_name == "gpt-4o-mini"
    assert model.temperature == 0.7 and model.max_tokens == SETTINGS.max_tokens  # the repeat temperature


# ---------------------------------------------------------------------------------------------------
# settings, agent id, scenario key
# ---------------------------------------------------------------------------------------------------


def env(**extra: str) -> dict[str, str]:
    return {ENV_BASE_URL: "http://localhost:8000/v1", ENV_MODEL: "gpt-4o-mini", **extra}


def test_agent_id_is_stable_and_follows_the_settings_not_the_key() -> None:
    base = LlmSettings.from_env(env(**{ENV_API_KEY: "sk-one"}))
    assert re.fullmatch(r"llm-[0-9a-f]{6}", base.agent_id)
    assert base.agent_id == LlmSettings.from_env(env(**{ENV_API_KEY: "sk-two"})).agent_id
    assert base.agent_id == LlmSettings.from_env(env(**{ENV_OPENAI_API_KEY: "sk-three"})).agent_id
    assert base.agent_id == LlmSettings.from_env(env(**{ENV_BASE_URL: "http://localhost:8000/v1/"})).agent_id
    assert base.agent_id == LlmSettings.from_json(json.loads(json.dumps(base.to_json()))).agent_id
    assert "sk-one" not in json.dumps(base.to_json())
    others = {LlmSettings.from_env(env(**{ENV_MODEL: "gpt-4o"})).agent_id,
              LlmSettings.from_env(env(CHURNBENCH_LLM_TEMPERATURE="0.2")).agent_id,  # the default is 0.7
              LlmSettings.from_env(env(CHURNBENCH_LLM_MAX_TOOL_ROUNDS="3")).agent_id,
              LlmSettings.from_env(env(CHURNBENCH_LLM_MAX_TOOL_CALLS="12")).agent_id,
              LlmSettings.from_env(env(CHURNBENCH_LLM_MAX_ROWS="50")).agent_id,
              LlmSettings.from_env(env(CHURNBENCH_LLM_MODE="json")).agent_id,
              LlmSettings.from_env(env(**{ENV_BASE_URL: "http://other:8000/v1"})).agent_id,
              dataclasses.replace(base, prompt_version="0").agent_id}
    assert base.agent_id not in others and len(others) == 8
    # the id is the documented hash: sha256 of the canonical JSON of the settings, first six hex digits
    import hashlib

    canonical = json.dumps(base.to_json(), sort_keys=True, separators=(",", ":"))
    assert base.agent_id == "llm-" + hashlib.sha256(canonical.encode()).hexdigest()[:6]


def no_local_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine installed without `--llm`: no packaged model found (CI installs SmolLM2)."""
    from churn_assets.arms.agents import local_models

    monkeypatch.setattr(local_models, "installed_path", lambda model: None)


def test_from_env_without_an_endpoint_or_a_local_model_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    no_local_model(monkeypatch)
    with pytest.raises(LocalModelError, match=r"no local model is installed: `bash scripts/install.sh --llm "
                                             r"smollm2-135m` installs one.*CHURNBENCH_LLM_BASE_URL"):
        LlmSettings.from_env({})
    with pytest.raises(LlmConfigError, match=r"CHURNBENCH_LLM_MODEL not set"):
        LlmSettings.from_env({ENV_BASE_URL: "http://localhost:8000/v1"})
    with pytest.raises(LlmConfigError, match=r"CHURNBENCH_LLM_MODEL='gpt-4o' names a model of an endpoint"):
        LlmSettings.from_env({ENV_MODEL: "gpt-4o"})
    with pytest.raises(LlmConfigError, match="CHURNBENCH_LLM_TEMPERATURE"):
        LlmSettings.from_env(env(CHURNBENCH_LLM_TEMPERATURE="warm"))
    with pytest.raises(LlmConfigError, match="mode 'chat' is not one of tools, json"):
        LlmSettings.from_env(env(CHURNBENCH_LLM_MODE="chat"))


def test_scenario_key_carries_the_llm_agent_id_and_its_settings() -> None:
    settings = LlmSettings.from_env(env())
    s = define_scenario("w-s1-000000", "grounding", "tiered", T - dt.timedelta(days=29), T,
                        agent_id=settings.agent_id, model_settings=settings.to_json())
    assert s.key.endswith(f"__{settings.agent_id}__default__{s.world_id}")
    back = scenario_from_json(json.loads(json.dumps(s.to_json())))
    assert back.model_settings == settings.to_json()
    assert "model_settings" not in define_scenario("w", "naive", "tiered", T, T).to_json()
    with pytest.raises(ScenarioError, match="hash to"):
        scenario_from_json({**s.to_json(), "agent_id": "llm-000000"})
    with pytest.raises(ScenarioError, match="no stored model settings"):
        scenario_from_json({k: v for k, v in s.to_json().items() if k != "model_settings"})
    with pytest.raises(ScenarioError, match="neither det nor"):
        scenario_from_json({**s.to_json(), "agent_id": "gpt"})


def test_running_needs_the_environment_to_match_the_scenarios_agent() -> None:
    settings = LlmSettings.from_env(env())
    built = agent_for_scenario(settings.agent_id, settings.to_json(), env(**{ENV_API_KEY: "sk-x"}))
    assert built.agent_id == settings.agent_id and built._api_key == "sk-x"
    with pytest.raises(LlmConfigError, match=r"model: 'gpt-4o-mini' -> 'gpt-4o'"):
        agent_for_scenario(settings.agent_id, settings.to_json(), env(**{ENV_MODEL: "gpt-4o"}))
    with pytest.raises(LocalModelError, match=r"CHURNBENCH_LLM_GGUF=/nowhere\.gguf: no such file"):
        agent_for_scenario(settings.agent_id, settings.to_json(), {"CHURNBENCH_LLM_GGUF": "/nowhere.gguf"})


def test_run_result_spec_hashes_model_settings() -> None:
    from churn_assets.evaluation.runner import RunSpec

    a = LlmSettings.from_env(env())
    b = LlmSettings.from_env(env(CHURNBENCH_LLM_TEMPERATURE="0.5"))

    def spec(s: LlmSettings) -> RunSpec:
        return RunSpec(Scenario("w", "grounding", "tiered", T, T, s.agent_id, model_settings=s.to_json()), "h",
                       "tasks")

    assert spec(a).key("c").experiment_hash != spec(b).key("c").experiment_hash
    assert spec(a).experiment()["model_settings"]["model"] == "gpt-4o-mini"


def test_make_arm_takes_an_agent() -> None:
    from churn_assets.arms.naive import naive_vintage
    from churn_assets.arms.registry import make_arm
    from churn_assets.fabric.sources import Sources

    llm, _ = agent()
    scenario = Scenario("w", "naive", "tiered", T, T)
    assert make_arm(scenario, Sources("w"), served=naive_vintage(T), agent=llm).agent is llm
    assert isinstance(make_arm(scenario, Sources("w"), served=naive_vintage(T)).agent, DeterministicAgent)


def test_cli_run_with_the_llm_agent_and_no_model_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """No endpoint and no local model installed: one line naming the install command, before anything starts."""
    from churn_assets.cli import main

    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    no_local_model(monkeypatch)
    result = CliRunner().invoke(main, ["run", "--world", "w-s1-000000", "--arm", "grounding", "--t-prime",
                                       "2024-03-29", "--t", "2024-04-27", "--agent", "llm"])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert "bash scripts/install.sh --llm smollm2-135m" in line and "CHURNBENCH_LLM_BASE_URL" in line


@pytest.mark.parametrize(("gguf", "fragment"), [
    ("/nowhere/model.gguf", "--gguf /nowhere/model.gguf: no such file"),
    ("llama-70b", "is neither a file nor a packaged model"),
    (__file__, "not a GGUF file"),
])
def test_cli_run_with_a_bad_gguf_fails_in_one_line_before_anything_starts(monkeypatch: pytest.MonkeyPatch,
                                                                         gguf: str, fragment: str) -> None:
    from churn_assets.cli import main

    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CHURNBENCH_LLM_GGUF", "")  # --gguf sets it in the process: restored after the test
    result = CliRunner().invoke(main, ["run", "--world", "w-s1-000000", "--arm", "grounding", "--t-prime",
                                       "2024-03-29", "--t", "2024-04-27", "--agent", "llm", "--gguf", gguf])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert fragment in line and "CHURNBENCH_LLM_GGUF=" not in line  # what the user typed is named


def test_paper_refuses_a_bad_gguf_before_importing_dagster(tmp_path: Path) -> None:
    """Issue 46: `paper --agent llm --gguf /etc/passwd` imported the code location (about 3 s at idle) before it
    looked at the file. Checked in a fresh interpreter: nothing of Dagster is imported when the refusal comes."""
    import subprocess
    import sys

    code = ("import sys\nfrom churn_assets.cli import main\ntry:\n    main(['paper', '--agent', 'llm', '--gguf', "
            f"{__file__!r}])\nexcept SystemExit as e:\n    print('exit', e.code)\n"
            "print('dagster imported' if 'dagster' in sys.modules else 'dagster not imported')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHURNBENCH_LLM")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**env, "CHURNBENCH_STATE_DIR": str(tmp_path / "state")})
    assert done.stdout.splitlines()[-2:] == ["exit 1", "dagster not imported"], done.stdout + done.stderr
    assert f"--gguf {__file__}: not a GGUF file" in done.stderr


# ---------------------------------------------------------------------------------------------------
# transcripts played back (verify-results --replay on an LLM run; issue 46, item 3)
# ---------------------------------------------------------------------------------------------------


def _recorded() -> AgentAnswer:
    llm, _ = agent(calls(("retrieve", {"view": "licenses", "product": "prd_0001"})),
                   final("ANSWER: 3\nDATA_AS_OF: 2024-04-27"))
    return llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]


def test_a_transcript_plays_back_to_the_same_reads_and_answer() -> None:
    from churn_assets.arms.agents.llm_transcript import TranscriptChat
    from churn_assets.arms.agents.llm_transcript import calls as calls_of

    recorded = _recorded()
    assert recorded.transcript is not None
    chat = TranscriptChat()
    chat.load(recorded.transcript)
    router = FakeRouter()
    again = LlmAgent(SETTINGS, chat_model=chat).answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert (again.value, again.text, again.data_as_of) == (3, "3", T) and chat.unused == 0
    assert [reqs for reqs, _ in router.calls] == [[Request("licenses", product="prd_0001")]]  # read again, for real
    assert calls_of(again.transcript or ()) == calls_of(recorded.transcript)  # the same result hash
    changed = FakeRouter({**ROWS, "licenses": ROWS["licenses"][:2]})  # the store holds other rows now
    chat.load(recorded.transcript)
    moved = LlmAgent(SETTINGS, chat_model=chat).answer(QUESTION, T, TracingTools(changed))  # type: ignore[arg-type]
    assert calls_of(moved.transcript or ())[0]["result_sha256"] != calls_of(recorded.transcript)[0]["result_sha256"]


def test_playback_asks_the_model_again_and_names_a_rewritten_reply() -> None:
    from churn_assets.arms.agents.llm_transcript import TranscriptChat, TranscriptEnded

    recorded = _recorded()
    assert recorded.transcript is not None
    forged = [*recorded.transcript[:-1], {**recorded.transcript[-1], "reply": "ANSWER: 2"}]
    live = ScriptedChat(script=[calls(("retrieve", {"view": "licenses", "product": "prd_0001"})),
                                final("ANSWER: 3\nDATA_AS_OF: 2024-04-27")])
    chat = TranscriptChat(ask=live)
    chat.load(forged)
    again = LlmAgent(SETTINGS, chat_model=chat).answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert again.value == 2  # the loop goes on with the recorded replies ...
    [difference] = chat.differences  # ... and the model, asked on the same conversation, replied otherwise
    assert (difference.turn, difference.recorded, difference.asked) == (1, "ANSWER: 2",
                                                                      "ANSWER: 3\nDATA_AS_OF: 2024-04-27")
    chat = TranscriptChat()
    chat.load(recorded.transcript[:1])  # cut before the final reply
    with pytest.raises(TranscriptEnded, match="reply 2; the transcript has 1"):
        LlmAgent(SETTINGS, chat_model=chat).answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
