"""The LLM agent: a chat model answers through the arm's own tools, on any OpenAI-compatible endpoint or on the
embedded llama.cpp server (`services/llm.py`) serving a local GGUF file.

    settings = LlmSettings.from_env()        # CHURNBENCH_LLM_BASE_URL (+ _MODEL): that endpoint; unset: the local
                                             # model (CHURNBENCH_LLM_GGUF, else the installed packaged one)
    agent = LlmAgent(settings, base_url=...) # the local server's URL is found at run time (`agent_for_scenario`)
    arm = make_arm("grounding", scenario, sources, agent=agent)
    settings.agent_id                        # "llm-3f9a1c": the agent-id of the scenario key

It offers the two methods the deterministic agent offers, so it runs on every arm unchanged:

- `answer(question, today, tools)` (arms that read rows through the router): the model reads with
  `retrieve(view, filters...)`; each call becomes one `grounding.rows.Request` through the arm's `TracingTools`,
  so every call is traced and restricted to the classes the arm serves exactly as the deterministic agent's are
  (a class the arm does not serve answers "not served", untraced);
- `answer_from_records(question, today, search)` (arms that retrieve fact records): the model reads with
  `search_records(query, k[, kinds])`, one call of the arm's search each (traced by the arm).

Two loops (the settings' `mode`, part of the agent id): `tools`, LangChain tool calling, for providers with
native tool calls; `json`, one schema-constrained JSON object per turn (`agents/json_actions.py`), for models
without them (the local models: llama.cpp does not return their tool calls, but it honours `response_format`).
Both run the same handlers, so a read is traced the same way in either. Each read result states the as-of day of
the data it returned (`data_as_of`), and the answer states the as-of day of the data it used (`ANSWER:` and
`DATA_AS_OF:` lines; the answer action's fields); the stated day is recorded on the answer (None when not stated).

Both loops are bounded by a per-task budget: at most `max_tool_rounds` turns that read and at most
`max_tool_calls` reads in all, whichever is hit first; the turn after the last allowed read is told to answer,
and a model that still asks to read gets no answer and the verdict `budget_exhausted` (its own verdict,
`evaluation/verdicts.py`). An answer that is not a value of the template's answer type is a `parse_error`
(scored `parse_failure`). In the JSON loop a reply that is not one JSON object of the schema is told to the model,
which replies again; `MAX_INVALID_REPLIES` invalid replies in a row stop the run with `LlmReplyError` (an endpoint
that does not honour the schema) unless every one was cut at `max_tokens` (the model ran on: that task's
`parse_failure`). Tokens come from each response's reported usage (never counted locally: tiktoken would download
encodings), cost from `prices.yaml` (its header states the lookup rule; an unpriced model has cost None, never a
guessed 0), and the wall time of the answer and of its model calls are recorded beside them (`TokenUsage`).

The agent-id is `llm-<hash6>`: the first six hex digits of the SHA-256 of the canonical JSON of the model
settings: endpoint and model, or for the local server the GGUF file's SHA-256, the runtime version, `n_ctx` and
threads (never its URL or port, so a stored scenario runs again after the server restarted elsewhere); the mode,
sampling, bounds, rows shown per read, and the prompt version. The API key never enters the settings, a hash or
a file. An endpoint that fails (unreachable, refused key, unknown model, a local server that died) stops the run
with `LlmEndpointError`, never a scored answer: the run resumes from its checkpoint once the endpoint answers.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from churn_assets.arms.agents import json_actions
from churn_assets.arms.agents.interface import (
    AgentAnswer,
    AgentError,
    RecordSearch,
    StructuredTools,
    TokenUsage,
)
from churn_assets.arms.agents.local_models import LocalGguf, find_gguf, resolve_gguf, runtime_version
from churn_assets.arms.extraction import RECORD_CLASSES, K
from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.fabric.saas_client import SaasRequestError, TransportError
from churn_assets.freshness.scenario import LLM_AGENT_ID_RE
from churn_assets.grounding.rows import VIEW_CLASS, VIEWS, Request
from churn_assets.tasks.answers import AnswerParseError, AnswerType
from churn_assets.tasks.parser import QuestionParseError, parse_question
from churn_assets.unique_keys import load_yaml
from churn_assets.world.calendar import Day

ENV_BASE_URL = "CHURNBENCH_LLM_BASE_URL"
ENV_MODEL = "CHURNBENCH_LLM_MODEL"
ENV_API_KEY = "CHURNBENCH_LLM_API_KEY"
ENV_OPENAI_API_KEY = "OPENAI_API_KEY"  # read when CHURNBENCH_LLM_API_KEY is not set
ENV_MODE = "CHURNBENCH_LLM_MODE"
ENV_TEMPERATURE = "CHURNBENCH_LLM_TEMPERATURE"
ENV_MAX_TOKENS = "CHURNBENCH_LLM_MAX_TOKENS"
ENV_MAX_TOOL_ROUNDS = "CHURNBENCH_LLM_MAX_TOOL_ROUNDS"
ENV_MAX_TOOL_CALLS = "CHURNBENCH_LLM_MAX_TOOL_CALLS"
ENV_MAX_ROWS = "CHURNBENCH_LLM_MAX_ROWS"
ENV_SEED = "CHURNBENCH_LLM_SEED"
ENV_N_CTX = "CHURNBENCH_LLM_N_CTX"
ENV_THREADS = "CHURNBENCH_LLM_THREADS"

# Bumped whenever a system prompt, a tool description or the action schema changes: it is part of the settings,
# so the agent-id (and the experiment hash) changes with them.
PROMPT_VERSION = "2"
PRICES_FILE = Path(__file__).with_name("prices.yaml")
ANSWER_NOW = ("You have used every read this task allows. Answer now from what the reads returned, on a last line "
              "'ANSWER: <value>' (and 'DATA_AS_OF: <YYYY-MM-DD>').")
ANSWER_NOW_JSON = 'You have used every read this task allows. Reply now with the answer action.'
NO_KEY = "not-set"  # sent when no key is configured (local endpoints such as vLLM or Ollama need none)
TOOLS, JSON_ACTIONS = "tools", "json"
MODES = (TOOLS, JSON_ACTIONS)
MAX_INVALID_REPLIES = 3  # invalid JSON replies in a row, within one task, before the loop gives up
# The local server's defaults: a read of at most 50 rows is about 1.4k tokens, so the system prompt (about 0.9k),
# four reads with their actions and the answer fit the 8k context (a fifth read would not: measured, docs/llm.md).
LOCAL_DEFAULTS: dict[str, Any] = {"mode": JSON_ACTIONS, "max_tokens": 256, "max_rows_per_call": 50,
                                  "max_tool_rounds": 4}
LOCAL_N_CTX, LOCAL_THREADS = 8192, 1  # one inference thread: faster than two on a shared 2-core machine


class LlmConfigError(AgentError):
    """LLM settings that are missing, malformed, or differ from the ones a scenario was defined with."""


class LlmEndpointError(AgentError):
    """The OpenAI-compatible endpoint did not answer (unreachable, refused key, unknown model, died)."""


class LlmReplyError(AgentError):
    """The endpoint answered, but not with JSON of the action schema, repeatedly: it does not constrain its replies
    (the run stops; nothing is scored for that task, and it resumes there)."""


class RequestRefused(Exception):
    """The endpoint answered 400 to one conversation (too long for the model's context, say): that task gets
    no answer (scored `parse_failure`), the run goes on. Any other endpoint failure stops the run."""


NO_ENDPOINT = (f"set {ENV_BASE_URL} (an OpenAI-compatible endpoint, e.g. http://localhost:8000/v1) and "
               f"{ENV_MODEL} (a model it serves); the API key is read from {ENV_API_KEY} or {ENV_OPENAI_API_KEY}. "
               f"Unset, the local model serves (bash scripts/install.sh --llm smollm2-135m installs one)")


# ---------------------------------------------------------------------------------------------------
# settings and the agent-id
# ---------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------
# sampling per repeat (issue 33): one place, used by `LlmSettings.sampling`
# ---------------------------------------------------------------------------------------------------

# Repeats of a stochastic agent sample: the default temperature (in the agent id, as every setting is).
REPEAT_TEMPERATURE = 0.7


@dataclass(frozen=True)
class Sampling:
    """What one repeat's model requests carry: OpenAI-compatible `temperature` and `seed` (llama.cpp's server
    honours both)."""

    temperature: float
    seed: int


def repeat_seed(experiment_hash: str, repeat: int) -> int:
    """The request seed of repeat `repeat` of an experiment: the first 31 bits of SHA-256 of
    `<experiment hash>/repeat/<repeat>` (a non-negative 32-bit integer, as every server takes). The experiment
    hash covers the agent id, so two agents, or two scenarios, never share a seed sequence."""
    return int(sha256_hex(f"{experiment_hash}/repeat/{repeat}")[:8], 16) & 0x7FFFFFFF


@dataclass(frozen=True)
class LocalServer:
    """The embedded llama.cpp server's share of the settings: what it serves and how, never where."""

    gguf_sha256: str
    runtime: str  # `xllamacpp <version>`
    n_ctx: int = LOCAL_N_CTX
    threads: int = LOCAL_THREADS

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[0-9a-f]{64}", self.gguf_sha256):
            raise LlmConfigError(f"gguf_sha256 {self.gguf_sha256!r} is not a SHA-256 in hex")
        if int(self.n_ctx) < 512:
            raise LlmConfigError(f"n_ctx must be at least 512, got {self.n_ctx}")
        if int(self.threads) < 1:
            raise LlmConfigError(f"threads must be at least 1, got {self.threads}")


@dataclass(frozen=True)
class LlmSettings:
    """Everything about the model that can change an answer; the API key is deliberately not here. `base_url`
    None: the embedded local server, described by `local`.

    `temperature` is the repeats' sampling temperature (default `REPEAT_TEMPERATURE`). `seed`
    (CHURNBENCH_LLM_SEED) is part of the agent id, and so of the experiment hash every repeat's request seed
    derives from (`sampling`): setting it draws another sequence of seeds; in a run, requests never carry it
    as it is."""

    base_url: str | None
    model: str
    mode: str = TOOLS
    temperature: float = REPEAT_TEMPERATURE
    max_tokens: int = 1024  # per model call
    max_tool_rounds: int = 8  # model turns that may read; the next one must answer
    max_tool_calls: int = 30  # reads per task in all (the budget: whichever of the two is hit first)
    max_rows_per_call: int = 500  # rows a `retrieve` shows the model (the rest: "truncated", narrow the filters)
    max_records_per_search: int = K  # k of `search_records` is clamped to this (the extraction rule's K)
    seed: int | None = None  # a salt of the repeat seeds (see the class doc)
    prompt_version: str = PROMPT_VERSION
    local: LocalServer | None = None

    def __post_init__(self) -> None:
        base_url = self.base_url.strip().rstrip("/") if self.base_url is not None else None
        object.__setattr__(self, "base_url", base_url or None)
        object.__setattr__(self, "model", self.model.strip())
        object.__setattr__(self, "temperature", round(float(self.temperature), 3))
        if self.local is None and not (base_url and self.model):
            raise LlmConfigError(f"no LLM endpoint configured: {NO_ENDPOINT}")
        if self.local is not None and base_url:
            raise LlmConfigError("a model is either at an endpoint (base_url) or served locally (local), not both")
        if not self.model:
            raise LlmConfigError("the model has no name")
        if base_url and not re.match(r"https?://", base_url):
            raise LlmConfigError(f"{ENV_BASE_URL}={base_url!r} is not an http(s) URL")
        if self.mode not in MODES:
            raise LlmConfigError(f"mode {self.mode!r} is not one of {', '.join(MODES)} ({ENV_MODE})")
        if not 0.0 <= self.temperature <= 2.0:
            raise LlmConfigError(f"temperature {self.temperature} is outside [0, 2]")
        for name in ("max_tokens", "max_tool_rounds", "max_tool_calls", "max_rows_per_call",
                     "max_records_per_search"):
            if int(getattr(self, name)) < 1:
                raise LlmConfigError(f"{name} must be at least 1, got {getattr(self, name)}")

    def to_json(self) -> dict[str, Any]:
        """The settings as stored in a scenario definition and hashed into the experiment (no key, no URL of the
        local server)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LlmSettings:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise LlmConfigError(f"unknown model settings {unknown} (known: {', '.join(sorted(known))})")
        fields = dict(d)
        if isinstance(fields.get("local"), Mapping):
            local = dict(fields["local"])
            extra = sorted(set(local) - {f.name for f in dataclasses.fields(LocalServer)})
            if extra:
                raise LlmConfigError(f"unknown local model settings {extra}")
            fields["local"] = LocalServer(**local)
        return cls(**fields)

    @property
    def agent_id(self) -> str:
        """`llm-<first 6 hex of the SHA-256 of the canonical JSON of the settings>` (the key is not in them)."""
        return "llm-" + sha256_hex(canonical_json(self.to_json()))[:6]

    @property
    def read_budget(self) -> int:
        """Reads a task may make: one per turn in the JSON loop, so the smaller of the two bounds."""
        return min(self.max_tool_rounds, self.max_tool_calls)

    def describe(self) -> str:
        if self.local is not None:
            return (f"local model {self.model} (GGUF sha256 {self.local.gguf_sha256[:12]}, {self.local.runtime}, "
                    f"n_ctx {self.local.n_ctx}, {self.local.threads} thread(s))")
        return f"model {self.model} at {self.base_url}"

    def sampling(self, experiment_hash: str, repeat: int) -> Sampling:
        """What repeat `repeat` of the experiment `experiment_hash` sends: the settings' temperature and the
        repeat's own seed (`repeat_seed`)."""
        return Sampling(self.temperature, repeat_seed(experiment_hash, repeat))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LlmSettings:
        """Settings from CHURNBENCH_LLM_*: the endpoint of CHURNBENCH_LLM_BASE_URL and _MODEL when set, else the
        local model (CHURNBENCH_LLM_GGUF, else the first installed packaged one: a one-line error naming the
        install command when there is none)."""
        env = os.environ if env is None else env
        base_url, model = env.get(ENV_BASE_URL, "").strip(), env.get(ENV_MODEL, "").strip()
        extra = _numbers_from_env(env, ((ENV_TEMPERATURE, "temperature", float), (ENV_MAX_TOKENS, "max_tokens", int),
                                        (ENV_MAX_TOOL_ROUNDS, "max_tool_rounds", int),
                                        (ENV_MAX_TOOL_CALLS, "max_tool_calls", int),
                                        (ENV_MAX_ROWS, "max_rows_per_call", int), (ENV_SEED, "seed", int)))
        if env.get(ENV_MODE, "").strip():
            extra["mode"] = env[ENV_MODE].strip()
        if base_url:
            if not model:
                raise LlmConfigError(f"no LLM endpoint configured ({ENV_MODEL} not set): {NO_ENDPOINT}")
            return cls(base_url, model, **extra)
        if model:
            raise LlmConfigError(f"{ENV_MODEL}={model!r} names a model of an endpoint, but {ENV_BASE_URL} is not "
                                 "set: set it too, or unset both for the local model")
        found = resolve_gguf(env)
        server = _numbers_from_env(env, ((ENV_N_CTX, "n_ctx", int), (ENV_THREADS, "threads", int)))
        local = LocalServer(found.sha256, runtime_version(), **server)
        return cls(None, found.name, **{**LOCAL_DEFAULTS, **extra}, local=local)


def _numbers_from_env(env: Mapping[str, str], specs: Sequence[tuple[str, str, type]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for var, name, kind in specs:
        raw = env.get(var, "").strip()
        if raw:
            try:
                out[name] = kind(raw)
            except ValueError:
                raise LlmConfigError(f"{var}={raw!r} is not a{'n integer' if kind is int else ' number'}") from None
    return out


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


LocalServe = Callable[[LlmSettings, LocalGguf], str]  # settings, the GGUF file -> the running server's base URL


def agent_for_scenario(agent_id: str, model_settings: Mapping[str, Any] | None,
                       env: Mapping[str, str] | None = None, *, serve_local: LocalServe | None = None,
                       **kwargs: Any) -> LlmAgent:
    """The agent a scenario was defined with. An endpoint's: provided the environment's settings still hash to its
    id. A local model's: the GGUF file with the stored SHA-256 (`CHURNBENCH_LLM_GGUF` or the installed packaged
    model) under the stored runtime version, served by `serve_local` (the orchestration's embedded server)."""
    stored = check_agent_settings(agent_id, model_settings)
    if stored.local is not None:
        if serve_local is None:
            raise LlmConfigError(f"agent {agent_id} runs on the local model server, which this caller cannot start")
        runtime = runtime_version()
        if runtime != stored.local.runtime:
            raise LlmConfigError(f"the scenario's agent {agent_id} was defined with {stored.local.runtime}, this "
                                 f"environment has {runtime}: install that version, or define a new scenario")
        found = find_gguf(stored.local.gguf_sha256, env)
        return LlmAgent(stored, base_url=serve_local(stored, found), **kwargs)
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
    """Token accounting and wall time over one answer's model calls."""

    def __init__(self, model: str, price: Price | None) -> None:
        self.model, self.price = model, price
        self.calls = self.input_tokens = self.output_tokens = self.tool_calls = self.unreported = 0
        self.started = time.perf_counter()
        self.model_seconds = 0.0

    def add(self, reply: Any, seconds: float = 0.0) -> None:
        self.calls += 1
        self.model_seconds += seconds
        usage = getattr(reply, "usage_metadata", None)
        if not usage:
            self.unreported += 1
            return
        self.input_tokens += int(usage.get("input_tokens") or 0)
        self.output_tokens += int(usage.get("output_tokens") or 0)

    def usage(self) -> TokenUsage:
        cost = None if self.price is None else self.price.cost(self.input_tokens, self.output_tokens)
        return TokenUsage(self.model, self.calls, self.input_tokens, self.output_tokens, self.tool_calls, cost,
                          self.unreported, seconds=round(time.perf_counter() - self.started, 3),
                          model_seconds=round(self.model_seconds, 3))


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


def rows_json(request: Request, rows: Sequence[Any] | None, limit: int, data_as_of: Day | None = None) -> str:
    """What the model reads back from one `retrieve`: columns and rows (at most `limit` of them), and the as-of day
    of the data they came from (the read's data time, from its trace: the refresh day of a staged copy, T live)."""
    if rows is None:
        return canonical_json({"view": request.view, "served": False,
                               "error": f"this arm does not serve {request.entity_class} (view {request.view})"})
    shown = list(rows[:limit])
    columns = [f.name for f in dataclasses.fields(shown[0])] if shown else []
    out: dict[str, Any] = {"view": request.view, "entity_class": VIEW_CLASS[request.view], "columns": columns,
                           "rows": [[_plain(getattr(r, c)) for c in columns] for r in shown],
                           "total_rows": len(rows)}
    if data_as_of is not None:
        out["data_as_of"] = data_as_of.isoformat()
    if len(rows) > limit:
        out["truncated"] = f"only the first {limit} of {len(rows)} rows are shown: narrow the request with filters"
    return canonical_json(out)


def _read_day(tools: StructuredTools, before: int, entity_class: str) -> Day | None:
    """The data time of `entity_class` in the traces the tools recorded since `before` (None: not traced)."""
    traces = getattr(tools, "traces", None)
    if not isinstance(traces, list):
        return None
    days = {entry.data_times[entity_class] for entry in traces[before:]
            if entity_class in getattr(entry, "data_times", {})}
    return min(days) if days else None


# ---------------------------------------------------------------------------------------------------
# the prompts
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


def _views_doc() -> str:
    return "\n".join(f"- {v}: {VIEW_DOCS[v].removeprefix(v + ': ')}" for v in VIEWS)


@cache
def system_prompt(mode: str, records: bool, by_kind: bool = True) -> str:
    """The one system prompt of an arm's agent (fixed per mode and tool set: the day, the question and its answer
    format are the first user message), so an endpoint's prefix cache holds across a run's tasks."""
    if mode == JSON_ACTIONS:
        return json_actions.system_prompt(records, by_kind, GLOSSARY, _views_doc())
    how = ("Use search_records to find the fact records you need; only the records it returns are known to you."
           if records else
           "Use retrieve to read the data, one view per call, with filters where they apply; only the rows it "
           "returns are known to you (a view the arm does not serve says so).")
    return (f"You answer one question about a company's software licenses, users, cost centers, vendors, "
            f"contracts, usage and support tickets. {how} Each result states the as-of day of its data "
            f"(data_as_of).\n\n{GLOSSARY}\n\n"
            "When you know the answer, end your reply with one line `ANSWER: <value>`, <value> in the format the "
            "question states (`ANSWER: unknown` when the data does not know what the question names), then one line "
            "`DATA_AS_OF: <YYYY-MM-DD>`, the as-of day of the oldest data you used. Do not ask questions back.")


def task_prompt(question: str, today: Day, answer: AnswerType | None) -> str:
    """The first user message: today, the question, and the format of its answer."""
    return f"Today is {today.isoformat()}.\nQuestion: {question}\nAnswer format: {answer_format(answer)}."



_ANSWER_RE = re.compile(r"ANSWER\s*:\s*(.*)", re.IGNORECASE)
_AS_OF_RE = re.compile(r"DATA_AS_OF\s*:\s*(.*)", re.IGNORECASE)


def answer_text(reply: str) -> str:
    """The value part of a final reply: after the last `ANSWER:` (its line), else the whole text without its
    `DATA_AS_OF:` line."""
    found = _ANSWER_RE.findall(_AS_OF_RE.sub("", reply))
    text = found[-1] if found else _AS_OF_RE.sub("", reply)
    return text.strip().rstrip(".").strip(" \t`*")  # markdown emphasis and a final period dropped


def stated_as_of(reply: str) -> Day | None:
    """The day of a final reply's last `DATA_AS_OF:` line (None: none, or not a calendar day)."""
    found = _AS_OF_RE.findall(reply)
    return json_actions.stated_day(found[-1].strip(" \t`*")) if found else None


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


@dataclass(frozen=True)
class _Task:
    """One question as the loops see it: its template's answer type, and what it has spent so far."""

    template_id: str | None
    answer_type: AnswerType | None
    meter: _Meter


class LlmAgent:
    """A chat model answering through an arm's tools. `chat_model`: any LangChain chat model with `bind_tools`
    and `bind` (tests inject a scripted one); default `ChatOpenAI` on `base_url` (an endpoint's: the settings';
    the local server's: given, found at run time). `sampling`: the repeat's temperature and seed
    (`LlmSettings.sampling`: what a run passes); None, outside a run, sends the settings' own temperature and
    seed."""

    def __init__(self, settings: LlmSettings, *, base_url: str | None = None, chat_model: Any = None,
                 api_key: str | None = None, prices: Mapping[str, Price] | None = None,
                 sampling: Sampling | None = None) -> None:
        self.settings = settings
        self.sampling = sampling
        self.agent_id = settings.agent_id
        self.base_url = base_url or settings.base_url
        if self.base_url is None and chat_model is None:
            raise LlmConfigError(f"{settings.describe()}: no server URL to reach it")
        self._chat_model = chat_model
        self._api_key = api_key
        self.price = price_for(settings.model, prices)

    @property
    def chat_model(self) -> Any:
        if self._chat_model is None:
            from langchain_openai import ChatOpenAI
            from pydantic import SecretStr

            s = self.settings
            local = s.local is not None
            temperature, seed = ((self.sampling.temperature, self.sampling.seed) if self.sampling is not None
                                 else (s.temperature, s.seed))
            # `max_completion_tokens` is the name of ChatOpenAI's `max_tokens` field in its signature (its alias).
            # A local model on a loaded 2-core machine can take minutes for a long read: a longer timeout, and
            # no retry of a request it was already working on.
            self._chat_model = ChatOpenAI(base_url=self.base_url, model=s.model,
                                          api_key=SecretStr(self._api_key or NO_KEY), temperature=temperature,
                                          max_completion_tokens=s.max_tokens, seed=seed,
                                          max_retries=0 if local else 2, timeout=900 if local else 120)
        return self._chat_model

    # -- the two methods every arm calls ------------------------------------------------------------

    def answer(self, question: str, today: Day, tools: StructuredTools) -> AgentAnswer:
        limit = self.settings.max_rows_per_call

        def retrieve(args: Mapping[str, Any]) -> str:
            request = request_of(args)
            traces = getattr(tools, "traces", None)
            before = len(traces) if isinstance(traces, list) else 0
            try:
                [rows] = tools.retrieve([request], note=f"llm: {request.describe()}")
            except SaasRequestError as e:  # a 4xx for the model's own arguments (window_days=2024): told to it
                raise ToolArgumentError(f"the source refused this request: {e}") from None
            return rows_json(request, rows, limit, _read_day(tools, before, request.entity_class))

        return self._run(question, today, {"retrieve": retrieve}, records=False, by_kind=True)

    def answer_from_records(self, question: str, today: Day, search: RecordSearch, *,
                            by_kind: bool = True) -> AgentAnswer:
        """`by_kind`: the model may restrict the record kinds searched (default every kind); False: one store
        of everything, searched whole (the classic-RAG arm)."""
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
            return canonical_json({"records": [_record_json(h) for h in hits], "count": len(hits)})

        return self._run(question, today, {"search_records": search_records}, records=True, by_kind=by_kind)

    # -- the loops ------------------------------------------------------------------------------------

    def _run(self, question: str, today: Day, handlers: Mapping[str, Handler], *, records: bool,
             by_kind: bool) -> AgentAnswer:
        from langchain_core.messages import HumanMessage, SystemMessage

        try:
            template = parse_question(question).template
        except QuestionParseError:
            template = None  # the model still answers; the runner reads its text with the task's answer type
        task = _Task(template.template_id if template is not None else None,
                     template.answer if template is not None else None, _Meter(self.settings.model, self.price))
        messages: list[Any] = [SystemMessage(system_prompt(self.settings.mode, records, by_kind)),
                               HumanMessage(task_prompt(question, today, task.answer_type))]
        try:
            if self.settings.mode == JSON_ACTIONS:
                return self._run_json(task, messages, handlers, records=records, by_kind=by_kind)
            specs = [search_tool(by_kind)] if records else [RETRIEVE_TOOL]
            return self._run_tools(task, messages, specs, handlers)
        except TransportError as e:
            e.usage = task.meter.usage()  # what was spent before the source failed
            raise
        except RequestRefused as e:  # this task's conversation (e.g. past the context window): the task fails
            return AgentAnswer(None, "", task.template_id, usage=task.meter.usage(), parse_error=str(e))

    def _run_tools(self, task: _Task, messages: list[Any], specs: list[dict[str, Any]],
                   handlers: Mapping[str, Handler]) -> AgentAnswer:
        """LangChain tool calling: up to `max_tool_rounds` turns that call tools and `max_tool_calls` calls."""
        from langchain_core.messages import HumanMessage, ToolMessage

        s, meter = self.settings, task.meter
        model = self.chat_model.bind_tools(specs)
        for round_no in range(s.max_tool_rounds + 1):
            # the bound is reached: no tools on offer, and the model is told to answer now
            last = round_no == s.max_tool_rounds or meter.tool_calls >= s.max_tool_calls
            if last:
                messages.append(HumanMessage(ANSWER_NOW))
            reply = self._invoke(self.chat_model if last else model, messages, meter)
            messages.append(reply)
            calls = list(getattr(reply, "tool_calls", None) or [])
            if not calls:
                text = _text_of(reply)
                return self._final(answer_text(text), stated_as_of(text), task)
            if last or meter.tool_calls + len(calls) > s.max_tool_calls:
                return self._exhausted(task, f"the model asked for {len(calls)} more tool call(s) after "
                                             f"{meter.tool_calls} of its budget (max_tool_rounds={s.max_tool_rounds}, "
                                             f"max_tool_calls={s.max_tool_calls})")
            meter.tool_calls += len(calls)
            for i, call in enumerate(calls):
                messages.append(ToolMessage(content=self._call_tool(handlers, call),
                                            tool_call_id=call.get("id") or f"call_{round_no}_{i}",
                                            name=call.get("name") or ""))
        raise AssertionError("unreachable: the last round returns")

    def _run_json(self, task: _Task, messages: list[Any], handlers: Mapping[str, Handler], *, records: bool,
                  by_kind: bool) -> AgentAnswer:
        """One schema-constrained JSON action per turn: up to `read_budget` reads, then the answer."""
        from langchain_core.messages import AIMessage, HumanMessage

        s, meter = self.settings, task.meter
        read_action = json_actions.SEARCH if records else json_actions.RETRIEVE
        # In the request body as it is (`extra_body`): given as `response_format`, langchain-openai would parse the
        # reply with the client's structured-output path, which raises on a reply cut at max_tokens.
        first, then = (self.chat_model.bind(extra_body={"response_format": json_actions.response_format(
            json_actions.action_schema(records, by_kind, may_answer=may_answer))}) for may_answer in (False, True))
        invalid: list[str] = []  # this run of invalid replies: why each was invalid
        truncated = 0
        while True:
            reply = self._invoke(then if meter.tool_calls else first, messages, meter)
            text = _text_of(reply)
            finish = (getattr(reply, "response_metadata", None) or {}).get("finish_reason")
            messages.append(AIMessage(content=text))
            try:
                allowed = (read_action, json_actions.ANSWER) if meter.tool_calls else (read_action,)
                action = json_actions.read_reply(text, finish, allowed, s.max_tokens)
            except json_actions.InvalidReply as e:
                invalid.append(str(e))
                truncated += finish == "length"
                if len(invalid) >= MAX_INVALID_REPLIES:
                    return self._invalid_replies(task, invalid, truncated, text)
                messages.append(HumanMessage(f"That reply is not valid: {e}. Reply with one JSON object: one "
                                             "action."))
                continue
            invalid, truncated = [], 0
            if action.name == json_actions.ANSWER:
                return self._final(json_actions.answer_value_text(action.args.get("answer")),
                                   json_actions.stated_day(action.args.get("data_as_of")), task)
            if meter.tool_calls >= s.read_budget:
                return self._exhausted(task, f"the model asked for another {read_action} after {meter.tool_calls} "
                                             f"reads (max_tool_rounds={s.max_tool_rounds}, "
                                             f"max_tool_calls={s.max_tool_calls})")
            meter.tool_calls += 1
            result = self._call_tool(handlers, {"name": read_action, "args": action.args})
            left = s.read_budget - meter.tool_calls
            note = ANSWER_NOW_JSON if left == 0 else f"({left} read(s) left.)"
            messages.append(HumanMessage(f"Result of {read_action}:\n{result}\n{note}"))

    def _invalid_replies(self, task: _Task, reasons: list[str], truncated: int, last: str) -> AgentAnswer:
        """`MAX_INVALID_REPLIES` invalid replies in a row: a model that ran on past `max_tokens` every time fails
        this task (`parse_failure`); otherwise the endpoint does not constrain its replies, and the run stops."""
        excerpt = " ".join(last.split())[:120]
        if truncated == len(reasons):
            return AgentAnswer(None, "", task.template_id, usage=task.meter.usage(),
                               parse_error=f"the model's reply was cut at max_tokens={self.settings.max_tokens} "
                                           f"{len(reasons)} times in a row (last: {excerpt!r})")
        raise LlmReplyError(f"{self.settings.describe()} returned {len(reasons)} invalid JSON replies in a row "
                            f"({reasons[-1]}; last reply {excerpt!r}): the endpoint does not constrain its replies "
                            "to the action schema (response_format json_schema); use a server that does, or "
                            f"{ENV_MODE}=tools for a model with native tool calling")

    def _invoke(self, model: Any, messages: list[Any], meter: _Meter) -> Any:
        started = time.perf_counter()
        try:
            reply = model.invoke(messages)
        except Exception as e:
            meter.add(None, time.perf_counter() - started)  # a failed call counts as a call, with no tokens
            if _endpoint_failure(e) and getattr(e, "status_code", None) == 400:
                raise RequestRefused(f"the LLM endpoint refused this task's request (HTTP 400): {e}") from e
            if _endpoint_failure(e):
                raise LlmEndpointError(f"the LLM endpoint failed ({self.settings.describe()}): "
                                       f"{type(e).__name__}: {e}. {self._check_hint()}") from e
            if isinstance(e, (ValueError, KeyError, TypeError)):
                # a 200 reply that is not a chat completion (an HTML page, a `{"error": ...}` body): langchain
                # raises while reading it; the endpoint is misconfigured, the answer is not scored
                raise LlmEndpointError(
                    f"the LLM endpoint ({self.settings.describe()}) did not answer with an OpenAI chat completion: "
                    f"{type(e).__name__}: {e}. Check that {ENV_BASE_URL} is the API's base URL (often ending "
                    "in /v1)") from e
            raise
        meter.add(reply, time.perf_counter() - started)
        return reply

    def _check_hint(self) -> str:
        if self.settings.local is not None:
            return (f"The local model server at {self.base_url} stopped answering (`churnbench services status`); "
                    "the run resumes from its checkpoint when run again")
        return f"Check {ENV_BASE_URL}, {ENV_MODEL} and the key ({ENV_API_KEY} or {ENV_OPENAI_API_KEY})"

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
    def _exhausted(task: _Task, why: str) -> AgentAnswer:
        return AgentAnswer(None, "", task.template_id, usage=task.meter.usage(), budget_error=why)

    @staticmethod
    def _final(text: str, as_of: Day | None, task: _Task) -> AgentAnswer:
        usage, answer_type = task.meter.usage(), task.answer_type
        if answer_type is None:
            return AgentAnswer(None, text, None, usage=usage, data_as_of=as_of)
        try:
            value = answer_type.parse(text)
        except AnswerParseError as e:
            return AgentAnswer(None, text, task.template_id, usage=usage, data_as_of=as_of,
                               parse_error=f"the model's answer is not {answer_format(answer_type)}: {e}")
        return AgentAnswer(value, text, task.template_id, usage=usage, data_as_of=as_of)


def _record_json(hit: Any) -> dict[str, Any]:
    """One search hit as the model reads it; with the as-of day of the corpus it came from when the hit has one."""
    out: dict[str, Any] = {"kind": hit.kind, "entity_id": hit.entity_id, "text": hit.text}
    day = getattr(hit, "day", None)
    if isinstance(day, dt.date):
        out["data_as_of"] = day.isoformat()
    return out
