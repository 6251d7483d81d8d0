"""Answer types: how a value is written, read back from an agent's text, and compared with gold.

Each template declares one answer type. Comparison is exact at the type's stated rounding; there is no
blanket percentage tolerance (the reference's 1% tolerance turned day-granular drift into fake errors):

- `integer` (counts, net changes, whole months): exact.
- `money` (USD): both sides rounded to the cent (half up), then equal.
- `fraction` (in [0, 1]): both sides rounded to the template's decimals (half up), then equal.
- `entity` (one id): equal ids (case and surrounding space ignored).
- `entity_list` (ids): equal as sets (order and duplicates ignored); "none" is the empty set.
- `category` (one of fixed choices) and `text` (a name): equal after case folding and collapsing spaces.
- `date`: the same ISO day.

Gold values are plain JSON values (int, float, str, sorted list of str) or None when the question has no
answer in the state it was asked against (e.g. an entity that state does not know).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from churn_assets.world.calendar import Day

ANSWER_KINDS = ("integer", "money", "fraction", "entity", "entity_list", "category", "text", "date")

Value = int | float | str | list[str] | None


class AnswerParseError(ValueError):
    """An agent's answer text that cannot be read as the expected answer type."""


def top_of(amounts: Mapping[str, float]) -> str | None:
    """The tie rule of every "top" question: the id with the largest amount; None when there is none or the
    largest is tied (no single answer: the generator never asks such an instance)."""
    if not amounts:
        return None
    ranked = sorted(amounts.values(), reverse=True)
    if len(ranked) > 1 and ranked[0] == ranked[1]:
        return None
    return max(amounts, key=lambda k: amounts[k])


def last_day(expiries: Iterable[Day]) -> Day | None:
    """A contract's last day: the latest expiry over its recorded terms (None when it has none)."""
    return max(expiries, default=None)


def round_half_up(value: float | int, decimals: int) -> float:
    """Round like a person does (0.125 -> 0.13), on the decimal text of the value, not its binary float."""
    quantum = Decimal(1).scaleb(-decimals)
    return float(Decimal(str(value)).quantize(quantum, rounding=ROUND_HALF_UP))


@dataclass(frozen=True)
class AnswerType:
    """One answer type; `decimals` is the stated rounding of money and fractions."""

    kind: str
    decimals: int | None = None
    choices: tuple[str, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ANSWER_KINDS:
            raise ValueError(f"unknown answer kind {self.kind!r}")

    # -- normalizing ---------------------------------------------------------------------------

    def normalize(self, value: Any) -> Value:
        """The canonical form of a value of this type (what gold returns and what is compared)."""
        if value is None:
            return None
        kind = self.kind
        if kind == "integer":
            if isinstance(value, bool) or int(value) != value:
                raise AnswerParseError(f"not a whole number: {value!r}")
            return int(value)
        if kind in ("money", "fraction"):
            assert self.decimals is not None
            try:
                return round_half_up(float(value), self.decimals)
            except (InvalidOperation, OverflowError):  # 1e30 or inf: a model's answer, not an amount
                raise AnswerParseError(f"not an amount this answer can hold: {value!r}") from None
        if kind == "entity":
            return str(value).strip()
        if kind == "entity_list":
            return sorted({str(v).strip() for v in value})
        if kind in ("category", "text"):
            return " ".join(str(value).split())
        if kind == "date":
            return dt.date.fromisoformat(str(value)).isoformat()
        raise AssertionError(kind)

    def equal(self, a: Any, b: Any) -> bool:
        """Whether two values are the same answer under this type's stated rounding."""
        if a is None or b is None:
            return a is None and b is None
        na, nb = self.normalize(a), self.normalize(b)
        if self.kind in ("entity", "category", "text"):
            return str(na).casefold() == str(nb).casefold()
        if self.kind == "entity_list":
            assert isinstance(na, list) and isinstance(nb, list)
            return {x.casefold() for x in na} == {x.casefold() for x in nb}
        return na == nb

    def is_degenerate(self, value: Value) -> bool:
        """Answers that say little about the data (zero, empty, none, a fraction of 0 or 1): a task set caps how
        many it keeps."""
        if value is None:
            return True
        if self.kind in ("integer", "money"):
            return value == 0
        if self.kind == "fraction":
            return value in (0, 1)  # none or all: as uninformative as a zero count
        if self.kind == "entity_list":
            assert isinstance(value, list)
            return len(value) == 0
        return False

    # -- text ----------------------------------------------------------------------------------

    def format(self, value: Value) -> str:
        """How an answer is written (the deterministic agent's output; readable in reports)."""
        if value is None:
            return "unknown"
        v = self.normalize(value)
        if self.kind == "money":
            assert isinstance(v, float)
            sign = "-" if v < 0 else ""
            return f"{sign}${abs(v):,.2f}"
        if self.kind == "fraction":
            return f"{v:.{self.decimals}f}"
        if self.kind == "entity_list":
            assert isinstance(v, list)
            return ", ".join(v) if v else "none"
        return str(v)

    def parse(self, text: str) -> Value:
        """Read an agent's answer text; `AnswerParseError` when it is not a value of this type.

        Lenient on form (thousands separators, a currency sign, a trailing period, a JSON list), strict on
        content: a text with two numbers is not an integer answer.
        """
        raw = text.strip().rstrip(".").strip()
        if not raw:
            raise AnswerParseError("empty answer")
        if raw.casefold() in UNKNOWN_WORDS:
            return None  # the agent found no such entity in what it was served (gold may agree)
        kind = self.kind
        if kind in ("integer", "money", "fraction"):
            return self._parse_number(raw)
        if kind == "entity":
            ids: list[str] = _ID_RE.findall(raw)
            if len(ids) != 1:
                raise AnswerParseError(f"expected one id, found {len(ids)} in {raw!r}")
            return ids[0]
        if kind == "entity_list":
            if raw.casefold() in ("none", "[]", "no contracts", "no cost centers", "empty"):
                return []
            try:
                loaded = json.loads(raw)
            except json.JSONDecodeError:
                loaded = None
            if isinstance(loaded, list):
                return sorted({str(v).strip() for v in loaded})
            return sorted(set(_ID_RE.findall(raw)))
        if kind == "category":
            found = [c for c in self.choices if re.search(rf"\b{re.escape(c)}\b", raw, re.IGNORECASE)]
            if len(found) != 1:
                raise AnswerParseError(f"expected one of {', '.join(self.choices)} in {raw!r}")
            return found[0]
        if kind == "text":
            return " ".join(raw.strip("\"'").split())
        if kind == "date":
            days = _DATE_RE.findall(raw)
            if len(days) != 1:
                raise AnswerParseError(f"expected one ISO date YYYY-MM-DD in {raw!r}")
            try:
                return dt.date.fromisoformat(days[0]).isoformat()
            except ValueError:
                raise AnswerParseError(f"not a calendar day: {days[0]!r}") from None
        raise AssertionError(kind)

    def _parse_number(self, raw: str) -> Value:
        numbers = _NUMBER_RE.findall(raw.replace(",", ""))
        if len(numbers) != 1:
            raise AnswerParseError(f"expected one number, found {len(numbers)} in {raw!r}")
        try:
            number = Decimal(numbers[0].replace("$", ""))
        except InvalidOperation:
            raise AnswerParseError(f"not a number: {numbers[0]!r}") from None
        if self.kind == "fraction" and raw.endswith("%"):
            number = number / 100
        if self.kind == "integer":
            if number != number.to_integral_value():
                raise AnswerParseError(f"expected a whole number, got {numbers[0]!r}")
            return int(number)
        return self.normalize(float(number))


UNKNOWN_WORDS = ("unknown", "n/a", "not found")
_NUMBER_RE = re.compile(r"[-+]?\$?\d+(?:\.\d+)?")
_ID_RE = re.compile(r"\b[a-z]{2,4}_\d+\b")
_DATE_RE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")

INTEGER = AnswerType("integer", description="a whole number, exact")
WHOLE_MONTHS = AnswerType("integer", description="whole months (rounded down), exact")
MONEY = AnswerType("money", decimals=2, description="US dollars, compared at the cent")
FRACTION_2DP = AnswerType("fraction", decimals=2, description="a fraction in [0, 1], compared at 2 decimals")
ENTITY = AnswerType("entity", description="one id, exact")
ENTITY_LIST = AnswerType("entity_list", description="ids, compared as a set")
DATE = AnswerType("date", description="an ISO day, exact")
TEXT = AnswerType("text", description="a name, exact up to case and spacing")


def category(*choices: str) -> AnswerType:
    return AnswerType("category", choices=tuple(choices), description=f"one of {', '.join(choices)}")
