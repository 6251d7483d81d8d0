"""The semantic model: measures compute only from the rows the router returned.

- the import test: no measure module imports gold, the fold or evaluation (directly or through what it imports);
- the edited-row test: editing one served row changes a measure's result;
- the coverage test lives in test_deterministic_agent.py (every template's measure is implemented) and here the
  declaration and implementation agree (arguments, reads enforced at run time);
- bad input: an unknown measure, a missing, extra or mistyped argument is one line naming measure and argument.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from agent_rows import StateTools
from test_deterministic_agent import records_of

from churn_assets.grounding.measures import MeasureArgumentError, SemanticModel
from churn_assets.grounding.measures.context import IMPLEMENTATIONS, Served, UndeclaredRead
from churn_assets.grounding.rows import PriceRow, Request, Row
from churn_assets.grounding.semantic_tables import DOCS_BEGIN, DOCS_END, as_markdown
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.templates import TEMPLATES
from churn_assets.world.fold import fold_vintage, uniform_vintage

D = dt.date.fromisoformat
FORBIDDEN = ("churn_assets.tasks.gold", "churn_assets.world.fold", "churn_assets.evaluation")


def test_measure_code_imports_no_gold_fold_or_evaluation() -> None:
    """In a fresh interpreter, importing the measures (and the deterministic agent that calls them) loads none of
    the modules that know the answers."""
    code = ("import sys, churn_assets.grounding.measures, churn_assets.arms.agents.deterministic; "
            f"print([m for m in sys.modules if m.startswith({FORBIDDEN!r})])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_every_implementation_takes_its_declared_arguments() -> None:
    model = SemanticModel()
    assert set(IMPLEMENTATIONS) == set(model.registry.measures)
    for name, fn in IMPLEMENTATIONS.items():
        params = list(inspect.signature(fn).parameters)[1:]  # after the Served context
        assert set(params) == set(model.registry.measures[name].args), name


@pytest.fixture(scope="module")
def world() -> tuple[Any, dt.date, list[Any]]:
    records = records_of(45, 7)
    t = D("2024-02-14")
    tasks = generate_task_set(records, world_id="default-s7-000000", anchor=t.isoformat(), n=180).tasks
    return fold_vintage(records, uniform_vintage(t)), t, tasks


class EditedTools(StateTools):
    """Serves the fold's rows with one row of one view replaced."""

    def __init__(self, state: Any, today: dt.date, view: str, edit: Any) -> None:
        super().__init__(state, today)
        self.view, self.edit = view, edit

    def rows(self, r: Request) -> list[Row]:
        rows = super().rows(r)
        return self.edit(rows) if r.view == self.view else rows


def _call(tools: Any, template_id: str, tasks: Sequence[Any], today: dt.date) -> Any:
    task = next(t for t in tasks if t.template_id == template_id)
    return SemanticModel().call(task.template.measure, task.params, today, tools).value


def test_an_edited_served_row_changes_the_result(world: tuple[Any, dt.date, list[Any]]) -> None:
    """A measure reads the served rows, nothing else: doubling every product's first price moves total spend, and
    dropping every holding row moves the unassigned count."""
    state, t, tasks = world
    plain = StateTools(state, t)

    def every_price_doubled(rows: list[Row]) -> list[Row]:
        return [dataclasses.replace(r, list_price_usd=r.list_price_usd * 2) if isinstance(r, PriceRow) else r
                for r in rows]

    assert _call(EditedTools(state, t, "prices", every_price_doubled), "t2_total_spend", tasks, t) \
        != _call(plain, "t2_total_spend", tasks, t)
    changed = _call(EditedTools(state, t, "holdings", lambda rows: []), "t1_unassigned_licenses", tasks, t)
    assert changed != _call(plain, "t1_unassigned_licenses", tasks, t)


def test_one_edited_price_row_changes_list_price(world: tuple[Any, dt.date, list[Any]]) -> None:
    state, t, _ = world
    product = sorted(state.prices.products)[0]
    args = {"product": product}
    model = SemanticModel()

    def edit(rows: list[Row]) -> list[Row]:
        return [dataclasses.replace(r, list_price_usd=r.list_price_usd + 1) if isinstance(r, PriceRow) else r
                for r in rows]

    before = model.call("list_price", args, t, StateTools(state, t)).value
    after = model.call("list_price", args, t, EditedTools(state, t, "prices", edit)).value
    assert before is not None and after == pytest.approx(before + 1)


def test_a_read_the_registry_does_not_declare_is_refused(world: tuple[Any, dt.date, list[Any]]) -> None:
    state, t, _ = world
    served = Served(t, StateTools(state, t), frozenset({"prices"}), "list_price")
    with pytest.raises(UndeclaredRead, match="assignments"):
        served.fetch(Request("licenses"))


@pytest.mark.parametrize(("name", "args", "message"), [
    ("list_prices", {"product": "prd_0001"}, "unknown measure 'list_prices'"),
    ("list_price", {}, "measure list_price takes (product); missing product"),
    ("list_price", {"product": "prd_0001", "days": 3}, "unexpected days"),
    ("price_changes", {"days": "seven"}, "measure price_changes: argument days must be a whole number"),
    ("held_licenses_net_change", {"day1": "2024-02-30", "day2": "2024-02-01"},
     "argument day1 must be a day YYYY-MM-DD"),
    ("cost_centers_above_spend", {"threshold": "lots"}, "argument threshold must be a number of dollars"),
    ("vendor_name", {"vendor": 7}, "argument vendor must be an id such as prd_0001"),
    # a URL as an id (SmolLM2 wrote one): refused before any store or the SaaS API's path sees it
    ("list_price", {"product": "https://www.eBay"}, "argument product must be an id such as prd_0001"),
])
def test_bad_calls_are_one_line(name: str, args: dict[str, Any], message: str) -> None:
    with pytest.raises(MeasureArgumentError) as err:
        SemanticModel().check(name, args)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_an_unknown_id_is_the_absent_reference_result(world: tuple[Any, dt.date, list[Any]]) -> None:
    """An id the served data do not know is not an error: it is what the deterministic agent answers today."""
    state, t, _ = world
    model = SemanticModel()
    assert model.call("list_price", {"product": "prd_9999"}, t, StateTools(state, t)).value is None
    assert model.call("contract_status", {"contract": "ctr_9999"}, t, StateTools(state, t)).value is None


def test_a_result_is_one_line_with_as_of_days_and_rows(world: tuple[Any, dt.date, list[Any]]) -> None:
    state, t, _ = world

    class Traced(StateTools):
        def __init__(self, state: Any, today: dt.date) -> None:
            super().__init__(state, today)
            self.traces: list[Any] = []

        def retrieve(self, requests: Sequence[Request], note: str = "") -> list[list[Row] | None]:
            self.traces.append(type("T", (), {"data_times": {r.entity_class: t - dt.timedelta(days=2)
                                                             for r in requests}})())
            return super().retrieve(requests, note)

    result = SemanticModel().call("unassigned_licenses", {}, t, Traced(state, t))
    line = result.line()
    assert line.startswith(f"unassigned_licenses = {result.value} (count); as of: assignments ")
    assert (t - dt.timedelta(days=2)).isoformat() in line and line.endswith(f"; {result.rows} rows")
    assert result.rows > 0 and "\n" not in line


def test_docs_cli_and_asset_show_the_same_tables() -> None:
    from pathlib import Path

    from click.testing import CliRunner

    from churn_assets.cli import main
    from churn_assets.orchestration.assets.semantic_model import semantic_model, unanswered_templates

    model = SemanticModel()
    docs = (Path(__file__).resolve().parents[1] / "docs/measures.md").read_text()
    generated = docs[docs.index(DOCS_BEGIN):docs.index(DOCS_END) + len(DOCS_END)]
    assert generated == as_markdown(model.registry), "regenerate with `churnbench measures --markdown`"
    out = CliRunner().invoke(main, ["measures", "--markdown"])
    assert out.exit_code == 0 and out.output.strip() == generated
    import dagster as dg
    result = dg.materialize([semantic_model])
    [mat] = result.asset_materializations_for_node("semantic_model")
    assert mat.metadata["tables"].value == generated
    assert mat.metadata["registry_hash"].value == model.registry.content_hash
    calls = [dict(r.data) for r in mat.metadata["template_calls"].value.records]
    assert [f"| `{c['template']}` | `{c['call']}` |" for c in calls] == [
        line for line in generated.split("each answered by one call:")[1].splitlines() if line.startswith("| `")]
    shown = {r.data["measure"]: r.data for r in mat.metadata["measure_table"].value.records}
    assert list(shown) == list(model.registry.measures)
    assert all(f"| `{m}` | {row['arguments']} | {row['unit']} | {row['reads (tier)']} |" in generated
               for m, row in shown.items())
    assert unanswered_templates() == []
    assert len(TEMPLATES) == 47 and all(t.measure in generated for t in TEMPLATES)


def test_a_template_without_an_implementation_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from churn_assets.orchestration.assets.semantic_model import unanswered_templates

    monkeypatch.delitem(IMPLEMENTATIONS, "vendor_tier")
    assert unanswered_templates() == ["t1_vendor_tier: measure vendor_tier has no implementation"]
