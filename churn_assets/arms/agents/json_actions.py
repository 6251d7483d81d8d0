"""The JSON-action protocol of the LLM agent, for models without native tool calling: every model turn is one JSON
object constrained by a schema (`response_format` json_schema, which llama.cpp's server turns into a grammar the
sampler follows), naming one action:

    {"action": "retrieve", "view": "holdings", "product": "prd_0001"}       # router arms
    {"action": "search_records", "query": "price of prd_0001", "k": 5}      # record arms
    {"action": "measure", "measure": "list_price", "product": "prd_0001"}   # arms with a semantic model
    {"action": "answer", "answer": 12, "data_as_of": "2024-04-26"}          # ends the task

A read action runs exactly the handler the tool-calling loop runs for the same tool (`agents/llm.py`), so it is
traced the same way; its result goes back to the model as the next user message. `answer` accepts a number or a
string, read with the template's answer type as the tool loop's `ANSWER:` line is; `data_as_of` is the as-of day
of the data the answer used (each read result states its `data_as_of`), or null.

This module is the protocol only (schemas, the fixed system prompt, reading a reply); the loop is
`LlmAgent._run_json`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from churn_assets.arms.extraction import RECORD_CLASSES
from churn_assets.grounding.rows import MAX_DAYS, VIEWS

RETRIEVE, SEARCH, ANSWER = "retrieve", "search_records", "answer"
DAY_PATTERN = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
# Bounds on every free value: the grammar then cannot run on inside a string, a number or a list until max_tokens
# (a small model does); a whole action stays well under the local server's 256 tokens.
ID_CHARS, TEXT_CHARS, MAX_ITEMS = 16, 160, 10
ID = {"type": "string", "maxLength": ID_CHARS}


class InvalidReply(ValueError):
    """A model turn that is not one JSON object of the action schema (told to the model, which replies again)."""


def action(name: str, properties: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    # "action" first: llama.cpp's grammar writes properties in their listed order
    return {"type": "object", "properties": {"action": {"const": name}, **properties},
            "required": ["action", *required], "additionalProperties": False}


ANSWER_ACTION = action(ANSWER, {
    "answer": {"anyOf": [{"type": "number"}, {"type": "string", "maxLength": TEXT_CHARS}]},
    "data_as_of": {"anyOf": [{"type": "string", "pattern": DAY_PATTERN}, {"type": "null"}]},
}, ["answer", "data_as_of"])

# The filters each view takes (as `VIEW_DOCS` of agents/llm.py describes them), the required ones first: one
# retrieve action per view, so a read the grammar lets through is a request the router takes, and a small model
# cannot pad it with filters that do not apply (SmolLM2 filled every optional one).
FILTERS: dict[str, dict[str, Any]] = {
    "product": ID, "contract": ID, "vendor": ID,
    "first": {"type": "string", "pattern": DAY_PATTERN}, "last": {"type": "string", "pattern": DAY_PATTERN},
    "window_days": {"type": "integer", "minimum": 1, "maximum": MAX_DAYS},
    "products": {"type": "array", "items": ID, "maxItems": MAX_ITEMS},
}
VIEW_FILTERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # view -> (required, optional)
    "users": ((), ()), "memberships": ((), ()), "cost_centers": ((), ()), "products": ((), ()),
    "licenses": ((), ("product", "contract")), "holdings": ((), ("product",)), "prices": ((), ("product",)),
    "vendors": ((), ("vendor",)), "contracts": ((), ("contract",)), "tickets": ((), ()),
    "consumption": (("first", "last"), ()), "usage": (("window_days",), ("products",)),
}


def retrieve_action(view: str) -> dict[str, Any]:
    required, optional = VIEW_FILTERS[view]
    return action(RETRIEVE, {"view": {"const": view}, **{f: FILTERS[f] for f in required + optional}},
                   ["view", *required])


RETRIEVE_ACTIONS = [retrieve_action(v) for v in VIEWS]


def search_action(by_kind: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {"query": {"type": "string", "maxLength": TEXT_CHARS},
                                  "k": {"type": "integer", "minimum": 1, "maximum": 100}}
    if by_kind:
        properties["kinds"] = {"type": "array", "items": {"type": "string", "enum": list(RECORD_CLASSES)},
                               "maxItems": len(RECORD_CLASSES)}
    return action(SEARCH, properties, ["query"])


def action_schema(records: bool, by_kind: bool = True, *, may_answer: bool = True,
                  measures: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The schema of one turn: the arm's read action, or the answer. The first turn of a task may only read
    (`may_answer` False): every question is about the data, and an answer before any read is not grounded in it
    (tool calling's `tool_choice: required` on the first turn, as a grammar). `measures`: the measure actions of an
    arm with a semantic model (`llm_measures.measure_actions`); then the first turn may only call a measure, and
    later turns measure, read or answer (semantic first: decision 316)."""
    reads = [search_action(by_kind)] if records else RETRIEVE_ACTIONS
    if measures:
        return {"anyOf": [*measures, *reads, ANSWER_ACTION]} if may_answer else {"anyOf": list(measures)}
    return {"anyOf": [*reads, ANSWER_ACTION]} if may_answer else {"anyOf": reads}


def response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI `response_format` asking for JSON of `schema` (llama.cpp honours it with a grammar)."""
    return {"type": "json_schema", "json_schema": {"name": "action", "strict": True, "schema": dict(schema)}}


def system_prompt(records: bool, by_kind: bool, glossary: str, views: str,
                  measures: tuple[str, ...] = ()) -> str:
    """The one system prompt of an arm (fixed: today, the question and its answer format go in the first user
    message, so the server's prefix cache holds across the tasks of a run). `measures`: the lines (name, arguments,
    meaning, unit) of the measures an arm with a semantic model offers (the first reply must call one)."""
    if records:
        kinds_arg, kinds = (', "kinds": [<record kinds>]', " among the record kinds named") if by_kind else ("", "")
        read = (f'{{"action": "search_records", "query": "<what to look for, naming the ids you need>", '
                f'"k": <how many records>{kinds_arg}}}: the fact records most similar to the query{kinds}.')
        known = "records"
    else:
        read = ('{"action": "retrieve", "view": "<view>", <its filters>}: the rows of one view of the data, as '
                f"served to you. Views:\n{views}")
        known = "rows"
    measure = ""
    first = f"Read first (the first reply must be a read): you know only the {known} your reads returned."
    if measures:
        measure = ('Measure: {"action": "measure", "measure": "<name>", <its arguments>}: one value computed from '
                   "the data as of today (the result states the as-of day of each part of the data it read). "
                   "Measures (name(arguments): meaning (unit)):\n" + "\n".join(measures) + "\n")
        first = ("Measure first (the first reply must be a measure; then measure, read or answer): you know only "
                 f"the values and {known} your measures and reads returned.")
    return ("You answer one question about a company's software licenses, users, cost centers, vendors, "
            "contracts, usage and support tickets, from its data only. Every reply is exactly one JSON object: "
            "one action.\n"
            + measure +
            f"Read: {read}\n"
            'Answer: {"action": "answer", "answer": <value>, "data_as_of": "<YYYY-MM-DD>"} ends the task. <value> '
            'in the format the question states, or "unknown" when the data does not know what the question names. '
            "data_as_of: the as-of day of the oldest data you used (each result states its data_as_of), or null.\n"
            f"{first} Then answer. Do not ask questions back.\n\n"
            + glossary)


@dataclass(frozen=True)
class Action:
    """One model turn read: the action's name and its arguments (the answer's: `answer`, `data_as_of`)."""

    name: str
    args: dict[str, Any]


def read_reply(text: str, finish_reason: str | None, allowed: tuple[str, ...], max_tokens: int) -> Action:
    """The action of one reply; `InvalidReply` (a sentence for the model) when it is not one of `allowed`."""
    if finish_reason == "length":
        raise InvalidReply(f"your reply was cut at {max_tokens} tokens before its JSON object closed; reply with a "
                           "shorter JSON object")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidReply(f"your reply is not JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(data, dict):
        raise InvalidReply(f"your reply is a JSON {type(data).__name__}, not one object")
    name = data.get("action")
    if name not in allowed:
        raise InvalidReply(f"action {name!r} is not one of {', '.join(allowed)}")
    args = {k: v for k, v in data.items() if k != "action"}
    if name == ANSWER and "answer" not in args:
        raise InvalidReply('the answer action needs an "answer" field')
    return Action(str(name), args)


def answer_value_text(value: Any) -> str:
    """An answer field as text for the template's answer type: numbers in plain decimal notation (never 1e-05),
    lists joined with commas, null as "unknown"."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        text = format(Decimal(repr(value)), "f")
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, list | tuple):
        return ", ".join(answer_value_text(v) for v in value)
    return str(value)


def stated_day(value: Any) -> dt.date | None:
    """The `data_as_of` an answer stated, as a day; None when absent or not a calendar day (never a failure)."""
    if not isinstance(value, str):
        return None
    try:
        return dt.date.fromisoformat(value.strip()[:10])
    except ValueError:
        return None
