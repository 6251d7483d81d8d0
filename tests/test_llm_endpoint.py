"""The LLM agent's default chat model (`ChatOpenAI`, nothing injected) against a local OpenAI-compatible endpoint.

`test_llm_agent.py` injects a scripted chat model, so the HTTP path is never run there. Here a tiny
`POST /v1/chat/completions` server (http.server in a thread, on a free 127.0.0.1 port) replies from a script
and records every request: the request JSON (model, sampling, tools), the model's `tool_calls` coming back
as `Request`s through the arm's real `TracingTools` (over the unit tests' fake router), the tool results
sent with the next request, `usage` parsing and cost, and HTTP failures becoming `LlmEndpointError`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import openai
import pytest
import yaml
from test_llm_agent import PRICE_QUESTION, QUESTION, ROWS, FakeRouter, T

from churn_assets.arms.agents.llm import LlmAgent, LlmEndpointError
from churn_assets.arms.agents.llm_settings import REPEAT_TEMPERATURE, LlmSettings, repeat_seed
from churn_assets.arms.agents.llm_tools import RETRIEVE_TOOL, search_tool
from churn_assets.arms.agents.llm_usage import PRICES_FILE
from churn_assets.arms.base import RouterArm, TracingTools
from churn_assets.freshness.scenario import Scenario
from churn_assets.grounding.rows import VIEWS, Request
from churn_assets.tasks.task_set import Task

pytestmark = pytest.mark.timeout(60)  # the client's own timeout is 120 s: a hung endpoint must not hang the suite

MODEL = "gpt-4o-mini"
API_KEY = "sk-local-test"
COMPLETIONS = "/v1/chat/completions"
# env that ChatOpenAI / openai / httpx read: cleared so the test talks to the local server only
CLIENT_ENV = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_PROXY", "OPENAI_ORG_ID", "OPENAI_ORGANIZATION",
              "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

Reply = tuple[int, dict[str, Any], dict[str, str]]  # HTTP status, JSON body, extra headers


# ---------------------------------------------------------------------------------------------------
# the local endpoint
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Seen:
    """One request the endpoint received."""

    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]


class Endpoint:
    """An OpenAI-compatible chat-completions server; `respond(body) -> (status, json, headers)` is the script."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.respond: Callable[[dict[str, Any]], Reply] = lambda body: (500, error_body("no script"), {})
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test reads what was asked from `Endpoint.seen`, not from a log."""

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                endpoint.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                if self.path != COMPLETIONS:
                    status, out, headers = 404, error_body(f"no route {self.path}"), {}
                else:
                    status, out, headers = endpoint.respond(body)
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [s.body for s in self.seen]


@pytest.fixture(scope="module")
def server() -> Iterator[Endpoint]:
    ep = Endpoint()
    thread = threading.Thread(target=ep.server.serve_forever, name="fake-openai-endpoint", daemon=True)
    thread.start()
    try:
        yield ep
    finally:
        ep.server.shutdown()
        ep.server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def endpoint(server: Endpoint, monkeypatch: pytest.MonkeyPatch) -> Endpoint:
    """The module's server with a fresh record and no script; the client's env cleared."""
    for var in CLIENT_ENV:
        monkeypatch.delenv(var, raising=False)
    server.seen.clear()
    server.respond = lambda body: (500, error_body("no script"), {})
    return server


def error_body(message: str, kind: str = "server_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def completion(body: dict[str, Any], message: dict[str, Any], finish: str,
               tokens: tuple[int, int] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": f"chatcmpl-{len(body['messages'])}", "object": "chat.completion",
                           "created": 1714176000, "model": body["model"],
                           "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}]}
    if tokens is not None:
        out["usage"] = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1],
                        "total_tokens": tokens[0] + tokens[1]}
    return out


def tool_calls_reply(body: dict[str, Any], calls: Sequence[tuple[str, str, dict[str, Any]]],
                     tokens: tuple[int, int] | None) -> dict[str, Any]:
    """An assistant turn asking for tools: (call id, tool name, arguments) each, arguments as a JSON string."""
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                              for cid, name, args in calls]}
    return completion(body, message, "tool_calls", tokens)


def text_reply(body: dict[str, Any], text: str, tokens: tuple[int, int] | None) -> dict[str, Any]:
    return completion(body, {"role": "assistant", "content": text}, "stop", tokens)


def has_tool_result(body: dict[str, Any]) -> bool:
    return any(m.get("role") == "tool" for m in body["messages"])


def tools_then_answer(calls: Sequence[tuple[str, str, dict[str, Any]]], answer: str, first: tuple[int, int] | None,
                      final: tuple[int, int] | None) -> Callable[[dict[str, Any]], Reply]:
    """The script: tool calls first; once the request carries the tool results, the final text."""
    def respond(body: dict[str, Any]) -> Reply:
        if has_tool_result(body):
            return 200, text_reply(body, answer, final), {}
        return 200, tool_calls_reply(body, calls, first), {}
    return respond


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def yaml_price(model: str) -> tuple[float, float]:
    """prices.yaml read directly (not through the agent's parser): USD per 1M input, output tokens."""
    p = yaml.safe_load(PRICES_FILE.read_text())["models"][model]
    return float(p["input"]), float(p["output"])


# ---------------------------------------------------------------------------------------------------
# retrieve: request JSON, tool calls -> Requests, tool results -> the next request, usage
# ---------------------------------------------------------------------------------------------------

CALLS = [("call_holdings", "retrieve", {"view": "holdings", "product": "prd_0001"}),
         ("call_users", "retrieve", {"view": "users"})]
FIRST, FINAL = (1234, 56), (2345, 78)  # (prompt_tokens, completion_tokens) the server reports


def test_retrieve_round_trip_over_http(endpoint: Endpoint) -> None:
    endpoint.respond = tools_then_answer(CALLS, "usr_0003 was offboarded, so two are held.\nANSWER: 2", FIRST, FINAL)
    llm = LlmAgent(LlmSettings(endpoint.base_url, MODEL, seed=7), api_key=API_KEY)
    assert llm._chat_model is None  # the default ChatOpenAI is built on first use, not injected
    router = FakeRouter()
    tools = TracingTools(router)  # type: ignore[arg-type]
    got = llm.answer(QUESTION, T, tools)

    from langchain_openai import ChatOpenAI

    assert isinstance(llm.chat_model, ChatOpenAI)
    # the answer: read from the final text's ANSWER line with the template's type
    assert (got.value, got.text, got.template_id, got.parse_error) == (2, "2", "t2_license_holders_product", None)

    # two requests, to the chat-completions route, with the key as a bearer token
    assert [s.path for s in endpoint.seen] == [COMPLETIONS, COMPLETIONS]
    assert all(s.headers["authorization"] == f"Bearer {API_KEY}" for s in endpoint.seen)
    first, second = endpoint.bodies

    # the first request: the model, sampling and the retrieve tool as the OpenAI `tools` JSON
    assert first["model"] == MODEL and not first.get("stream")
    assert first["temperature"] == REPEAT_TEMPERATURE and first["seed"] == 7  # outside a run: the settings' own
    assert first.get("max_completion_tokens", first.get("max_tokens")) == 1024
    assert first["tools"] == [RETRIEVE_TOOL]
    [tool] = first["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "retrieve"
    params = tool["function"]["parameters"]
    assert params["required"] == ["view"] and params["properties"]["view"]["enum"] == list(VIEWS)
    assert set(params["properties"]) == {"view", "product", "contract", "vendor", "first", "last", "window_days",
                                         "products"}
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "Today is" not in first["messages"][0]["content"]  # the arm's fixed prompt: the prefix cache holds
    assert "Today is 2024-04-27" in first["messages"][1]["content"]
    assert "whole number" in first["messages"][1]["content"] and QUESTION in first["messages"][1]["content"]

    # the model's tool calls reached the arm's tools as Requests, one traced retrieval each
    assert [reqs for reqs, _ in router.calls] == [[Request("holdings", product="prd_0001")], [Request("users")]]
    assert len(tools.traces) == 2

    # the second request: the same tools, the assistant's tool calls echoed, then one tool result per call
    assert second["model"] == MODEL and second["tools"] == [RETRIEVE_TOOL]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    assistant = second["messages"][2]
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in assistant["tool_calls"]] == CALLS
    results = second["messages"][3:]
    assert [m["tool_call_id"] for m in results] == ["call_holdings", "call_users"]
    holdings, users = (json.loads(m["content"]) for m in results)
    assert holdings["view"] == "holdings" and holdings["entity_class"] == "assignments"
    lic = holdings["columns"].index("license_id")
    assert [r[lic] for r in holdings["rows"]] == [h.license_id for h in ROWS["holdings"]]
    ended = holdings["columns"].index("ended_by")
    assert [r[ended] for r in holdings["rows"]] == [None, None, "offboarded"]
    assert users["view"] == "users" and users["total_rows"] == len(ROWS["users"])
    assert [r[users["columns"].index("offboarded_on")] for r in users["rows"]] == [None, None, "2024-03-01"]

    # tokens are the server's usage; cost follows prices.yaml
    u = got.usage
    assert u is not None
    assert (u.model, u.calls, u.tool_calls, u.unreported_calls) == (MODEL, 2, 2, 0)
    assert (u.input_tokens, u.output_tokens) == (FIRST[0] + FINAL[0], FIRST[1] + FINAL[1])
    price_in, price_out = yaml_price(MODEL)
    # (kept to the micro-dollar, as llm.Price.cost rounds)
    assert u.cost_usd == round(u.input_tokens / 1e6 * price_in + u.output_tokens / 1e6 * price_out, 6)
    assert u.cost_usd is not None and u.cost_usd > 0


def test_each_repeat_sends_the_repeat_temperature_and_its_own_seed(endpoint: Endpoint) -> None:
    """What `eval_run` passes each repeat (`LlmSettings.sampling`) is what the request carries: the settings'
    temperature and the repeat's seed, derived from the experiment hash and the repeat index."""
    settings = LlmSettings(endpoint.base_url, MODEL)
    assert settings.temperature == REPEAT_TEMPERATURE == 0.7
    endpoint.respond = lambda body: (200, text_reply(body, "ANSWER: 2", FINAL), {})
    sent = []
    for repeat in (0, 1, 2):
        sampling = settings.sampling("0123456789abcdef", repeat)
        LlmAgent(settings, api_key=API_KEY, sampling=sampling).answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
        body = endpoint.bodies[-1]
        sent.append((body["temperature"], body["seed"]))
        assert body["seed"] == repeat_seed("0123456789abcdef", repeat) == sampling.seed
    assert {t for t, _ in sent} == {0.7} and len({s for _, s in sent}) == 3
    assert all(0 <= s < 2**31 for _, s in sent)
    # the seeds are a function of the experiment: another experiment hash, other seeds; the same, the same
    assert repeat_seed("fedcba9876543210", 1) != repeat_seed("0123456789abcdef", 1)
    assert settings.sampling("0123456789abcdef", 2) == sampling  # the same experiment and repeat: the same seed


def test_a_tool_call_for_a_view_the_arm_does_not_serve_is_answered_not_served(endpoint: Endpoint) -> None:
    endpoint.respond = tools_then_answer(CALLS, "ANSWER: unknown", FIRST, FINAL)
    llm = LlmAgent(LlmSettings(endpoint.base_url, MODEL), api_key=API_KEY)
    router = FakeRouter()
    got = llm.answer(QUESTION, T, TracingTools(router, frozenset({"assignments"})))  # type: ignore[arg-type]
    assert [reqs for reqs, _ in router.calls] == [[Request("holdings", product="prd_0001")]]  # users: not traced
    assert got.value is None and got.parse_error is None  # "unknown"
    users = json.loads(endpoint.bodies[1]["messages"][4]["content"])
    assert users["served"] is False and "user_status" in users["error"]


def test_an_unpriced_model_and_a_reply_without_usage(endpoint: Endpoint) -> None:
    """A local model (not in prices.yaml) has cost None; a response without `usage` is counted as unreported."""
    endpoint.respond = tools_then_answer(CALLS[:1], "ANSWER: 2", FIRST, None)
    llm = LlmAgent(LlmSettings(endpoint.base_url, "llama3.1:8b"), api_key=None)
    got = llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert got.value == 2 and got.usage is not None
    assert (got.usage.calls, got.usage.input_tokens, got.usage.output_tokens) == (2, FIRST[0], FIRST[1])
    assert got.usage.unreported_calls == 1 and got.usage.cost_usd is None
    assert endpoint.bodies[0]["model"] == "llama3.1:8b"
    assert endpoint.seen[0].headers["authorization"] == "Bearer not-set"  # no key configured: a placeholder


# ---------------------------------------------------------------------------------------------------
# search_records (the RAG arms)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by_kind", [True, False])
def test_search_records_round_trip_over_http(endpoint: Endpoint, by_kind: bool) -> None:
    args: dict[str, Any] = {"query": "list price prd_0001", "k": 3}
    if by_kind:
        args["kinds"] = ["product"]
    endpoint.respond = tools_then_answer([("call_s", "search_records", args)], "ANSWER: $12.00", FIRST, FINAL)
    hits = [SimpleNamespace(kind="product", entity_id="prd_0001", text="Product prd_0001 lists at $12.00 per seat.")]
    seen: list[tuple[str, Any, int]] = []

    def search(query: str, kinds: Sequence[str] | None, k: int) -> list[Any]:
        seen.append((query, kinds, k))
        return hits

    llm = LlmAgent(LlmSettings(endpoint.base_url, "gpt-4o-mini-2024-07-18"), api_key=API_KEY)  # a dated snapshot
    got = llm.answer_from_records(PRICE_QUESTION, T, search, by_kind=by_kind)
    assert (got.value, got.template_id) == (12.0, "t1_list_price")
    assert seen == [("list price prd_0001", ("product",) if by_kind else None, 3)]
    first, second = endpoint.bodies
    assert first["tools"] == [search_tool(by_kind)]
    props = first["tools"][0]["function"]["parameters"]["properties"]
    assert first["tools"][0]["function"]["name"] == "search_records"
    assert set(props) == ({"query", "k", "kinds"} if by_kind else {"query", "k"})
    [result] = [m for m in second["messages"] if m["role"] == "tool"]
    assert result["tool_call_id"] == "call_s"
    assert json.loads(result["content"]) == {"count": 1, "records": [{"kind": "product", "entity_id": "prd_0001",
                                                                     "text": hits[0].text}]}
    # the dated snapshot is priced as gpt-4o-mini (the longest listed prefix)
    price_in, price_out = yaml_price("gpt-4o-mini")
    assert got.usage is not None and got.usage.cost_usd == round(
        (FIRST[0] + FINAL[0]) / 1e6 * price_in + (FIRST[1] + FINAL[1]) / 1e6 * price_out, 6)


# ---------------------------------------------------------------------------------------------------
# a failing endpoint stops with LlmEndpointError, never a scored answer
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "error", "kind", "attempts"), [
    # a 5xx is retried (1 + llm.py's max_retries=2); `retry-after-ms` keeps the client's back-off short
    (500, openai.InternalServerError, "server_error", 3),
    (401, openai.AuthenticationError, "invalid_request_error", 1),  # a refused key is not retried
    (404, openai.NotFoundError, "invalid_request_error", 1),  # an unknown model
])
def test_an_http_error_raises_llm_endpoint_error(endpoint: Endpoint, status: int, error: type[Exception],
                                                 kind: str, attempts: int) -> None:
    message = f"scripted failure {status}"
    endpoint.respond = lambda body: (status, error_body(message, kind), {"retry-after-ms": "10"})
    llm = LlmAgent(LlmSettings(endpoint.base_url, MODEL), api_key=API_KEY)
    router = FakeRouter()
    with pytest.raises(LlmEndpointError, match=rf"model {MODEL} at {re.escape(endpoint.base_url)}\): ") as caught:
        llm.answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, error)  # langchain_openai re-raises openai's error as a subclass
    assert message in str(caught.value) and "CHURNBENCH_LLM_BASE_URL" in str(caught.value)
    assert len(endpoint.seen) == attempts and router.calls == []


def test_a_400_fails_only_that_task(endpoint: Endpoint) -> None:
    """A request the endpoint refuses (a conversation past the model's context, say) is that task's failure,
    scored as no answer; the run goes on (an LlmEndpointError would stop it at every resume)."""
    endpoint.respond = lambda body: (400, error_body("maximum context length exceeded", "invalid_request_error"), {})
    llm = LlmAgent(LlmSettings(endpoint.base_url, MODEL), api_key=API_KEY)
    got = llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    assert got.value is None and got.parse_error is not None
    assert "HTTP 400" in got.parse_error and "maximum context length" in got.parse_error
    assert len(endpoint.seen) == 1 and got.usage is not None


def test_a_reply_that_is_not_a_chat_completion_raises_llm_endpoint_error(endpoint: Endpoint) -> None:
    """A base URL that answers 200 with something else (here an error object) is a misconfigured endpoint."""
    endpoint.respond = lambda body: (200, {"error": {"message": "not a chat API"}}, {})
    llm = LlmAgent(LlmSettings(endpoint.base_url, MODEL), api_key=API_KEY)
    with pytest.raises(LlmEndpointError, match="did not answer with an OpenAI chat completion"):
        llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]


def test_a_failure_after_a_tool_call_still_raises(endpoint: Endpoint) -> None:
    """The endpoint answers the first turn and fails on the second: no answer, the tool call did happen."""
    def respond(body: dict[str, Any]) -> Reply:
        if has_tool_result(body):
            return 401, error_body("key revoked", "invalid_request_error"), {}
        return 200, tool_calls_reply(body, CALLS[:1], FIRST), {}

    endpoint.respond = respond
    router = FakeRouter()
    llm = LlmAgent(LlmSettings(endpoint.base_url, MODEL), api_key=API_KEY)
    with pytest.raises(LlmEndpointError, match="key revoked"):
        llm.answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert len(endpoint.seen) == 2 and [reqs for reqs, _ in router.calls] == [[Request("holdings",
                                                                                     product="prd_0001")]]


def test_an_endpoint_not_listening_stops_the_arm_with_llm_endpoint_error(endpoint: Endpoint) -> None:
    """Through an arm: the error propagates (not an ArmAnswer with a transport error, which would be scored)."""
    class FakeArm(RouterArm):
        name = "fake"

    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    arm = FakeArm(Scenario("w", "grounding", "tiered", T - dt.timedelta(days=1), T), FakeRouter())  # type: ignore[arg-type]
    arm.agent = LlmAgent(LlmSettings(url, MODEL), api_key=API_KEY)
    task = Task("t1", "w", T.isoformat(), "t2_license_holders_product", {"product": "prd_0001"}, QUESTION)
    with pytest.raises(LlmEndpointError, match=rf"model {MODEL} at {re.escape(url)}\): ") as caught:
        arm.answer(task)
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)
    assert endpoint.seen == []


# ---------------------------------------------------------------------------------------------------
# the JSON-action loop over HTTP: response_format in the request, replies read as actions
# ---------------------------------------------------------------------------------------------------


def json_settings(url: str) -> LlmSettings:
    return LlmSettings(url, "qwen2.5-coder-0.5b", mode="json", max_tokens=256)


def test_json_actions_over_http_ask_for_the_schema_and_read_the_replies(endpoint: Endpoint) -> None:
    from churn_assets.arms.agents import json_actions

    def respond(body: dict[str, Any]) -> Reply:
        first = len(body["messages"]) == 2
        action = ({"action": "retrieve", "view": "holdings", "product": "prd_0001"} if first else
                  {"action": "answer", "answer": 2, "data_as_of": "2024-04-27"})
        return 200, text_reply(body, json.dumps(action), FIRST if first else FINAL), {}

    endpoint.respond = respond
    router = FakeRouter()
    got = LlmAgent(json_settings(endpoint.base_url)).answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert (got.value, got.data_as_of, got.budget_error) == (2, T, None)
    assert [reqs for reqs, _ in router.calls] == [[Request("holdings", product="prd_0001")]]
    first, second = endpoint.bodies
    # no tools: each request carries the action schema as OpenAI's response_format (llama.cpp makes it a grammar)
    assert "tools" not in first and first.get("max_completion_tokens", first.get("max_tokens")) == 256
    assert first["response_format"] == json_actions.response_format(json_actions.action_schema(False,
                                                                                               may_answer=False))
    assert second["response_format"] == json_actions.response_format(json_actions.action_schema(False))
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["messages"][3]["content"].startswith("Result of retrieve:")
    assert got.usage is not None and (got.usage.input_tokens, got.usage.output_tokens) == (
        FIRST[0] + FINAL[0], FIRST[1] + FINAL[1])


def test_an_endpoint_that_ignores_the_schema_stops_the_run_in_one_line(endpoint: Endpoint) -> None:
    """Invalid JSON replies again and again (an endpoint that does not honour response_format): LlmReplyError,
    nothing scored; each invalid reply was told to the model first."""
    from churn_assets.arms.agents.llm import MAX_INVALID_REPLIES, LlmReplyError

    endpoint.respond = lambda body: (200, text_reply(body, "I would look at the holdings view.", FIRST), {})
    router = FakeRouter()
    with pytest.raises(LlmReplyError) as caught:
        LlmAgent(json_settings(endpoint.base_url)).answer(QUESTION, T, TracingTools(router))  # type: ignore[arg-type]
    assert "\n" not in str(caught.value) and "invalid JSON replies in a row" in str(caught.value)
    assert len(endpoint.seen) == MAX_INVALID_REPLIES and router.calls == []
    assert "not JSON" in endpoint.bodies[-1]["messages"][-1]["content"]


def _actions_allowed(schema: dict[str, Any]) -> set[str]:
    """The `action` values a JSON schema of one turn lets through, read from the schema the server received
    (not rebuilt with `action_schema`): each alternative must pin `action` (a const or an enum, required);
    one that does not could be anything, the answer included ("*")."""
    alternatives = schema.get("anyOf") or schema.get("oneOf") or [schema]
    allowed: set[str] = set()
    for alt in alternatives:
        if "anyOf" in alt or "oneOf" in alt:
            allowed |= _actions_allowed(alt)
            continue
        action = (alt.get("properties") or {}).get("action") or {}
        pinned = [action["const"]] if "const" in action else action.get("enum")
        allowed |= set(pinned) if pinned and "action" in alt.get("required", []) else {"*"}
    return allowed


@pytest.mark.parametrize("records", [False, True])
def test_the_first_turn_sent_to_the_server_only_lets_the_model_read(endpoint: Endpoint, records: bool) -> None:
    """The schema the endpoint receives on the first turn of the JSON loop (the request body, as llama.cpp would
    turn it into a grammar) admits only the arm's read action: an answer before any read cannot be sampled.
    The next turn admits the answer."""
    import jsonschema

    read = "search_records" if records else "retrieve"
    read_action = ({"action": read, "query": "list price prd_0001", "k": 3} if records else
                   {"action": read, "view": "holdings", "product": "prd_0001"})
    answers = [{"action": "answer", "answer": 2, "data_as_of": "2024-04-27"},
               {"action": "answer", "answer": "unknown", "data_as_of": None}]

    def respond(body: dict[str, Any]) -> Reply:
        first = len(body["messages"]) == 2
        return 200, text_reply(body, json.dumps(read_action if first else answers[0]), FINAL), {}

    endpoint.respond = respond
    llm = LlmAgent(json_settings(endpoint.base_url))
    if records:
        llm.answer_from_records(PRICE_QUESTION, T, lambda query, kinds, k: [])
    else:
        llm.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
    first, second = endpoint.bodies
    assert "tools" not in first and first["response_format"]["type"] == "json_schema"
    sent = first["response_format"]["json_schema"]["schema"]
    assert _actions_allowed(sent) == {read}
    jsonschema.validate(read_action, sent)  # the read the model made is one the grammar allows
    for answer in answers:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(answer, sent)
    then = second["response_format"]["json_schema"]["schema"]
    assert _actions_allowed(then) == {read, "answer"}
    for answer in answers:
        jsonschema.validate(answer, then)


def test_on_an_arm_with_measures_the_first_turn_sent_only_lets_the_model_call_a_measure(endpoint: Endpoint) -> None:
    """Semantic first, as the server receives it: the first turn's schema admits only measure actions (each with
    its name pinned and the question's ids enumerated), a typed call validates and a wrong id does not; the next
    turn admits the measure, retrieve and the answer."""
    import jsonschema

    from churn_assets.grounding.measures import SemanticModel

    call = {"action": "measure", "measure": "licenses_held_by_active_users", "product": "prd_0001"}

    def respond(body: dict[str, Any]) -> Reply:
        first = len(body["messages"]) == 2
        action = call if first else {"action": "answer", "answer": 2, "data_as_of": "2024-04-27"}
        return 200, text_reply(body, json.dumps(action), FINAL), {}

    endpoint.respond = respond
    tools = TracingTools(FakeRouter(), semantic_model=SemanticModel())  # type: ignore[arg-type]
    got = LlmAgent(json_settings(endpoint.base_url)).answer(QUESTION, T, tools)
    assert (got.value, got.measure_calls, got.grounded) == (2, 1, True)
    first, second = endpoint.bodies
    sent = first["response_format"]["json_schema"]["schema"]
    assert _actions_allowed(sent) == {"measure"}
    jsonschema.validate(call, sent)
    for wrong in ({**call, "product": "prd_0002"}, {**call, "measure": "no_such_measure"},
                  {"action": "retrieve", "view": "holdings", "product": "prd_0001"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, sent)
    assert _actions_allowed(second["response_format"]["json_schema"]["schema"]) == {"measure", "retrieve",
                                                                                      "answer"}
    assert "licenses_held_by_active_users(product)" in first["messages"][0]["content"]
    assert second["messages"][3]["content"].startswith("Result of measure:\nlicenses_held_by_active_users = 2 ")


def test_actions_allowed_reads_an_open_schema_as_anything() -> None:
    """The check above fails for a schema that does not pin the action (as an unconstrained turn would be)."""
    assert _actions_allowed({"type": "object"}) == {"*"}
    assert _actions_allowed({"anyOf": [{"properties": {"action": {"const": "retrieve"}}, "required": ["action"]},
                                       {"properties": {"action": {"type": "string"}}}]}) == {"retrieve", "*"}
    assert _actions_allowed({"anyOf": [{"properties": {"action": {"const": "answer"}}}]}) == {"*"}  # not required


def test_the_repeat_seed_reaches_every_request_of_the_json_loop_through_agent_for_scenario(
        endpoint: Endpoint) -> None:
    """As `eval_run` builds each repeat's agent (`agent_for_scenario(..., sampling=settings.sampling(experiment,
    r))`): every request body of a task, the read turn and the answer turn, carries the repeat's `seed` and the
    settings' temperature; another repeat sends another seed."""
    from churn_assets.arms.agents.llm import agent_for_scenario
    from churn_assets.arms.agents.llm_settings import ENV_BASE_URL, ENV_MAX_TOKENS, ENV_MODE, ENV_MODEL

    env = {ENV_BASE_URL: endpoint.base_url, ENV_MODEL: "qwen2.5-coder-0.5b", ENV_MODE: "json", ENV_MAX_TOKENS: "256"}
    settings = LlmSettings.from_env(env)
    assert settings == json_settings(endpoint.base_url)

    def respond(body: dict[str, Any]) -> Reply:
        action: dict[str, Any] = ({"action": "retrieve", "view": "users"} if len(body["messages"]) == 2 else
                                  {"action": "answer", "answer": 2, "data_as_of": None})
        return 200, text_reply(body, json.dumps(action), FINAL), {}

    endpoint.respond = respond
    experiment = "0123456789abcdef"
    sent: dict[int, list[tuple[float, int]]] = {}
    for repeat in (0, 3):
        endpoint.seen.clear()
        agent = agent_for_scenario(settings.agent_id, settings.to_json(), env,
                                   sampling=settings.sampling(experiment, repeat))
        agent.answer(QUESTION, T, TracingTools(FakeRouter()))  # type: ignore[arg-type]
        assert len(endpoint.bodies) == 2
        sent[repeat] = [(b["temperature"], b["seed"]) for b in endpoint.bodies]
    for repeat, pairs in sent.items():
        assert pairs == [(REPEAT_TEMPERATURE, repeat_seed(experiment, repeat))] * 2
    assert repeat_seed(experiment, 0) != repeat_seed(experiment, 3)
