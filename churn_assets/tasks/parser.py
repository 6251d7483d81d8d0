"""The deterministic agent's question parser: question text -> (template, params).

Each template's text becomes an anchored regular expression (literal words, one named group per
placeholder); a question parses when exactly one template matches it in full. Imports only the template
declarations (no fold, no gold), so arms may use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from churn_assets.errors import UserFacingError
from churn_assets.tasks.templates import PLACEHOLDERS, TEMPLATES, Template


class QuestionParseError(UserFacingError, ValueError):
    """A question no template (or more than one) matches."""


@dataclass(frozen=True)
class ParsedQuestion:
    template: Template
    params: dict[str, Any]


_PLACEHOLDER_RE = re.compile(r"\{([a-z_0-9]+)\}")


def _pattern_of(text: str) -> re.Pattern[str]:
    """A placeholder used twice (`{day2}` in the text and its explanation) must read the same both times."""
    parts: list[str] = []
    seen: set[str] = set()
    pos = 0
    for m in _PLACEHOLDER_RE.finditer(text):
        parts.append(_literal(text[pos:m.start()]))
        name = m.group(1)
        if name in seen:
            parts.append(f"(?P={name})")
        else:
            parts.append(f"(?P<{name}>{PLACEHOLDERS[name].pattern})")
            seen.add(name)
        pos = m.end()
    parts.append(_literal(text[pos:]))
    return re.compile("".join(parts), re.IGNORECASE)


def _literal(fragment: str) -> str:
    """Literal text, tolerant of spacing differences (a question re-wrapped by a transport)."""
    words = fragment.split(" ")
    return r"\s+".join(re.escape(w) for w in words)


@cache
def _patterns() -> tuple[tuple[Template, re.Pattern[str]], ...]:
    return tuple((t, _pattern_of(t.text)) for t in TEMPLATES)


def parse_question(text: str) -> ParsedQuestion:
    """The template and parameters of a question text; `QuestionParseError` when none or several match."""
    question = " ".join(text.split())
    matches = []
    for template, pattern in _patterns():
        m = pattern.fullmatch(question)
        if m is not None:
            params = {name: PLACEHOLDERS[name].read(value) for name, value in m.groupdict().items()}
            matches.append(ParsedQuestion(template, params))
    if len(matches) != 1:
        which = ", ".join(p.template.template_id for p in matches) or "no template"
        raise QuestionParseError(f"question matches {which}: {question!r}")
    return matches[0]
