"""Calling a measure: arguments checked and typed from the registry's declaration, the implementation run
over the arm's tools, the result with what it read (the as-of day of each class, rows counted).

Bad input (an unknown measure, a missing or extra argument, a value of the wrong type) raises
`MeasureArgumentError` with one line naming the measure and the argument; nothing is read for it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from churn_assets.grounding.measures.context import IMPLEMENTATIONS, Served, Unknown
from churn_assets.grounding.registry import MeasureDecl, Registry, load_registry
from churn_assets.grounding.rows import MAX_DAYS, StructuredTools
from churn_assets.tasks.answers import Value
from churn_assets.tasks.templates import PLACEHOLDERS
from churn_assets.world.calendar import Day


class MeasureArgumentError(ValueError):
    """A measure call that cannot run as asked (unknown name, missing, extra or mistyped argument)."""


@dataclass(frozen=True)
class MeasureCall:
    name: str
    args: dict[str, Any]

    def describe(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.args.items())})"


@dataclass(frozen=True)
class MeasureResult:
    call: MeasureCall
    value: Value  # None: unknown (a class it needs was not served, or the served data do not know the entity)
    unit: str
    as_of: dict[str, Day | None]  # class -> the data day it was served from (None: not traced), oldest first
    rows: int  # rows the router returned to the call

    def line(self) -> str:
        """One short line for a model: value, unit, as-of day of each class read (oldest first), rows counted."""
        value = "unknown" if self.value is None else (
            ", ".join(map(str, self.value)) or "none" if isinstance(self.value, list) else str(self.value))
        days = ", ".join(f"{c} {d.isoformat() if d else '?'}" for c, d in self.as_of.items())
        return f"{self.call.name} = {value} ({self.unit}); as of: {days}; {self.rows} rows"


def _typed(decl: MeasureDecl, name: str, value: Any) -> Any:
    kind = PLACEHOLDERS[name].kind
    bad = MeasureArgumentError(f"measure {decl.name}: argument {name} must be {_KIND_WORDS[kind]} (got {value!r})")
    if kind == "int":  # 1..MAX_DAYS (a window or horizon in days), as an int or its ASCII digits
        if isinstance(value, bool) or not isinstance(value, int | str) or \
                not re.fullmatch(r"[0-9]{1,4}", str(value).strip()) or not 1 <= int(value) <= MAX_DAYS:
            raise bad
        return int(value)
    if kind == "dollars":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
        return value
    if kind == "day":
        try:
            return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))
        except ValueError:
            raise bad from None
    # an id or a word as the question writes it (a model may pass anything: a URL as a product id would reach the
    # SaaS API's path and come back a 404 no one can read)
    if not isinstance(value, str) or not re.fullmatch(PLACEHOLDERS[name].pattern, value):
        raise bad
    return value


_KIND_WORDS = {"int": f"a whole number of days 1..{MAX_DAYS}", "dollars": "a number of dollars",
               "day": "a day YYYY-MM-DD", "id": "an id such as prd_0001", "word": "a word as the question writes it"}


class SemanticModel:
    """The registry's measures bound to their implementations."""

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry or load_registry()

    def declaration(self, name: str) -> MeasureDecl:
        decl = self.registry.measures.get(name)
        if decl is None or name not in IMPLEMENTATIONS:
            raise MeasureArgumentError(f"unknown measure {name!r}")
        return decl

    def check(self, name: str, args: Mapping[str, Any]) -> MeasureCall:
        """The call with its arguments typed; `MeasureArgumentError` when it cannot run as asked."""
        decl = self.declaration(name)
        missing = [a for a in decl.args if a not in args]
        extra = [a for a in args if a not in decl.args]
        if missing or extra:
            wrong = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"unexpected {', '.join(extra)}"] if extra else [])
            raise MeasureArgumentError(f"measure {name} takes ({', '.join(decl.args)}); {'; '.join(wrong)}")
        return MeasureCall(name, {a: _typed(decl, a, args[a]) for a in decl.args})

    def run(self, call: MeasureCall, today: Day, tools: StructuredTools) -> MeasureResult:
        decl = self.declaration(call.name)
        traces = getattr(tools, "traces", None)
        before = len(traces) if isinstance(traces, list) else 0
        served = Served(today, tools, frozenset(decl.reads), call.name)
        try:
            value = IMPLEMENTATIONS[call.name](served, **call.args)
        except Unknown:
            value = None
        return MeasureResult(call, value, decl.unit, _as_of(traces, before, decl.reads), served.rows_read)

    def call(self, name: str, args: Mapping[str, Any], today: Day, tools: StructuredTools) -> MeasureResult:
        return self.run(self.check(name, args), today, tools)


def _as_of(traces: Any, before: int, reads: tuple[str, ...]) -> dict[str, Day | None]:
    """Each class read's data day in the traces recorded since `before` (the oldest, when read twice), oldest
    first; classes the call did not trace (not read, or tools without traces) come last as None."""
    days: dict[str, Day | None] = dict.fromkeys(reads)
    if isinstance(traces, list):
        for entry in traces[before:]:
            for c, d in getattr(entry, "data_times", {}).items():
                if c in days and d is not None:
                    current = days[c]
                    days[c] = d if current is None else min(current, d)
    return dict(sorted(days.items(), key=lambda kv: (kv[1] is None, kv[1] or dt.date.min, kv[0])))
