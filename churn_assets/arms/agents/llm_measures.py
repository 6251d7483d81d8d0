"""The registry's measures as the LLM agent sees them: the JSON actions and the tool that call one, the lines of
the system prompt that list them, and the handler that runs a call through the arm's semantic model.

The grammar (JSON loop) enumerates every measure and, per measure, its arguments with their types: ids from the
ids the question names (`question_pools`), words from their fixed choices, days as `YYYY-MM-DD`, windows and
thresholds as bounded numbers. The tool loop has no grammar, so the handler checks the same things and tells the
model in one line what is wrong (an unknown measure, a missing or mistyped argument, an id the question does not
name). Each call, good or bad, counts as a read against the task's budget (the loops count it). An id the question
names but the served data do not know is not an error: the measure answers "unknown", the absent-reference result
the deterministic agent gives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from churn_assets.arms.agents.json_actions import DAY_PATTERN, TEXT_CHARS, action
from churn_assets.arms.agents.llm_tools import ToolArgumentError
from churn_assets.fabric.saas_client import SaasRequestError
from churn_assets.grounding.measures import MeasureArgumentError, MeasureResult, SemanticModel
from churn_assets.grounding.registry import Registry
from churn_assets.grounding.rows import MAX_DAYS, StructuredTools
from churn_assets.tasks.templates import ID_PATTERN, PLACEHOLDERS
from churn_assets.world.calendar import Day
from churn_assets.world.events import ID_PREFIXES

MEASURE = "measure"
Pools = Mapping[str, Sequence[str]]  # argument -> the ids (or words) a call may pass (`question_pools`)


def question_pools(question: str) -> dict[str, list[str]]:
    """Argument -> the values this task's measure calls may pass: for an id argument, the ids of its entity type
    the question names (every measure argument is a question placeholder, so a right call only ever passes those;
    a `product` takes `prd_` ids, a `contract` `ctr_` ids: `ID_PREFIXES`); for a word with fixed choices
    (priority, tier), the choices. Read off the question text alone, never the world's state: the grammar tells
    the model nothing the question does not, nor which measure fits it."""
    ids = list(dict.fromkeys(re.findall(rf"\b{ID_PATTERN}\b", question)))
    out: dict[str, list[str]] = {}
    for name, ph in PLACEHOLDERS.items():
        if ph.kind == "id":  # [] when the question names none of its type: no measure taking one can answer it
            out[name] = [i for i in ids if i.startswith(ID_PREFIXES[name] + "_")]
        elif ph.kind == "word" and re.fullmatch(r"[a-z_]+(\|[a-z_]+)*", ph.pattern):
            out[name] = ph.pattern.split("|")
    return out


def arg_schema(name: str, pools: Pools | None) -> dict[str, Any]:
    """The JSON schema of one argument: an enumeration of the values a call may pass (`question_pools`), else a
    bounded value of the placeholder's kind."""
    kind = PLACEHOLDERS[name].kind
    if kind == "int":
        return {"type": "integer", "minimum": 1, "maximum": MAX_DAYS}
    if kind == "dollars":
        return {"type": "number", "minimum": 0, "maximum": 10_000_000}
    if kind == "day":
        return {"type": "string", "pattern": DAY_PATTERN}
    if pools is not None and pools.get(name):
        return {"enum": list(pools[name])}
    return {"type": "string", "maxLength": TEXT_CHARS}


def measure_actions(registry: Registry, pools: Pools | None) -> list[dict[str, Any]]:
    """One JSON action per measure: its name pinned, its arguments required and typed. A measure with an argument
    no value may be passed for (an id, when the question names none) is left out: no call of it could be right."""
    def callable_with(args: Sequence[str]) -> bool:
        return pools is None or all(pools.get(a, [None]) for a in args)

    return [action(MEASURE, {"measure": {"const": m.name}, **{a: arg_schema(a, pools) for a in m.args}},
                   ["measure", *m.args]) for m in registry.measures.values() if callable_with(m.args)]


def signatures(registry: Registry) -> tuple[str, ...]:
    """`name(arg, ...)` of every measure."""
    return tuple(f"{m.name}({', '.join(m.args)})" for m in registry.measures.values())


def prompt_lines(registry: Registry) -> tuple[str, ...]:
    """`name(arg, ...): meaning (unit)` of every measure, for the system prompt: the registry's one-line meaning,
    as a semantic layer describes its metrics to whoever queries it (decision 325, superseding 317)."""
    return tuple(f"{sig}: {m.meaning} ({m.unit})" for sig, m in zip(signatures(registry), registry.measures.values(),
                                                                      strict=True))


def ready_answer(result: MeasureResult) -> str:
    """The answer action that would answer with a measure's value and its oldest as-of day, as the JSON the
    model replies with (offered after the value: decision 325). The value as the result line writes it: a list
    joined by commas, "unknown" for none."""
    value: Any = result.value
    if value is None:
        value = "unknown"
    elif isinstance(value, list):
        value = ", ".join(map(str, value)) or "none"
    elif not isinstance(value, int | float | str):
        value = str(value)
    days = [d for d in result.as_of.values() if d is not None]
    return json.dumps({"action": "answer", "answer": value, "data_as_of": min(days).isoformat() if days else None})


def measure_tool(registry: Registry) -> dict[str, Any]:
    """The tool loop's `measure` tool: the name from the registered ones, arguments by placeholder name."""
    props: dict[str, Any] = {"measure": {"type": "string", "enum": list(registry.measures)}}
    for name, ph in PLACEHOLDERS.items():
        props[name] = {**arg_schema(name, None), "description": f"argument {name} ({ph.kind})"}
    return {"type": "function", "function": {
        "name": MEASURE,
        "description": "Compute one registered measure of the data as of today; give the arguments it takes. "
                       "Measures: " + "; ".join(prompt_lines(registry)) + ".",
        "parameters": {"type": "object", "properties": props, "required": ["measure"]}}}


def check_known_ids(args: Mapping[str, Any], pools: Pools | None) -> None:
    """`ToolArgumentError` for an id the question does not name (or a word not among its choices)."""
    if pools is None:
        return
    for name, value in args.items():
        known = pools.get(name)
        if known is not None and isinstance(value, str) and value not in known:
            names = f"it names {', '.join(known)}" if known else "it names none"
            raise ToolArgumentError(f"{name} {value!r} is not one the question names ({names})")


def measure_handler(model: SemanticModel, today: Day, tools: StructuredTools, pools: Pools | None,
                    results: list[MeasureResult]) -> Callable[[Mapping[str, Any]], str]:
    """The handler of the `measure` action and tool: one line back to the model, each result kept in `results`."""
    def run(args: Mapping[str, Any]) -> str:
        name = args.get("measure")
        call_args = {k: v for k, v in args.items() if k != "measure" and v is not None}
        if not isinstance(name, str):
            raise ToolArgumentError("name the measure to compute (\"measure\": \"<name>\")")
        try:
            call = model.check(name, call_args)
        except MeasureArgumentError as e:
            raise ToolArgumentError(str(e)) from None
        check_known_ids(call.args, pools)
        try:
            result = model.run(call, today, tools)
        except SaasRequestError as e:  # a window the API refuses (days=2024): the model's argument, told to it
            raise ToolArgumentError.refused(e) from None
        results.append(result)
        return result.line()
    return run
