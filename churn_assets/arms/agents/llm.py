"""The LLM agent: a chat model answers through the arm's own tools, by LangChain tool calling, on any
OpenAI-compatible endpoint.

    settings = LlmSettings.from_env()        # CHURNBENCH_LLM_BASE_URL, CHURNBENCH_LLM_MODEL, ... (key: not kept)
    agent = LlmAgent(settings)               # ChatOpenAI(base_url=..., model=..., api_key=<from the environment>)
    arm = make_arm("grounding", scenario, sources, agent=agent)
    settings.agent_id                        # "llm-3f9a1c": the agent-id of the scenario key

It offers the two methods the deterministic agent offers, so it runs on every arm unchanged:

- `answer(question, today, tools)` (arms that read rows through the router): the model gets one tool,
  `retrieve(view, filters...)`; each call becomes one `grounding.rows.Request` through the arm's
  `TracingTools`, so every call is traced and restricted to the classes the arm serves exactly as the
  deterministic agent's are (a class the arm does not serve answers "not served", untraced);
- `answer_from_records(question, today, search)` (arms that retrieve fact records): the model gets
  `search_records(query, k[, kinds])`, one call of the arm's search each (traced by the arm).

The loop is bounded: at most `max_tool_rounds` model turns that ask for tools, then the model must answer.
The final text's `ANSWER: <value>` line (or the whole text) is read with the template's answer type
(`tasks/answers.py`); a text that is not a value of that type, or no answer within the bound, gives an
`AgentAnswer` with `parse_error` (scored `parse_failure`). Tokens come from each response's reported usage
(never counted locally: tiktoken would download encodings), and cost from `prices.yaml` (its header states
the lookup rule; an unpriced model has cost None, never a guessed 0).

The agent-id is `llm-<hash6>`: the first six hex digits of the SHA-256 of the canonical JSON of the model
settings (endpoint, model, sampling, bounds, prompt version). The API key never enters the settings, a hash
or a file. An endpoint that fails (unreachable, refused key, unknown model) stops the run with
`LlmEndpointError`, never a scored answer: the run resumes from its checkpoint once the endpoint answers.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from churn_assets.arms.agents.interface import (
    AgentAnswer,
    AgentError,
    RecordSearch,
    StructuredTools,
    TokenUsage,
)
from churn_assets.arms.extraction import K
from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.fabric.saas_client import TransportError
from churn_assets.freshness.scenario import LLM_AGENT_ID_RE
from churn_assets.grounding.rows import VIEW_CLASS, VIEWS, Request
from churn_assets.tasks.answers import AnswerParseError, AnswerType
from churn_assets.tasks.parser import QuestionParseError, parse_question
from churn_assets.world.calendar import Day

ENV_BASE_URL = "CHURNBENCH_LLM_BASE_URL"
ENV_MODEL = "CHURNBENCH_LLM_MODEL"
ENV_API_KEY = "CHURNBENCH_LLM_API_KEY"
ENV_OPENAI_API_KEY = "OPENAI_API_KEY"  # read when CHURNBENCH_LLM_API_KEY is not set
ENV_TEMPERATURE = "CHURNBENCH_LLM_TEMPERATURE"
ENV_MAX_TOKENS = "CHURNBENCH_LLM_MAX_TOKENS"
ENV_MAX_TOOL_ROUNDS = "CHURNBENCH_LLM_MAX_TOOL_ROUNDS"
ENV_SEED = "CHURNBENCH_LLM_SEED"

# Bumped whenever the system prompt or the tool descriptions change: it is part of the settings, so the
# agent-id (and the experiment hash) changes with them.
PROMPT_VERSION = "1"
PRICES_FILE = Path(__file__).with_name("prices.yaml")
ANSWER_NOW = ("You have used every tool round. Answer now from what the tools returned, on a last line "
              "'ANSWER: <value>'.")
NO_KEY = "not-set"  # sent when no key is configured (local endpoints such as vLLM or Ollama need none)


class LlmConfigError(AgentError):
    """LLM settings that are missing, malformed, or differ from the ones a scenario was defined with."""


class LlmEndpointError(AgentError):
    """The OpenAI-compatible endpoint did not answer (unreachable, refused key, unknown model)."""


class RequestRefused(Exception):
    """The endpoint answered 400 to one conversation (too long for the model's context, say): that task gets
    no answer (scored `parse_failure`), the run goes on. Any other endpoint failure stops the run."""


NO_ENDPOINT = (f"set {ENV_BASE_URL} (an OpenAI-compatible endpoint, e.g. "
               f"http://localhost:8000/v1) and {ENV_MODEL} (a model it serves); the API key is read from "
               f"{ENV_API_KEY} or {ENV_OPENAI_API_KEY}. No model is reachable from CI: use --agent deterministic there")


# ---------------------------------------------------------------------------------------------------
# settings and the agent-id
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlmSettings:
    """Everything about the model that can change an answer; the API key is deliberately not here."""

    base_url: str
    model: str
    temperature: float = 0.0
    max_tokens: int = 1024  # per model call
    max_tool_rounds: int = 8  # model turns that may ask for tools; the next one must answer
    max_rows_per_call: int = 500  # rows a `retrieve` shows the model (the rest: "truncated", narrow the filters)
    max_records_per_search: int = K  # k of `search_records` is clamped to this (the extraction rule's K)
    seed: int | None = None  # sent to endpoints that honour it
    prompt_version: str = PROMPT_VERSION

    def __post_init__(self) -> None:
        base_url = self.base_url.strip().rstrip("/")
        object.__setattr__(self, "base_url", base_url)
        object.__setattr__(self, "model", self.model.strip())
        object.__setattr__(self, "temperature", round(float(self.temperature), 3))
        if not base_url or not self.model:
            raise LlmConfigError(f"no LLM endpoint configured: {NO_ENDPOINT}")
        if not re.match(r"https?://", base_url):
            raise LlmConfigError(f"{ENV_BASE_URL}={base_url!r} is not an http(s) URL")
        if not 0.0 <= self.temperature <= 2.0:
            raise LlmConfigError(f"temperature {self.temperature} is outside [0, 2]")
        for name in ("max_tokens", "max_tool_rounds", "max_rows_per_call", "max_records_per_search"):
            if int(getattr(self, name)) < 1:
                raise LlmConfigError(f"{name} must be at least 1, got {getattr(self, name)}")

    def to_json(self) -> dict[str, Any]:
        """The settings as stored in a scenario definition and hashed into the experiment (no key)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LlmSettings:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise LlmConfigError(f"unknown model settings {unknown} (known: {', '.join(sorted(known))})")
        return cls(**dict(d))

    @property
    def agent_id(self) -> str:
        """`llm-<first 6 hex of the SHA-256 of the canonical JSON of the settings>` (the key is not in them)."""
        return "llm-" + sha256_hex(canonical_json(self.to_json()))[:6]

    def describe(self) -> str:
        return f"model {self.model} at {self.base_url}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LlmSettings:
        """Settings from CHURNBENCH_LLM_* (a clear `LlmConfigError` naming them when the endpoint is not set)."""
        env = os.environ if env is None else env
        base_url, model = env.get(ENV_BASE_URL, "").strip(), env.get(ENV_MODEL, "").strip()
        if not base_url or not model:
            missing = " and ".join(n for n, v in ((ENV_BASE_URL, base_url), (ENV_MODEL, model)) if not v)
            raise LlmConfigError(f"no LLM endpoint configured ({missing} not set): {NO_ENDPOINT}")
        extra: dict[str, Any] = {}
        for var, name, kind in ((ENV_TEMPERATURE, "temperature", float), (ENV_MAX_TOKENS, "max_tokens", int),
                                (ENV_MAX_TOOL_ROUNDS, "max_tool_rounds", int), (ENV_SEED, "seed", int)):
            raw = env.get(var, "").strip()
            if raw:
                try:
                    extra[name] = kind(raw)
                except ValueError:
                    raise LlmConfigError(f"{var}={raw!r} is not a{'n integer' if kind is int else ' number'}") \
                        from None
        return cls(base_url, model, **extra)


def api_key_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """The endpoint's key: CHURNBENCH_LLM_API_KEY, else OPENAI_API_KEY, else None. Never stored or hashed."""
    env = os.environ if env is None else env
    return env.get(ENV_API_KEY) or env.get(ENV_OPENAI_API_KEY) or None


def check_agent_settings(agent_id: str, model_settings: Mapping[str, Any] | None) -> LlmSettings:
    """The stored settings of an `llm-xxxxxx` agent, checked against the id they must hash to."""
    if not LLM_AGENT_ID_RE.fullmatch(agent_id):
        raise LlmConfigError(f"agent {agent_id!r} is neither det nor llm-<6 hex digits>")
    if not model_settings:
        raise LlmConfigError(f"agent {agent_id} has no stored model settings")
    settings = LlmSettings.from_json(model_settings)
    if settings.agent_id != agent_id:
        raise LlmConfigError(f"the stored model settings hash to {settings.agent_id}, not {agent_id}")
    return settings


def agent_for_scenario(agent_id: str, model_settings: Mapping[str, Any] | None,
                       env: Mapping[str, str] | None = None, **kwargs: Any) -> LlmAgent:
    """The agent a scenario was defined with, provided the environment's settings still hash to its id."""
    stored = check_agent_settings(agent_id, model_settings)
    current = LlmSettings.from_env(env)
    if current.agent_id != agent_id:
        now, then = current.to_json(), stored.to_json()
        diff = "; ".join(f"{k}: {then[k]!r} -> {now[k]!r}" for k in then if then[k] != now[k])
        raise LlmConfigError(f"the scenario's agent is {agent_id} ({stored.describe()}) but the environment's "
                             f"CHURNBENCH_LLM_* settings give {current.agent_id} ({diff}): set them as when the "
                             "scenario was defined, or define a new scenario")
    return LlmAgent(stored, api_key=api_key_from_env(env), **kwargs)


# ---------------------------------------------------------------------------------------------------
# prices
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """US dollars per 1 million tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return round(input_tokens / 1e6 * self.input + output_tokens / 1e6 * self.output, 6)


@cache
def price_table(path: Path = PRICES_FILE) -> dict[str, Price]:
    from churn_assets.unique_keys import load_yaml

    data = load_yaml(path.read_text(), str(path)) or {}
    return {str(name): Price(float(p["input"]), float(p["output"])) for name, p in (data.get("models") or {}).items()}


def price_for(model: str, table: Mapping[str, Price] | None = None) -> Price | None:
    """The rule of `prices.yaml`: drop a `provider/` prefix; the exact name; else the longest listed name
    followed by "-" that the model name starts with; else None (unpriced)."""
    table = price_table() if table is None else table
    name = model.rsplit("/", 1)[-1]
    if name in table:
        return table[name]
    prefixes = [k for k in table if name.startswith(k + "-")]
    return table[max(prefixes, key=len)] if prefixes else None


class _Meter:
    """Token accounting over one answer's model calls."""

    def __init__(self, model: str, price: Price | None) -> None:
        self.model, self.price = model, price
        self.calls = self.input_tokens = self.output_tokens = self.tool_calls = self.unreported = 0

    def add(self, reply: Any) -> None:
        self.calls += 1
        usage = getattr(reply, "usage_metadata", None)
        if not usage:
            self.unreported += 1
            return
        self.input_tokens += int(usage.get("input_tokens") or 0)
        self.output_tokens += int(usage.get("output_tokens") or 0)

    def usage(self) -> TokenUsage:
        cost = None if self.price is None else self.price.cost(self.input_tokens, self.output_tokens)
        return TokenUsage(self.model, self.calls, self.input_tokens, self.output_tokens, self.tool_calls, cost,
                          self.unreported)


# ---------------------------------------------------------------------------------------------------
# the tools the model sees
# ---------------------------------------------------------------------------------------------------

VIEW_DOCS: dict[str, str] = {
    "users": "users: user_id, hired_on, offboarded_on (null: active)",
    "memberships": "a user's cost-center intervals: user_id, cost_center_id, valid_from, valid_to",
    "cost_centers": "cost centers: cost_center_id, business_unit",
    "licenses": "license purchases: license_id, product_id, purchased_on, contract_id, unit_price_usd "
                "(filters: product, contract)",
    "holdings": "who held which license when: license_id, product_id, user_id, valid_from, valid_to, ended_by "
                "(reassigned, offboarded, reclaimed_idle; null while held) (filter: product)",
    "products": "products: product_id, vendor_id, listed_on",
    "prices": "monthly list price per seat, in intervals: product_id, list_price_usd, valid_from, valid_to "
              "(filter: product)",
    "vendors": "vendor name and tier, in intervals: vendor_id, name, tier, valid_from, valid_to (filter: vendor)",
    "contracts": "contracts: contract_id, vendor_id, renewal_notice_days, terms (recorded_on, effective_on, "
                 "expires_on = last day, annual_value_usd, committed_seats; the last term is the latest) "
                 "(filter: contract)",
    "consumption": "consumption events: day, user_id, product_id, license_id, session_minutes, api_calls "
                   "(first and last days required, both inclusive)",
    "usage": "per-license use over the trailing window_days days ending today: license_id, product_id, "
             "window_days, active_days, api_calls (window_days required; products: optional list)",
    "tickets": "support tickets: ticket_id, user_id, product_id, priority, opened_on, status today",
}

RETRIEVE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "retrieve",
        "description": "Read the rows of one view of the data, as served to you. Views: "
                       + "; ".join(f"{v}: {VIEW_DOCS[v]}" for v in VIEWS) + ".",
        "parameters": {
            "type": "object",
            "properties": {
                "view": {"type": "string", "enum": list(VIEWS)},
                "product": {"type": "string", "description": "a product id (licenses, holdings, prices)"},
                "contract": {"type": "string", "description": "a contract id (licenses, contracts)"},
                "vendor": {"type": "string", "description": "a vendor id (vendors)"},
                "first": {"type": "string", "description": "consumption: first day, YYYY-MM-DD"},
                "last": {"type": "string", "description": "consumption: last day, YYYY-MM-DD"},
                "window_days": {"type": "integer", "description": "usage: the trailing window in days"},
                "products": {"type": "array", "items": {"type": "string"},
                             "description": "usage: product ids to cover"},
            },
            "required": ["view"],
        },
    },
}


def search_tool(by_kind: bool) -> dict[str, Any]:
    from churn_assets.arms.extraction import RECORD_CLASSES

    properties: dict[str, Any] = {
        "query": {"type": "string", "description": "what to look for; name the ids you need"},
        "k": {"type": "integer", "description": "how many records (at most the arm's limit)"},
    }
    if by_kind:
        properties["kinds"] = {"type": "array", "items": {"type": "string", "enum": list(RECORD_CLASSES)},
                               "description": "record kinds to search (default: every kind)"}
    return {"type": "function", "function": {
        "name": "search_records",
        "description": "The k fact records (short texts) most similar to the query, from the store this arm "
                       "searches. Only the records returned are known to you.",
        "parameters": {"type": "object", "properties": properties, "required": ["query"]}}}


class ToolArgumentError(ValueError):
    """A tool call the model made with arguments the tool cannot take (told to the model, not traced)."""


_RETRIEVE_ARGS = ("view", "product", "contract", "vendor", "first", "last", "window_days", "products")


def request_of(args: Mapping[str, Any]) -> Request:
    """The `Request` a model's `retrieve` arguments ask for."""
    unknown = sorted(set(args) - set(_RETRIEVE_ARGS))
    if unknown:
        raise ToolArgumentError(f"unknown arguments {unknown}; retrieve takes {', '.join(_RETRIEVE_ARGS)}")

    def text(name: str) -> str | None:
        v = args.get(name)
        return (str(v).strip() or None) if v is not None else None

    def day(name: str) -> Day | None:
        v = text(name)
        try:
            return dt.date.fromisoformat(v) if v else None
        except ValueError:
            raise ToolArgumentError(f"{name}={v!r} is not a day YYYY-MM-DD") from None

    window = args.get("window_days")
    products = args.get("products")
    try:
        window_days = int(window) if window is not None else None
    except (TypeError, ValueError):
        raise ToolArgumentError(f"window_days={window!r} is not a whole number") from None
    if products is not None and (not isinstance(products, list | tuple) or not all(isinstance(p, str)
                                                                                  for p in products)):
        raise ToolArgumentError("products must be a list of product ids")
    try:
        return Request(str(args.get("view") or ""), product=text("product"), contract=text("contract"),
                       vendor=text("vendor"), first=day("first"), last=day("last"), window_days=window_days,
                       products=tuple(products) if products is not None else None)
    except ValueError as e:
        raise ToolArgumentError(str(e)) from None


def _plain(value: Any) -> Any:
    if isinstance(value, dt.date):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def rows_json(request: Request, rows: Sequence[Any] | None, limit: int) -> str:
    """What the model reads back from one `retrieve`: columns and rows (at most `limit` of them)."""
    if rows is None:
        return canonical_json({"view": request.view, "served": False,
                               "error": f"this arm does not serve {request.entity_class} (view {request.view})"})
    shown = list(rows[:limit])
    columns = [f.name for f in dataclasses.fields(shown[0])] if shown else []
    out: dict[str, Any] = {"view": request.view, "entity_class": VIEW_CLASS[request.view], "columns": columns,
                           "rows": [[_plain(getattr(r, c)) for c in columns] for r in shown],
                           "total_rows": len(rows)}
    if len(rows) > limit:
        out["truncated"] = f"only the first {limit} of {len(rows)} rows are shown: narrow the request with filters"
    return canonical_json(out)


# ---------------------------------------------------------------------------------------------------
# the prompt
# ---------------------------------------------------------------------------------------------------

FORMATS: dict[str, str] = {
    "integer": "a whole number, e.g. 12",
    "money": "US dollars with cents, e.g. $1,234.50",
    "fraction": "a fraction between 0 and 1 with {decimals} decimals, e.g. 0.75",
    "entity": "one id, e.g. cc_0003",
    "entity_list": "ids separated by commas, or none",
    "category": "one of: {choices}",
    "text": "the name as the data writes it",
    "date": "one day as YYYY-MM-DD",
}

GLOSSARY = """Definitions:
- Intervals are [valid_from, valid_to): a fact holds from valid_from and stops on valid_to; null: still holds.
- A user is active on a day when hired on or before it and not offboarded on or before it.
- Monthly spend of a cost center on a day: the sum, over licenses held on that day by active users whose cost \
center on that day is that cost center, of the product's monthly list price per seat on that day. Licenses \
unassigned or held by inactive users count as unallocated spend; total spend = allocated + unallocated.
- "In the last N days" is the N days ending today. States that follow from dates (a contract's status, months \
remaining, who is active) are computed at today from the dates, never read from a status text.
- An entity the data does not know is unknown."""


def answer_format(answer: AnswerType | None) -> str:
    if answer is None:
        return "the value only"
    return FORMATS[answer.kind].format(decimals=answer.decimals, choices=", ".join(answer.choices))


def system_prompt(today: Day, answer: AnswerType | None, records: bool) -> str:
    how = ("Use search_records to find the fact records you need; only the records it returns are known to you."
           if records else
           "Use retrieve to read the data, one view per call, with filters where they apply; only the rows it "
           "returns are known to you (a view the arm does not serve says so).")
    return (f"You answer one question about a company's software licenses, users, cost centers, vendors, "
            f"contracts, usage and support tickets. Today is {today.isoformat()}. {how}\n\n{GLOSSARY}\n\n"
            f"When you know the answer, end your reply with one line `ANSWER: <value>`, where <value> is "
            f"{answer_format(answer)}; write `ANSWER: unknown` when the data does not know what the question "
            "names. Do not ask questions back.")


_ANSWER_RE = re.compile(r"ANSWER\s*:\s*(.*)", re.IGNORECASE)


def answer_text(reply: str) -> str:
    """The value part of a final reply: after the last `ANSWER:` (its line), else the whole text."""
    found = _ANSWER_RE.findall(reply)
    text = found[-1] if found else reply
    return text.strip().rstrip(".").strip(" \t`*")  # markdown emphasis and a final period dropped


def _text_of(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                   if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text"))


def _endpoint_failure(e: BaseException) -> bool:
    # by the class's ancestry, not its own module: langchain_openai re-raises openai's errors as subclasses
    # defined in langchain_openai (OpenAIAPIError < openai.InternalServerError, ...)
    return any(c.__module__.split(".")[0] in ("openai", "httpx", "httpx2", "httpcore") for c in type(e).__mro__)


# ---------------------------------------------------------------------------------------------------
# the agent
# ---------------------------------------------------------------------------------------------------

Handler = Callable[[Mapping[str, Any]], str]


class LlmAgent:
    """A chat model answering through an arm's tools. `chat_model`: any LangChain chat model with
    `bind_tools` (tests inject a scripted one); default `ChatOpenAI` on the settings' endpoint."""

    def __init__(self, settings: LlmSettings, *, chat_model: Any = None, api_key: str | None = None,
                 prices: Mapping[str, Price] | None = None) -> None:
        self.settings = settings
        self.agent_id = settings.agent_id
        self._chat_model = chat_model
        self._api_key = api_key
        self.price = price_for(settings.model, prices)

    @property
    def chat_model(self) -> Any:
        if self._chat_model is None:
            from langchain_openai import ChatOpenAI
            from pydantic import SecretStr

            s = self.settings
            # `max_completion_tokens` is the name of ChatOpenAI's `max_tokens` field in its signature (its alias).
            self._chat_model = ChatOpenAI(base_url=s.base_url, model=s.model,
                                          api_key=SecretStr(self._api_key or NO_KEY), temperature=s.temperature,
                                          max_completion_tokens=s.max_tokens, seed=s.seed, max_retries=2,
                                          timeout=120)
        return self._chat_model

    # -- the two methods every arm calls ------------------------------------------------------------

    def answer(self, question: str, today: Day, tools: StructuredTools) -> AgentAnswer:
        limit = self.settings.max_rows_per_call

        def retrieve(args: Mapping[str, Any]) -> str:
            request = request_of(args)
            [rows] = tools.retrieve([request], note=f"llm: {request.describe()}")
            return rows_json(request, rows, limit)

        return self._run(question, today, [RETRIEVE_TOOL], {"retrieve": retrieve}, records=False)

    def answer_from_records(self, question: str, today: Day, search: RecordSearch, *,
                            by_kind: bool = True) -> AgentAnswer:
        """`by_kind`: the model may restrict the record kinds searched (default every kind); False: one store
        of everything, searched whole (the classic-RAG arm)."""
        from churn_assets.arms.extraction import RECORD_CLASSES

        top = self.settings.max_records_per_search
        allowed = {"query", "k", "kinds"} if by_kind else {"query", "k"}

        def search_records(args: Mapping[str, Any]) -> str:
            unknown = sorted(set(args) - allowed)
            if unknown:
                raise ToolArgumentError(f"unknown arguments {unknown}; search_records takes "
                                        f"{', '.join(sorted(allowed))}")
            query = str(args.get("query") or "").strip()
            if not query:
                raise ToolArgumentError("query is empty")
            try:
                k = max(1, min(top, int(args.get("k") or top)))
            except (TypeError, ValueError):
                raise ToolArgumentError(f"k={args.get('k')!r} is not a whole number") from None
            kinds: tuple[str, ...] | None = None
            if by_kind:
                asked = args.get("kinds") or list(RECORD_CLASSES)
                bad = [x for x in asked if x not in RECORD_CLASSES] if isinstance(asked, list) else [asked]
                if bad:
                    raise ToolArgumentError(f"unknown record kinds {bad} (known: {', '.join(RECORD_CLASSES)})")
                kinds = tuple(dict.fromkeys(asked))
            hits = search(query, kinds, k)
            return canonical_json({"records": [{"kind": h.kind, "entity_id": h.entity_id, "text": h.text}
                                               for h in hits], "count": len(hits)})

        return self._run(question, today, [search_tool(by_kind)], {"search_records": search_records}, records=True)

    # -- the loop -------------------------------------------------------------------------------------

    def _run(self, question: str, today: Day, specs: list[dict[str, Any]], handlers: Mapping[str, Handler],
             *, records: bool) -> AgentAnswer:
        from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

        try:
            template = parse_question(question).template
        except QuestionParseError:
            template = None  # the model still answers; the runner reads its text with the task's answer type
        answer_type = template.answer if template is not None else None
        template_id = template.template_id if template is not None else None
        meter = _Meter(self.settings.model, self.price)
        messages: list[Any] = [SystemMessage(system_prompt(today, answer_type, records)), HumanMessage(question)]
        model = self.chat_model.bind_tools(specs)
        rounds = self.settings.max_tool_rounds
        try:
            for round_no in range(rounds + 1):
                last = round_no == rounds
                if last:  # the bound is reached: no tools on offer, and the model is told to answer now
                    messages.append(HumanMessage(ANSWER_NOW))
                reply = self._invoke(self.chat_model if last else model, messages)
                meter.add(reply)
                messages.append(reply)
                calls = list(getattr(reply, "tool_calls", None) or [])
                if not calls:
                    return self._final(_text_of(reply), answer_type, template_id, meter.usage())
                if last:
                    break
                meter.tool_calls += len(calls)
                for i, call in enumerate(calls):
                    messages.append(ToolMessage(content=self._call_tool(handlers, call),
                                                tool_call_id=call.get("id") or f"call_{round_no}_{i}",
                                                name=call.get("name") or ""))
        except TransportError as e:
            e.usage = meter.usage()  # what was spent before the source failed
            raise
        except RequestRefused as e:  # this task's conversation (e.g. past the context window): the task fails
            return AgentAnswer(None, "", template_id, usage=meter.usage(), parse_error=str(e))
        return AgentAnswer(None, "", template_id, usage=meter.usage(),
                           parse_error=f"no final answer within max_tool_rounds={rounds}: the model still asked "
                                       "for tools")

    def _invoke(self, model: Any, messages: list[Any]) -> Any:
        try:
            return model.invoke(messages)
        except Exception as e:
            if _endpoint_failure(e) and getattr(e, "status_code", None) == 400:
                raise RequestRefused(f"the LLM endpoint refused this task's request (HTTP 400): {e}") from e
            if _endpoint_failure(e):
                raise LlmEndpointError(
                    f"the LLM endpoint failed ({self.settings.describe()}): {type(e).__name__}: {e}. Check "
                    f"{ENV_BASE_URL}, {ENV_MODEL} and the key ({ENV_API_KEY} or {ENV_OPENAI_API_KEY})") from e
            if isinstance(e, (ValueError, KeyError, TypeError)):
                # a 200 reply that is not a chat completion (an HTML page, a `{"error": ...}` body): langchain
                # raises while reading it; the endpoint is misconfigured, the answer is not scored
                raise LlmEndpointError(
                    f"the LLM endpoint ({self.settings.describe()}) did not answer with an OpenAI chat completion: "
                    f"{type(e).__name__}: {e}. Check that {ENV_BASE_URL} is the API's base URL (often ending "
                    "in /v1)") from e
            raise

    @staticmethod
    def _call_tool(handlers: Mapping[str, Handler], call: Mapping[str, Any]) -> str:
        name = call.get("name")
        handler = handlers.get(str(name))
        if handler is None:
            return canonical_json({"error": f"unknown tool {name!r} (tools: {', '.join(handlers)})"})
        args = call.get("args") or {}
        if not isinstance(args, Mapping):
            return canonical_json({"error": "tool arguments must be a JSON object"})
        try:
            return handler(args)
        except ToolArgumentError as e:
            return canonical_json({"error": str(e)})

    @staticmethod
    def _final(reply: str, answer_type: AnswerType | None, template_id: str | None,
               usage: TokenUsage) -> AgentAnswer:
        text = answer_text(reply)
        if answer_type is None:
            return AgentAnswer(None, text, None, usage=usage)
        try:
            value = answer_type.parse(text)
        except AnswerParseError as e:
            return AgentAnswer(None, text, template_id, usage=usage,
                               parse_error=f"the model's answer is not {answer_format(answer_type)}: {e}")
        return AgentAnswer(value, text, template_id, usage=usage)
