"""What a sweep with the LLM agent will cost, before it starts, and the cap that stops it.

`estimate` gives two figures per sweep: an upper bound (every task uses every tool round the settings allow,
each call sends the whole system prompt plus the largest tool result the settings allow and receives
`max_tokens`) and a typical figure (two tool rounds and the answer per task, a tenth of the largest tool
result). Tokens are estimated at 4 characters each (the agent never counts tokens locally: a tokenizer would
download encodings). The cost is the price table's (`arms/agents/prices.yaml`), None for an unpriced model.

`BudgetGuard` keeps what the finished cells spent (their reported usage, never the estimate) and refuses to
start a cell whose typical cost would take the total past the cap; a cell already running finishes (its
answers are scored whole, so the cap can be passed by at most one cell's spend per worker).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from churn_assets.arms.agents.llm_prompts import system_prompt, task_prompt
from churn_assets.arms.agents.llm_usage import price_for

CHARS_PER_TOKEN = 4
TYPICAL_TOOL_ROUNDS = 2
ROW_CHARS = 60  # a tool result row as the agent renders it, about
QUESTION_CHARS = 100  # a task's question, about


@dataclass(frozen=True)
class LlmEstimate:
    cells: int
    tasks: int
    calls_typical: int
    calls_upper: int
    input_tokens_typical: int
    input_tokens_upper: int
    output_tokens_upper: int
    cost_typical_usd: float | None
    cost_upper_usd: float | None

    def describe(self) -> str:
        def usd(v: float | None) -> str:
            return "unpriced model" if v is None else f"${v:,.2f}"

        return (f"LLM estimate for {self.cells} cell(s) x {self.tasks} task(s): about {self.calls_typical:,} model "
                f"calls and {self.input_tokens_typical:,} input tokens ({usd(self.cost_typical_usd)}); at most "
                f"{self.calls_upper:,} calls, {self.input_tokens_upper:,} input and {self.output_tokens_upper:,} "
                f"output tokens ({usd(self.cost_upper_usd)})")

    def per_cell_typical_usd(self) -> float | None:
        return None if self.cost_typical_usd is None or not self.cells else self.cost_typical_usd / self.cells


def estimate(settings: Any, cells: int, tasks_per_cell: int, *, today: dt.date) -> LlmEstimate:
    """The estimate for `cells` cells of `tasks_per_cell` tasks under `settings` (`LlmSettings`)."""
    question = "x" * QUESTION_CHARS
    prompt_tokens = (len(system_prompt(settings.mode, False)) + len(task_prompt(question, today, None))) \
        // CHARS_PER_TOKEN
    largest_result = settings.max_rows_per_call * ROW_CHARS // CHARS_PER_TOKEN
    tasks = cells * tasks_per_cell
    calls_typ, calls_max = tasks * (TYPICAL_TOOL_ROUNDS + 1), tasks * (settings.max_tool_rounds + 1)
    # A call carries the conversation so far: the prompt, then each earlier tool result.
    in_typ = sum(prompt_tokens + r * largest_result // 10 for r in range(TYPICAL_TOOL_ROUNDS + 1)) * tasks
    in_max = sum(prompt_tokens + r * largest_result for r in range(settings.max_tool_rounds + 1)) * tasks
    out_typ, out_max = calls_typ * 100, calls_max * settings.max_tokens
    price = price_for(settings.model)
    return LlmEstimate(cells, tasks_per_cell, calls_typ, calls_max, in_typ, in_max, out_max,
                       None if price is None else price.cost(in_typ, out_typ),
                       None if price is None else price.cost(in_max, out_max))


class BudgetGuard:
    """Spent so far against a cap (None: no cap)."""

    def __init__(self, cap_usd: float | None, per_cell_usd: float | None) -> None:
        self.cap_usd, self.per_cell_usd = cap_usd, per_cell_usd
        self.spent_usd = 0.0
        self.unpriced = False

    def add(self, usage: dict[str, Any] | None) -> None:
        cost = (usage or {}).get("cost_usd")
        if cost is None:
            self.unpriced = self.unpriced or bool(usage)
        else:
            self.spent_usd += float(cost)

    def allows_next(self) -> bool:
        if self.cap_usd is None:
            return True
        return self.spent_usd + (self.per_cell_usd or 0.0) <= self.cap_usd

    def describe(self) -> str:
        cap = "no cap" if self.cap_usd is None else f"cap ${self.cap_usd:,.2f}"
        return f"LLM spend ${self.spent_usd:,.4f} ({cap}{'; some answers unpriced' if self.unpriced else ''})"
