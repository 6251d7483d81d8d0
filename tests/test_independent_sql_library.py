"""The independent gold's SQL library, without a database: every template has a query, a query reads exactly its
template's declared classes, each class's ledger fragment keeps exactly the event kinds that class owns, and the
placeholders a query needs are ones the SQL gold fills. Its answers are tested against the truth schema in
tests/integration/test_differential_gold.py."""

from __future__ import annotations

import re

import pytest

from churn_assets.evaluation.independent import gold as sql_gold_module
from churn_assets.evaluation.independent.library import Library, LibraryError, _parse, day_placeholder, library
from churn_assets.tasks.templates import TEMPLATES
from churn_assets.world.events import ENTITY_CLASSES, EVENT_KINDS

WINDOW_PLACEHOLDERS = {"first", "horizon"}  # filled from the task's `days`


def test_every_template_has_one_query_and_no_query_is_left_over() -> None:
    lib = library()
    assert set(lib.templates) == {t.template_id for t in TEMPLATES}


@pytest.mark.parametrize("t", TEMPLATES, ids=lambda t: t.template_id)
def test_a_query_reads_exactly_the_classes_its_template_declares(t) -> None:
    """The classes read are the ledger fragments a query pulls in, so this is the SQL side of the rule that
    gold reads only its template's classes (docs/rules.md, "Which class owns which fact"; tests/test_gold.py checks
    the Python side)."""
    assert library().classes_read(t.template_id) == frozenset(t.classes)


@pytest.mark.parametrize("t", TEMPLATES, ids=lambda t: t.template_id)
def test_a_query_needs_only_placeholders_the_sql_gold_fills(t) -> None:
    text = library().query_text(t.template_id)
    needed = set(re.findall(r"\{([a-z0-9_]+)\}", text))
    fills = {"events", "anchor", *t.params, *(day_placeholder(c) for c in t.classes)}
    if "days" in t.params:
        fills |= WINDOW_PLACEHOLDERS
    assert needed <= fills, f"{t.template_id} needs {sorted(needed - fills)}"
    assert library().templates[t.template_id].span == ({"day1", "day2"} <= set(t.params))


def test_each_class_fragment_keeps_the_kinds_its_class_owns() -> None:
    """Written by hand from docs/rules.md, "Which class owns which fact"; held against the ownership events.py
    declares (utilization reads the consumption records per license, decision 18, so it owns `consumption_logged`
    beside `consumption`)."""
    lib = library()
    fragments = {f.entity_class: f for f in lib.states.values() if f.entity_class}
    assert set(fragments) == set(ENTITY_CLASSES)
    owned = {c: {k.name for k in EVENT_KINDS.values() if c in k.classes} for c in ENTITY_CLASSES}
    owned["utilization"] = {"consumption_logged"}
    for cls, fragment in fragments.items():
        kinds = set(re.findall(r"'([a-z_]+)'", fragment.body))
        assert kinds == owned[cls], cls
        assert "{" + day_placeholder(cls) + "}" in fragment.body


def test_the_file_rules_are_enforced() -> None:
    with pytest.raises(LibraryError, match="declares no class"):
        _parse("-- name: x\nSELECT 1 WHERE at <= {day}\n", "name", "t.sql")
    with pytest.raises(LibraryError, match="never uses its served day"):
        _parse("-- name: x\n-- class: prices\nSELECT 1\n", "name", "t.sql")
    with pytest.raises(LibraryError, match="unknown class"):
        _parse("-- name: x\n-- class: weather\nSELECT {day}\n", "name", "t.sql")
    with pytest.raises(LibraryError, match="header in a file of names"):
        _parse("-- template: x\nSELECT 1\n", "name", "t.sql")


def test_composition_takes_the_closure_in_file_order() -> None:
    states = {f.name: f for f in _parse(
        "-- name: a\n-- class: prices\nSELECT * FROM {events} WHERE at <= {day}\n"
        "-- name: b\nSELECT * FROM a\n-- name: c\nSELECT * FROM b JOIN a USING (x)\n", "name", "t.sql")}
    from churn_assets.evaluation.independent.library import _with_refs

    resolved: dict = {}
    for name, f in states.items():
        resolved[name] = _with_refs(f, resolved)
    [q] = _parse("-- template: q\nSELECT count(*) FROM c\n", "template", "t.sql")
    lib = Library(resolved, {"q": _with_refs(q, resolved)}, {})
    text = lib.query_text("q")
    assert text.index("a AS (") < text.index("b AS (") < text.index("c AS (")
    assert lib.classes_read("q") == {"prices"}


def test_vintage_maps_serving_after_the_anchor_are_refused() -> None:
    import datetime as dt

    t = dt.date(2024, 4, 27)
    with pytest.raises(sql_gold_module.SqlGoldError, match="after the anchor"):
        sql_gold_module.served_days({"prices": t + dt.timedelta(days=1)}, t)
    with pytest.raises(sql_gold_module.SqlGoldError, match="unknown classes"):
        sql_gold_module.served_days({"weather": t}, t)
    assert sql_gold_module.served_days({"prices": "2024-04-20"}, t) == {
        c: dt.date(2024, 4, 20) if c == "prices" else t for c in ENTITY_CLASSES}
