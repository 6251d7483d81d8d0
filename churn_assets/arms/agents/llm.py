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

The settings and the agent id (`llm-<hash6>`) are in `agents/llm_settings.py`, the tools the model sees and the
JSON of what it reads back in `agents/llm_tools.py`, the prompts in `agents/llm_prompts.py`, the token, cost and
time accounting in `agents/llm_usage.py`; this module holds the agent and its two loops. An endpoint that fails
(unreachable, refused key, unknown model, a local server that died) stops the run with `LlmEndpointError`, never
a scored answer: the run resumes from its checkpoint once the endpoint answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from churn_assets.arms.agents import json_actions
from churn_assets.arms.agents.grounded import copied_example, grounded
from churn_assets.arms.agents.interface import AgentAnswer, AgentError, RecordSearch
from churn_assets.arms.agents.llm_measures import (
    MEASURE,
    measure_actions,
    measure_handler,
    measure_tool,
    prompt_lines,
    question_pools,
    ready_answer,
)
from churn_assets.arms.agents.llm_prompts import (
    AFTER_MEASURE,
    ANSWER_NOW,
    ANSWER_NOW_JSON,
    answer_format,
    answer_text,
    example_value,
    stated_as_of,
    system_prompt,
    task_prompt,
)
from churn_assets.arms.agents.llm_settings import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODE,
    ENV_MODEL,
    ENV_OPENAI_API_KEY,
    JSON_ACTIONS,
    MEASURES,
    LlmConfigError,
    LlmSettings,
    Sampling,
    api_key_from_env,
    check_agent_settings,
)
from churn_assets.arms.agents.llm_tools import (
    RETRIEVE_TOOL,
    ToolArgumentError,
    read_day,
    record_json,
    request_of,
    rows_json,
    search_tool,
)
from churn_assets.arms.agents.llm_transcript import call_turn, finish_of, reply_turn, text_of
from churn_assets.arms.agents.llm_usage import Meter, Price, price_for
from churn_assets.arms.agents.local_models import LocalGguf, find_gguf, runtime_version
from churn_assets.arms.extraction import RECORD_CLASSES
from churn_assets.canonical import canonical_json
from churn_assets.fabric.saas_client import SaasRequestError, TransportError
from churn_assets.grounding.measures import MeasureResult, SemanticModel
from churn_assets.grounding.rows import Request, Row, StructuredTools
from churn_assets.tasks.answers import AnswerParseError, AnswerType
from churn_assets.tasks.parser import QuestionParseError, parse_question
from churn_assets.world.calendar import Day

NO_KEY = "not-set"  # sent when no key is configured (local endpoints such as vLLM or Ollama need none)
MAX_INVALID_REPLIES = 3  # invalid JSON replies in a row, within one task, before the loop gives up


class LlmEndpointError(AgentError):
    """The OpenAI-compatible endpoint did not answer (unreachable, refused key, unknown model, died)."""


class LlmReplyError(AgentError):
    """The endpoint answered, but not with JSON of the action schema, repeatedly: it does not constrain its replies
    (the run stops; nothing is scored for that task, and it resumes there)."""


class RequestRefused(Exception):
    """The endpoint answered 400 to one conversation (too long for the model's context, say): that task gets
    no answer (scored `parse_failure`), the run goes on. Any other endpoint failure stops the run."""


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
    """One question as the loops see it: its template's answer type, what it has spent so far, and the arm's
    semantic model when the agent may call measures (None: raw views or records only)."""

    template_id: str | None
    answer_type: AnswerType | None
    meter: Meter
    question: str = ""
    semantic: SemanticModel | None = None
    measured: list[MeasureResult] = field(default_factory=list)  # each measure call's result, in call order
    transcript: list[dict[str, Any]] = field(default_factory=list)  # `llm_transcript`: replies and calls, in order


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
        """On an arm with a semantic model (`tools.semantic_model`) and the `measures` interface, the model calls
        measures first, then measures or raw views; otherwise raw views only. The answer is judged `grounded` in
        what the model's calls returned (`agents/grounded.py`)."""
        limit = self.settings.max_rows_per_call
        shown: list[tuple[Request, list[Row] | None]] = []  # each read's rows as shown to the model
        results: list[MeasureResult] = []  # each measure call's result

        def retrieve(args: Mapping[str, Any]) -> str:
            request = request_of(args)
            traces = getattr(tools, "traces", None)
            before = len(traces) if isinstance(traces, list) else 0
            try:
                [rows] = tools.retrieve([request], note=f"llm: {request.describe()}")
            except SaasRequestError as e:  # a 4xx for the model's own arguments (window_days=2024): told to it
                raise ToolArgumentError.refused(e) from None
            shown.append((request, None if rows is None else list(rows[:limit])))
            return rows_json(request, rows, limit, read_day(tools, before, request.entity_class))

        handlers: dict[str, Handler] = {"retrieve": retrieve}
        semantic = getattr(tools, "semantic_model", None) if self.settings.interface == MEASURES else None
        calls = [0]
        if semantic is not None:
            run_measure = measure_handler(semantic, today, tools, question_pools(question), results)

            def measure(args: Mapping[str, Any]) -> str:
                calls[0] += 1  # every call, good or bad (a bad one is told to the model and counts as a read)
                return run_measure(args)

            handlers[MEASURE] = measure
        answer = self._run(question, today, handlers, records=False, by_kind=True, semantic=semantic,
                           measured=results)
        judged = self._judged(answer, question)
        template = self._template(question)
        if judged is not answer and template is not None:
            judged = replace(judged, grounded=grounded(answer.value, template.answer, question, today, results, shown,
                                                       semantic))
        return replace(judged, measure_calls=calls[0],
                       measures_called=tuple((r.call.describe(), r.value) for r in results))

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
            return canonical_json({"records": [record_json(h) for h in hits], "count": len(hits)})

        return self._judged(self._run(question, today, {"search_records": search_records}, records=True,
                                      by_kind=by_kind), question)

    def _judged(self, answer: AgentAnswer, question: str) -> AgentAnswer:
        """`answer` with `copied_example` set, when it is an answer (not a parse failure or an exhausted budget)
        of a known template; `answer` itself otherwise."""
        template = self._template(question)
        if template is None or answer.parse_error or answer.budget_error or not answer.text:
            return answer
        return replace(answer, copied_example=copied_example(answer.value, template.answer,
                                                             example_value(template.answer)))

    # -- the loops ------------------------------------------------------------------------------------

    @staticmethod
    def _template(question: str) -> Any:
        try:
            return parse_question(question).template
        except QuestionParseError:
            return None  # the model still answers; the runner reads its text with the task's answer type

    def _run(self, question: str, today: Day, handlers: Mapping[str, Handler], *, records: bool,
             by_kind: bool, semantic: SemanticModel | None = None,
             measured: list[MeasureResult] | None = None) -> AgentAnswer:
        from langchain_core.messages import HumanMessage, SystemMessage

        template = self._template(question)
        task = _Task(template.template_id if template is not None else None,
                     template.answer if template is not None else None, Meter(self.settings.model, self.price),
                     question, semantic, measured if measured is not None else [])
        measures = prompt_lines(semantic.registry) if semantic is not None else ()
        messages: list[Any] = [SystemMessage(system_prompt(self.settings.mode, records, by_kind, measures)),
                               HumanMessage(task_prompt(question, today, task.answer_type))]
        try:
            if self.settings.mode == JSON_ACTIONS:
                answer = self._run_json(task, messages, handlers, records=records, by_kind=by_kind)
            else:
                specs = [search_tool(by_kind)] if records else [RETRIEVE_TOOL]
                if semantic is not None:
                    specs = [measure_tool(semantic.registry), *specs]
                answer = self._run_tools(task, messages, specs, handlers)
        except TransportError as e:
            e.usage = task.meter.usage()  # what was spent before the source failed
            raise
        except RequestRefused as e:  # this task's conversation (e.g. past the context window): the task fails
            answer = AgentAnswer(None, "", task.template_id, usage=task.meter.usage(), parse_error=str(e))
        return replace(answer, transcript=tuple(task.transcript))

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
            task.transcript.append(reply_turn(text_of(reply), finish_of(reply), calls))
            if not calls:
                text = text_of(reply)
                return self._final(answer_text(text), stated_as_of(text), task)
            if last or meter.tool_calls + len(calls) > s.max_tool_calls:
                return self._exhausted(task, f"the model asked for {len(calls)} more tool call(s) after "
                                             f"{meter.tool_calls} of its budget (max_tool_rounds={s.max_tool_rounds}, "
                                             f"max_tool_calls={s.max_tool_calls})")
            meter.tool_calls += len(calls)
            for i, call in enumerate(calls):
                messages.append(ToolMessage(content=self._call_tool(handlers, call, task),
                                            tool_call_id=call.get("id") or f"call_{round_no}_{i}",
                                            name=call.get("name") or ""))
        raise AssertionError("unreachable: the last round returns")

    def _run_json(self, task: _Task, messages: list[Any], handlers: Mapping[str, Handler], *, records: bool,
                  by_kind: bool) -> AgentAnswer:
        """One schema-constrained JSON action per turn: up to `read_budget` reads, then the answer."""
        from langchain_core.messages import AIMessage, HumanMessage

        s, meter = self.settings, task.meter
        read_action = json_actions.SEARCH if records else json_actions.RETRIEVE
        measures = (measure_actions(task.semantic.registry, question_pools(task.question))
                    if task.semantic is not None else [])
        # the first turn's actions, then every later turn's (semantic first: measures only, then all)
        opening = (MEASURE,) if measures else (read_action,)
        later = (MEASURE, read_action, json_actions.ANSWER) if measures else (read_action, json_actions.ANSWER)
        # In the request body as it is (`extra_body`): given as `response_format`, langchain-openai would parse the
        # reply with the client's structured-output path, which raises on a reply cut at max_tokens.
        first, then = (self.chat_model.bind(extra_body={"response_format": json_actions.response_format(
            json_actions.action_schema(records, by_kind, may_answer=may_answer, measures=measures))})
            for may_answer in (False, True))
        invalid: list[str] = []  # this run of invalid replies: why each was invalid
        truncated = 0
        while True:
            reply = self._invoke(then if meter.tool_calls else first, messages, meter)
            text, finish = text_of(reply), finish_of(reply)
            task.transcript.append(reply_turn(text, finish))
            messages.append(AIMessage(content=text))
            try:
                action = json_actions.read_reply(text, finish, later if meter.tool_calls else opening, s.max_tokens)
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
                return self._exhausted(task, f"the model asked for another {action.name} after {meter.tool_calls} "
                                             f"reads (max_tool_rounds={s.max_tool_rounds}, "
                                             f"max_tool_calls={s.max_tool_calls})")
            meter.tool_calls += 1
            before = len(task.measured)
            result = self._call_tool(handlers, {"name": action.name, "args": action.args}, task)
            left = s.read_budget - meter.tool_calls
            ran = task.measured[before:]  # the value of a measure call that ran (a bad call's error adds none)
            note = (ANSWER_NOW_JSON if left == 0 else
                    AFTER_MEASURE.format(answer=ready_answer(ran[-1]), left=left) if ran else f"({left} read(s) left.)")
            messages.append(HumanMessage(f"Result of {action.name}:\n{result}\n{note}"))

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

    def _invoke(self, model: Any, messages: list[Any], meter: Meter) -> Any:
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
    def _call_tool(handlers: Mapping[str, Handler], call: Mapping[str, Any], task: _Task) -> str:
        """The handler's result for the model (an error it can act on, for a bad call), recorded in the transcript."""
        name = call.get("name")
        handler = handlers.get(str(name))
        args = call.get("args") or {}
        if handler is None:
            result = canonical_json({"error": f"unknown tool {name!r} (tools: {', '.join(handlers)})"})
        elif not isinstance(args, Mapping):
            result = canonical_json({"error": "tool arguments must be a JSON object"})
        else:
            try:
                result = handler(args)
            except ToolArgumentError as e:
                result = canonical_json({"error": str(e)})
        task.transcript.append(call_turn(str(name), args, result))
        return result

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
