"""Markdown tables: the one renderer of the sweep and regression reports, and the parser that reads one back.

A cell's text may hold `|` (the regression's cell labels, `seed 42 | grounding | tiered | gap 27`, are the keys of
`baselines/regression.json` and stay as they are; an error message may quote a world-day key `<day>|<world>`): a
bare `|` would end the cell, so a row would have more cells than the header and the figures after it would
not show. Rendering escapes it as `\\|` (GitHub's and Dagster's Markdown both read that as a literal bar) and
a line break as a space; `parse_table` undoes the escape, so `parse_table(table(rows, columns))` gives the
rows back as text (the tests' round trip).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# One reader of a table line for the contract documents and the reports: both escape `\\` and `|` alike.
from contracts.parse import split_row

NONE = "_none_"  # what an empty table renders as


def cell_text(value: Any) -> str:
    """A value as one table cell: None is empty, `|` escaped, line breaks and backslashes made harmless."""
    if value is None:
        return ""
    text = " ".join(str(value).split())
    return text.replace("\\", "\\\\").replace("|", "\\|")


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None) -> str:
    """A Markdown table of `rows` (one per line), `columns` picked from each row, `headers` shown above them."""
    if not rows:
        return NONE + "\n"
    head = list(headers or columns)
    if len(head) != len(columns):
        raise ValueError(f"{len(head)} headers for {len(columns)} columns")
    lines = ["| " + " | ".join(cell_text(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell_text(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def parse_table(text: str) -> list[dict[str, str]]:
    """The first Markdown table in `text` as rows of header -> cell text; a row whose cell count differs from
    the header's is an error (what an unescaped `|` makes)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("|")), None)
    if start is None:
        return []
    header = split_row(lines[start])
    rows = []
    for n, line in enumerate(lines[start + 2:], start + 3):
        if not line.strip().startswith("|"):
            break
        cells = split_row(line)
        if len(cells) != len(header):
            raise ValueError(f"table line {n} has {len(cells)} cells under {len(header)} headers: {line!r}")
        rows.append(dict(zip(header, cells, strict=True)))
    return rows
