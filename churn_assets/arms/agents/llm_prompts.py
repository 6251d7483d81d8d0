"""The LLM agent's prompts: the fixed system prompt of each mode and tool set (with the glossary of the
benchmark's definitions and the views' documentation), the first user message (today, the question, the
answer's format), the turn that tells the model to answer now, and the reading of a free-text final reply
(`ANSWER:` and `DATA_AS_OF:` lines).

Its own module because the prompts are what `PROMPT_VERSION` (`llm_settings.py`) versions: a change here is a
new agent id; and the budget planner (`sweeps/llm_budget.py`) measures them without running an agent.
"""

from __future__ import annotations

import re
from functools import cache

from churn_assets.arms.agents import json_actions
from churn_assets.arms.agents.llm_settings import JSON_ACTIONS
from churn_assets.arms.agents.llm_tools import VIEW_DOCS
from churn_assets.grounding.rows import VIEWS
from churn_assets.tasks.answers import AnswerType
from churn_assets.world.calendar import Day

ANSWER_NOW = ("You have used every read this task allows. Answer now from what the reads returned, on a last line "
              "'ANSWER: <value>' (and 'DATA_AS_OF: <YYYY-MM-DD>').")
ANSWER_NOW_JSON = 'You have used every read this task allows. Reply now with the answer action.'
# After a measure's value (JSON loop): measured with Qwen2.5-Coder-0.5B on the 47-task set, the model otherwise
# read raw views after a measure that had answered the question, until its budget ran out (decision 318); and, told
# only to "reply with its value", it answered another number in about a third of such answers (the format's
# example, a row count), so the answer action with the value is written out (decision 325).
AFTER_MEASURE = ("If this measure is what the question asks, reply now with this answer: {answer}; otherwise "
                 "call the measure that is. ({left} read(s) left.)")

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


def example_value(answer: AnswerType | None) -> str | None:
    """The example value the answer format shows the model ("12" for an integer, ...), None when it shows none: an
    answer equal to it may have been copied from the prompt (`copied_example`)."""
    if answer is None:
        return None
    found = re.search(r"e\.g\. (.+)$", answer_format(answer))
    return found.group(1) if found else None


def _views_doc() -> str:
    return "\n".join(f"- {v}: {VIEW_DOCS[v].removeprefix(v + ': ')}" for v in VIEWS)


@cache
def system_prompt(mode: str, records: bool, by_kind: bool = True, measures: tuple[str, ...] = ()) -> str:
    """The one system prompt of an arm's agent (fixed per mode and tool set: the day, the question and its answer
    format are the first user message), so an endpoint's prefix cache holds across a run's tasks. `measures`: the
    signatures of the measures an arm with a semantic model offers (`llm_measures.prompt_lines`; () for none)."""
    if mode == JSON_ACTIONS:
        return json_actions.system_prompt(records, by_kind, GLOSSARY, _views_doc(), measures)
    how = ("Use search_records to find the fact records you need; only the records it returns are known to you."
           if records else
           "Use retrieve to read the data, one view per call, with filters where they apply; only the rows it "
           "returns are known to you (a view the arm does not serve says so).")
    if measures and not records:
        how = ("Use measure first: it computes one registered measure of the data as of today (its result states the "
               "as-of day of each part of the data it read). Use retrieve to read raw rows of one view where no "
               "measure fits. Only what they return is known to you.")
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
