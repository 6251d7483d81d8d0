"""The LLM agent's settings and its agent id: everything about the model that can change an answer
(`LlmSettings`: endpoint or local server, mode, sampling, bounds, prompt version), read from CHURNBENCH_LLM_* or
from a stored scenario, and the per-repeat sampling (`Sampling`, `repeat_seed`).

Its own module because the orchestration, the sweeps and the commands need the settings and the agent id without
the agent's loops (`agents/llm.py`), and because the settings are what the agent id hashes: one place to read
what enters it.

The agent-id is `llm-<hash6>`: the first six hex digits of the SHA-256 of the canonical JSON of the model
settings: endpoint and model, or for the local server the GGUF file's SHA-256, the runtime version, `n_ctx` and
threads (never its URL or port, so a stored scenario runs again after the server restarted elsewhere); the mode,
sampling, bounds, rows shown per read, and the prompt version. The API key never enters the settings, a hash or
a file.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from churn_assets.arms.agents.interface import AgentError
from churn_assets.arms.agents.local_models import resolve_gguf, runtime_version
from churn_assets.arms.extraction import K
from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.freshness.scenario import LLM_AGENT_ID_RE

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
PROMPT_VERSION = "5"
TOOLS, JSON_ACTIONS = "tools", "json"
MODES = (TOOLS, JSON_ACTIONS)
# What the agent reads through on an arm with a semantic model: the registry's measures (and raw views), or raw
# views only (the same model compared without measures, issue 45). Arms without one offer raw views either way.
MEASURES, VIEWS_ONLY = "measures", "views"
INTERFACES = (MEASURES, VIEWS_ONLY)
ENV_INTERFACE = "CHURNBENCH_LLM_INTERFACE"
# The local server's defaults: a read of at most 50 rows is about 1.4k tokens, so the system prompt (about 0.9k),
# four reads with their actions and the answer fit the 8k context (a fifth read would not: measured, docs/llm.md).
LOCAL_DEFAULTS: dict[str, Any] = {"mode": JSON_ACTIONS, "max_tokens": 256, "max_rows_per_call": 50,
                                  "max_tool_rounds": 4}
LOCAL_N_CTX, LOCAL_THREADS = 8192, 1  # one inference thread: faster than two on a shared 2-core machine


class LlmConfigError(AgentError):
    """LLM settings that are missing, malformed, or differ from the ones a scenario was defined with."""


NO_ENDPOINT = (f"set {ENV_BASE_URL} (an OpenAI-compatible endpoint, e.g. http://localhost:8000/v1) and "
               f"{ENV_MODEL} (a model it serves); the API key is read from {ENV_API_KEY} or {ENV_OPENAI_API_KEY}. "
               f"Unset, the local model serves (bash scripts/install.sh --llm smollm2-135m installs one)")


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
    interface: str = MEASURES  # measures (and raw views) on arms with a semantic model, or raw views only
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
        if self.interface not in INTERFACES:
            raise LlmConfigError(f"interface {self.interface!r} is not one of {', '.join(INTERFACES)} "
                                 f"({ENV_INTERFACE})")
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
        if env.get(ENV_INTERFACE, "").strip():
            extra["interface"] = env[ENV_INTERFACE].strip()
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
    version = model_settings.get("prompt_version")
    if version != PROMPT_VERSION:
        raise LlmConfigError(f"agent {agent_id} was defined with prompt version {version}; this code's prompts are "
                             f"version {PROMPT_VERSION} (its prompts changed): define a new scenario")
    settings = LlmSettings.from_json(model_settings)
    if settings.agent_id != agent_id:
        raise LlmConfigError(f"the stored model settings hash to {settings.agent_id}, not {agent_id}")
    return settings
