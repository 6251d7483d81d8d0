"""The one-line rendering of pydantic errors that every config shares (world/validation.py)."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field, ValidationError, field_validator

from churn_assets.world.validation import StrictModel, fail, field_at, must, one_line, render_path


class Entry(StrictModel):
    size: Annotated[int, Field(ge=1, description="an integer >= 1")]
    note: str = ""

    @field_validator("note")
    @classmethod
    def _no_braces(cls, value: str) -> str:
        if "{" in value:
            raise fail(f"note {value!r} has a {{brace}}")
        if value == "x":
            raise must("must not be x")
        return value


class Section(StrictModel):
    entries: dict[str, Entry] = Field(default_factory=dict)
    items: list[Entry] = Field(default_factory=list)
    limit: Annotated[int, Field(le=3)] = 0


class Doc(StrictModel):
    section: Section


def message(data: object, **kwargs: object) -> str:
    with pytest.raises(ValidationError) as err:
        Doc.model_validate(data)
    return one_line(err.value, Doc, **kwargs)


def test_render_path() -> None:
    assert render_path(("keys", 0, "key")) == "keys[0].key"
    assert render_path(("a", "b")) == "a.b" and render_path(()) == ""


def test_field_at_walks_sections_mappings_and_lists() -> None:
    assert field_at(Doc, ("section", "entries", "a", "size"))[0] == 4
    assert field_at(Doc, ("section", "items", 2, "size"))[0] == 4
    depth, field = field_at(Doc, ("section", "entries", "a"))
    assert depth == 3 and field is None  # an entry, not a field
    assert field_at(Doc, ("section", "nosuch"))[0] == 1


@pytest.mark.parametrize(("data", "expected"), [
    ({"section": {"entries": {"a": {"size": 0}}}}, "section.entries.a.size must be an integer >= 1 (got 0)"),
    ({"section": {"items": [{"size": "2"}]}}, "section.items[0].size must be an integer >= 1 (got '2')"),
    ({"section": {"items": [{"size": 1, "note": "{x}"}]}}, "note '{x}' has a {brace}"),
    ({"section": {"items": [{"size": 1, "note": "x"}]}}, "section.items[0].note must not be x (got 'x')"),
    ({"section": {"items": [5]}}, "section.items[0] must be a mapping"),
    ({"section": {"limit": 9}}, "section.limit: Input should be less than or equal to 3 (got 9)"),
    ({"section": {"other": 1}}, "unknown key 'section.other'"),
    ({"section": 5}, "section must be a mapping"),
    ({}, "section is missing"),
    (5, "top level must be a mapping"),
    ({"section": {"limit": 9, "items": [{"size": 0}, {"size": 0}]}}, "(and 2 more problems)"),
])
def test_one_line(data: object, expected: str) -> None:
    text = message(data)
    assert expected in text and "\n" not in text, text


def test_inputs_can_be_kept_out() -> None:
    assert message({"section": {"entries": {"a": {"size": 0}}}}, show_input=False) == \
        "section.entries.a.size must be an integer >= 1"


def test_a_label_names_the_entry() -> None:
    def label(loc: tuple) -> tuple[str, tuple]:
        return (f"entry {loc[2]}: ", loc[3:]) if loc[:2] == ("section", "entries") and len(loc) > 2 else ("", loc)

    assert message({"section": {"entries": {"a": {"size": 0}}}}, label=label) == \
        "entry a: size must be an integer >= 1 (got 0)"
