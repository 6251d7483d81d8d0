"""The reports' Markdown tables (`sweeps/markdown.py`): a cell holding `|`, a backslash or a line break stays one
cell, and the table parses back to the values it was made from."""

from __future__ import annotations

import pytest

from churn_assets.sweeps.markdown import NONE, parse_table, split_row, table


def test_cells_with_bars_backslashes_and_line_breaks_parse_back() -> None:
    rows = [{"a": "seed 42 | grounding | tiered | gap 27", "b": 3, "c": None},
            {"a": "C:\\\\dir\\|x", "b": "two\nlines", "c": 0.25}]
    text = table(rows, ["a", "b", "c"], ["cell", "count | n", "share"])
    back = parse_table(text)
    assert back == [{"cell": "seed 42 | grounding | tiered | gap 27", "count | n": "3", "share": ""},
                    {"cell": "C:\\\\dir\\|x", "count | n": "two lines", "share": "0.25"}]
    assert all(line.count("|") - line.count("\\|") == 4 for line in text.splitlines())


def test_an_unescaped_bar_is_caught_when_parsing() -> None:
    broken = "| cell | n |\n|---|---|\n| seed 42 | grounding | 3 |\n"
    with pytest.raises(ValueError, match="3 cells under 2 headers"):
        parse_table(broken)


def test_an_empty_table_and_a_bad_row() -> None:
    assert table([], ["a"]) == NONE + "\n" and parse_table(NONE) == []
    with pytest.raises(ValueError, match="not a table row"):
        split_row("a | b")
