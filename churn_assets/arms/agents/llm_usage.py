"""What an LLM answer spent: tokens from each response's reported usage (never counted locally: tiktoken would
download encodings), cost from `prices.yaml` (its header states the lookup rule; an unpriced model has cost None,
never a guessed 0), and the wall time of the answer and of its model calls (`Meter` -> `TokenUsage`).

Its own module because the price lookup is also used without an agent (`sweeps/llm_budget.py` plans a budget
from it) and the accounting is independent of which loop spends.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from churn_assets.arms.agents.interface import TokenUsage
from churn_assets.unique_keys import load_yaml

PRICES_FILE = Path(__file__).with_name("prices.yaml")


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


class Meter:
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
