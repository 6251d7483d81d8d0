"""The differential on the CI world: `bench/differential_gold.py` sets the Python gold (fold over the ledger file)
against the independent SQL gold (truth schema) on the 30-day world, 200 tasks under four vintage maps, and finds
no disagreement; a wrong answer planted on either side, and a truth row edited in the database, are found and
named by template; the SQL gold applies the absent-reference rule (docs/rules.md) by itself (checked against a count
made by hand from the ledger records).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from bench_scripts import load_bench_script

from churn_assets.evaluation.independent import SqlGold
from churn_assets.evaluation.independent import gold as sql_gold_module
from churn_assets.evaluation.independent.differential import compare, vintage_maps
from churn_assets.evaluation.independent.library import library
from churn_assets.fabric.postgres import connection, schema_name
from churn_assets.fabric.truth import load_truth
from churn_assets.services import ServiceUrls
from churn_assets.state import StatePaths
from churn_assets.tasks import gold as python_gold_module
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.world.events import ENTITY_CLASSES
from churn_assets.world.ledger import load_ledger

pytestmark = pytest.mark.integration

T = dt.date(2024, 1, 30)  # the CI world's last day; T' = T - 29 is its first


def _script() -> ModuleType:
    return load_bench_script("differential_gold")


@pytest.fixture(scope="module")
def world(services: ServiceUrls, small_world: str, state_paths: StatePaths) -> str:
    """The CI world with its ledger in the truth schema (what the SQL gold reads)."""
    with connection(services.warehouse) as conn:
        load_truth(conn, small_world, load_ledger(state_paths.ledger_dir(small_world)))
    return small_world


@pytest.fixture(scope="module")
def records(world: str, state_paths: StatePaths) -> list[dict[str, Any]]:
    return load_ledger(state_paths.ledger_dir(world)).records


def test_the_differential_finds_no_disagreement_on_200_tasks(world: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    out = tmp_path / "figures.json"
    rc = _script().main(["--world", world, "--at", T.isoformat(), "--tasks", "200", "--json", str(out)])
    seconds = time.perf_counter() - started
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert rc == 0, printed
    assert figures["tasks"] == 200 and figures["comparisons"] == 1000 and figures["disagreements"] == 0
    [w] = figures["worlds"]
    # The stale maps really move answers (else agreeing on them would prove nothing).
    moved = {name: m["moved"] for name, m in w["maps"].items()}
    assert moved.pop("every class at T") == 0 and all(n > 0 for n in moved.values()), moved
    assert "0 disagreement(s)" in printed.splitlines()[-1]
    assert seconds < 90, f"the differential took {seconds:.1f} s"


def _tasks(records: list[dict[str, Any]], world: str, n: int = 60) -> tuple[GoldResolver, list[Any]]:
    resolver = GoldResolver(records)
    return resolver, list(generate_task_set(records, world_id=world, anchor=T, n=n, resolver=resolver).tasks)


def test_a_wrong_python_answer_is_found_and_named(world: str, records: list[dict[str, Any]], services: ServiceUrls,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    resolver, tasks = _tasks(records, world)
    planted = next(t.template_id for t in tasks if t.template.answer.kind == "integer")
    maps = vintage_maps(T, _first_day(records))
    answered = sum(1 for t in tasks if t.template_id == planted for v in maps.values()
                   if resolver.gold(t.template, t.params, anchor=T, vintage=v) is not None)
    right = python_gold_module.GOLD[planted]
    monkeypatch.setitem(python_gold_module.GOLD, planted,
                        lambda s, p, a: None if (v := right(s, p, a)) is None else v + 1)
    fresh = GoldResolver(records)  # the resolver above keeps the gold it computed (the right values)
    with connection(services.warehouse, autocommit=True) as conn:
        result = compare(world, fresh, SqlGold(conn, world), tasks, maps, T)
    assert dict(result.by_template) == {planted: answered} and answered > 0  # each of its answers, every map
    assert f"({planted} " in str(result.disagreements[0])


def test_a_wrong_sql_answer_is_found_and_named(world: str, records: list[dict[str, Any]], services: ServiceUrls,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A plausible SQL slip (offboarded users still count as active) is caught on the templates it moves."""
    resolver, tasks = _tasks(records, world)
    lib = library()
    wrong = dataclasses.replace(lib.states["active_users"], body="SELECT user_id FROM users")
    monkeypatch.setattr(sql_gold_module, "library", lambda: dataclasses.replace(
        lib, states={**lib.states, "active_users": wrong}))
    with connection(services.warehouse, autocommit=True) as conn:
        result = compare(world, resolver, SqlGold(conn, world), tasks, vintage_maps(T, _first_day(records)), T)
    assert result.disagreements
    reads_user_status = {t.template_id for t in tasks if "user_status" in t.template.classes}
    assert set(result.by_template) <= reads_user_status


def test_a_truth_row_edited_in_the_database_is_found(world: str, records: list[dict[str, Any]],
                                                     services: ServiceUrls, state_paths: StatePaths) -> None:
    """The SQL gold reads the truth schema, the Python gold the ledger file: a price edited in the database is a
    disagreement on the list-price question of that product."""
    from churn_assets.tasks.task_set import Task
    from churn_assets.tasks.templates import template

    listing = next(r for r in records if r["kind"] == "product_listed")
    product = listing["entity_id"]
    t = template("t1_list_price")
    task = Task("planted", world, T.isoformat(), t.template_id, {"product": product}, t.render({"product": product}))
    events = f'"{schema_name(world, "truth")}".events'
    with connection(services.warehouse, autocommit=True) as conn:
        conn.execute(f"UPDATE {events} SET payload = jsonb_set(payload, '{{list_price_usd}}', '1.23') "
                     f"WHERE kind IN ('product_listed', 'price_changed') AND entity_id = %s", (product,))
        try:
            result = compare(world, GoldResolver(records), SqlGold(conn, world), [task],
                             {"every class at T": dict.fromkeys(ENTITY_CLASSES, T)}, T)
        finally:
            load_truth(conn, world, load_ledger(state_paths.ledger_dir(world)), force=True)
    [d] = result.disagreements
    assert (d.template_id, d.sql) == ("t1_list_price", 1.23) and d.python != 1.23


def test_a_holder_that_user_status_does_not_know_is_nobodys_active_user(world: str, records: list[dict[str, Any]],
                                                                         services: ServiceUrls) -> None:
    """An absent reference (docs/rules.md, "Absent references"), in the SQL gold by itself: with assignments served at
    T and user_status at an earlier day d, a license held by a user hired after d is not an active user's license. The
    expected count is made by hand from the ledger records (latest holder per license; hire and offboard days)."""
    holder: dict[str, str | None] = {}
    product_of: dict[str, str] = {}
    hired: dict[str, dt.date] = {}
    offboarded: dict[str, dt.date] = {}
    for r in records:
        day, kind, eid, p = dt.date.fromisoformat(r["at"]), r["kind"], r["entity_id"], r["payload"]
        if kind == "license_purchased":
            product_of[eid] = p["product_id"]
        elif kind == "license_assigned":
            holder[eid] = p["user_id"]
        elif kind == "license_reassigned":
            holder[eid] = p["to_user_id"]
        elif kind == "license_unassigned":
            holder[eid] = None
        elif kind == "user_hired":
            hired[eid] = day
        elif kind == "user_offboarded":
            offboarded[eid] = day
    late = sorted((hired[u], product_of[lic]) for lic, u in holder.items()
                  if u is not None and hired[u] > dt.date(2024, 1, 1) and u not in offboarded)
    hire_day, product = late[len(late) // 2]
    d = hire_day - dt.timedelta(days=1)

    def expected(status_day: dt.date) -> int:
        return sum(1 for lic, u in holder.items() if u is not None and product_of[lic] == product
                   and hired[u] <= status_day and not (u in offboarded and offboarded[u] <= status_day))

    with connection(services.warehouse, autocommit=True) as conn:
        gold = SqlGold(conn, world)
        at_t = gold.gold("t2_license_holders_product", {"product": product}, anchor=T)
        stale = gold.gold("t2_license_holders_product", {"product": product}, anchor=T, vintage={"user_status": d})
    assert (at_t, stale) == (expected(T), expected(d))
    assert stale < at_t  # the late hire's license is not counted under the older user_status


def _first_day(records: list[dict[str, Any]]) -> dt.date:
    return dt.date.fromisoformat(records[0]["at"])
