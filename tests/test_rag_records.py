"""The RAG corpus records (pure): one record per entity with the facts of its day, consumption over
trailing windows, no build-day leakage (an untouched entity keeps its text and so its embedding), and the
refusal of a state folded at another day."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_encoder import FakeEncoder

from churn_assets.grounding.chunks import chunk_documents
from churn_assets.grounding.rag_corpus import (
    KINDS,
    WINDOWS_DAYS,
    RagRecord,
    consumption_texts,
    corpus_records,
    make_record,
)
from churn_assets.world.config import load_config
from churn_assets.world.fold import fold_ledger, uniform_vintage
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger
from churn_assets.world.state import ConsumptionRecord, License, PricePoint, Product, Ticket, WorldState
from contracts.facts import contract_facts_as_of
from contracts.render import render_markdown

DAY = dt.date(2024, 4, 27)


def days_before(n: int) -> dt.date:
    return DAY - dt.timedelta(days=n)


# ---------------------------------------------------------------------------------------------------
# A hand-made world: every text checked word for word
# ---------------------------------------------------------------------------------------------------


@pytest.fixture
def world() -> WorldState:
    d0 = dt.date(2024, 1, 1)
    s = WorldState(vintage=uniform_vintage(DAY))
    s.vendor_dims.register("vnd_001", d0, "Northware", "standard")
    s.vendor_dims.change("vnd_001", dt.date(2024, 2, 18), "Northware Global", "standard", "renamed")
    s.vendor_dims.change("vnd_001", dt.date(2024, 3, 1), "Northware Global", "strategic", "tier_changed")
    s.cost_center_membership.create_cost_center("cc_004", d0, "Platform", "Engineering")
    s.cost_center_membership.create_cost_center("cc_007", d0, "Field Sales", "Sales")
    s.prices.list_product(Product("prd_0001", d0, [PricePoint(d0, 40.0, "listed"),
                                                   PricePoint(dt.date(2024, 3, 28), 45.5, "list_price_increase")],
                                  name="Northware CRM", vendor_id="vnd_001", license_model="per_seat", api_access=True))
    s.user_status.hire("usr_000001", d0)
    s.cost_center_membership.join("usr_000001", "cc_004", d0)
    s.cost_center_membership.move("usr_000001", "cc_007", dt.date(2024, 2, 2), "cc_004")
    s.user_status.hire("usr_000002", d0)
    s.cost_center_membership.join("usr_000002", "cc_004", d0)
    s.user_status.offboard("usr_000002", dt.date(2024, 4, 20), "voluntary")
    s.assignments.purchase(License("lic_000001", "prd_0001", d0, 38.5, "ctr_0001"))
    s.assignments.assign("lic_000001", "usr_000002", d0)
    s.assignments.reassign("lic_000001", "usr_000002", "usr_000001", dt.date(2024, 4, 20))
    s.assignments.purchase(License("lic_000002", "prd_0001", d0, 38.5, None))
    s.assignments.assign("lic_000002", "usr_000002", d0)
    s.assignments.unassign("lic_000002", "usr_000002", dt.date(2024, 4, 21), "offboarded")
    s.assignments.purchase(License("lic_000003", "prd_0001", DAY, 41.0, "ctr_0001"))
    s.tickets.open(Ticket("tkt_000001", "usr_000001", "prd_0001", "high", dt.date(2024, 4, 2), []))
    s.tickets.tickets["tkt_000001"].history.append(_status(dt.date(2024, 4, 2), "open"))
    s.tickets.change_status("tkt_000001", dt.date(2024, 4, 5), "in_progress", "open")
    for age, sessions, minutes, calls in ((0, 2, 50, 10), (6, 1, 20, 5), (7, 3, 60, 0), (29, 1, 10, 1),
                                          (30, 4, 100, 7), (89, 1, 5, 0), (90, 9, 900, 90)):
        s.consumption.log(ConsumptionRecord(days_before(age), "usr_000001", "prd_0001", "lic_000001",
                                            sessions, minutes, calls))
    s.consumption.log(ConsumptionRecord(days_before(100), "usr_000002", "prd_0001", "lic_000002", 1, 15, 0))
    return s


def _status(day: dt.date, status: str) -> Any:
    from churn_assets.world.state import StatusChange

    return StatusChange(day, status)


def by_id(records: list[RagRecord]) -> dict[str, RagRecord]:
    return {r.record_id: r for r in records}


def test_one_record_per_entity_with_its_facts(world: WorldState) -> None:
    records = by_id(corpus_records(world, DAY, []))
    assert records["user:usr_000001"].text == (
        "User usr_000001: active, hired 2024-01-01. Cost center cc_007 (Field Sales, business unit Sales) "
        "since 2024-02-02.")
    assert records["user:usr_000002"].text == (
        "User usr_000002: offboarded 2024-04-20 (voluntary), hired 2024-01-01. Last cost center cc_004 "
        "(Platform, business unit Engineering).")
    assert records["license:lic_000001"].text == (
        "License lic_000001: prd_0001 (Northware CRM), bought 2024-01-01 at USD 38.50 per seat per month under "
        "contract ctr_0001. Assigned to user usr_000001 since 2024-04-20.")
    assert records["license:lic_000002"].text == (
        "License lic_000002: prd_0001 (Northware CRM), bought 2024-01-01 at USD 38.50 per seat per month. "
        "Unassigned since 2024-04-21 (last holder usr_000002, offboarded).")
    assert records["license:lic_000003"].text.endswith("Never assigned.")
    assert records["product:prd_0001"].text == (
        "Product prd_0001: Northware CRM, vendor vnd_001 (Northware Global), per seat licence, API access yes. "
        "List price USD 45.50 per seat per month since 2024-03-28, previously USD 40.00.")
    assert records["vendor:vnd_001"].text == (
        "Vendor vnd_001: Northware Global, strategic tier, registered 2024-01-01. Renamed from Northware on "
        "2024-02-18. Tier changed from standard to strategic on 2024-03-01.")
    assert records["cost_center:cc_004"].text == "Cost center cc_004: Platform, business unit Engineering."
    assert records["ticket:tkt_000001"].text == (
        "Ticket tkt_000001: high priority, opened 2024-04-02 by user usr_000001 about product prd_0001 "
        "(Northware CRM). Status in progress since 2024-04-05.")
    kinds = Counter(r.kind for r in records.values())
    assert kinds == {"user": 2, "license": 3, "product": 1, "vendor": 1, "cost_center": 2, "ticket": 1,
                     "consumption": 2}


def test_refs_name_the_entity_and_every_id_its_text_names(world: WorldState) -> None:
    records = by_id(corpus_records(world, DAY, []))
    assert records["license:lic_000001"].refs == ("lic_000001", "prd_0001", "ctr_0001", "usr_000001")
    assert records["consumption:usr_000001:prd_0001"].refs == ("usr_000001:prd_0001", "usr_000001", "prd_0001")
    assert records["ticket:tkt_000001"].entity_id == "tkt_000001"


def test_consumption_is_aggregated_over_trailing_windows_ending_at_the_day(world: WorldState) -> None:
    texts = consumption_texts(world, DAY)
    # ages 0 and 6 in the last 7 days; + 7 and 29 in 30; + 30 and 89 in 90; age 90 in none
    assert texts[("usr_000001", "prd_0001")] == (
        "Usage of product prd_0001 (Northware CRM) by user usr_000001: "
        "last 7 days 3 sessions, 70 minutes, 15 API calls; "
        "last 30 days 7 sessions, 140 minutes, 16 API calls; "
        "last 90 days 12 sessions, 245 minutes, 23 API calls; last used 2024-04-27.")
    assert texts[("usr_000002", "prd_0001")] == (
        "Usage of product prd_0001 (Northware CRM) by user usr_000002: last 7 days no use; last 30 days no use; "
        "last 90 days no use; last used 2024-01-18.")
    assert WINDOWS_DAYS == (7, 30, 90)


def test_no_record_aggregates_over_several_entities(world: WorldState) -> None:
    for r in corpus_records(world, DAY, []):
        if r.kind in ("cost_center", "vendor"):
            assert "USD" not in r.text and "users" not in r.text


def test_refuses_a_state_of_another_day_or_a_vintage_map(world: WorldState) -> None:
    with pytest.raises(ValueError, match="needs a fold as of that day"):
        corpus_records(world, DAY + dt.timedelta(days=1), [])
    world.vintage = {**uniform_vintage(DAY), "prices": days_before(3)}
    with pytest.raises(ValueError, match="needs a fold as of that day"):
        corpus_records(world, DAY, [])


def test_make_record_hashes_the_text() -> None:
    a = make_record("vendor", "vnd_001", "Vendor vnd_001: Northware.")
    b = make_record("vendor", "vnd_001", "Vendor vnd_001: Northware.")
    c = make_record("vendor", "vnd_001", "Vendor vnd_001: Northware Global.")
    assert a == b and a.content_hash != c.content_hash
    assert a.record_id == "vendor:vnd_001"


# ---------------------------------------------------------------------------------------------------
# A generated 30-day world: completeness and no build-day leakage
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    out = Path(tmp_path_factory.mktemp("rag-world"))
    generate_ledger(load_config(days=30), out)
    yield load_ledger(out).records


def corpus_of(records: list[dict[str, Any]], day: dt.date) -> list[RagRecord]:
    state = fold_ledger(records, day)
    docs = {f.contract_id: render_markdown(f) for f in contract_facts_as_of(records, day)}
    return corpus_records(state, day, chunk_documents(docs, day))


def test_a_generated_day_has_every_kind_and_unique_record_ids(generated: list[dict[str, Any]]) -> None:
    day = dt.date(2024, 1, 20)
    records = corpus_of(generated, day)
    state = fold_ledger(generated, day)
    kinds = Counter(r.kind for r in records)
    assert set(kinds) == set(KINDS)
    assert kinds["user"] == len(state.user_status.users)
    assert kinds["license"] == len(state.assignments.licenses)
    assert kinds["ticket"] == len(state.tickets.tickets)
    assert kinds["consumption"] == len({(r.user_id, r.product_id) for r in state.consumption.records})
    assert len({r.record_id for r in records}) == len(records)
    assert all(r.text and len(r.text) < 800 for r in records)
    # A corpus is embedded once: equal texts share a hash (the clauses every contract shares).
    assert len({r.content_hash for r in records}) < len(records)
    encoder = FakeEncoder()
    unique = {r.content_hash: r.text for r in records}
    encoder.encode(list(unique.values()))
    assert encoder.stats.texts == len(unique)


def _ids_in(value: Any) -> set[str]:
    return set(re.findall(r"[a-z]{2,4}_\d{3,7}", repr(value)))


def test_untouched_entities_keep_their_text_from_one_day_to_the_next(generated: list[dict[str, Any]]) -> None:
    """A record changes only when an event of the new day touches its entity (or, for usage, when the new
    day's consumption or a day leaving a window touches its pair): no text depends on the build day."""
    for day in (dt.date(2024, 1, 10), dt.date(2024, 1, 25)):
        before = by_id(corpus_of(generated, day - dt.timedelta(days=1)))
        after = by_id(corpus_of(generated, day))
        events = [r for r in generated if r["at"] == day.isoformat()]
        touched: set[str] = set()
        for e in events:
            if e["kind"] != "consumption_logged":
                touched |= {e["entity_id"]} | _ids_in(e["payload"])
        renamed_vendors = {e["entity_id"] for e in events if e["kind"].startswith("vendor")}
        products_of_renamed = {r.entity_id for r in after.values() if r.kind == "product"
                               and any(v in r.refs for v in renamed_vendors)}
        windows_edge = {(day - dt.timedelta(days=w)).isoformat() for w in WINDOWS_DAYS} | {day.isoformat()}
        used_pairs = {f"{e['payload']['user_id']}:{e['payload']['product_id']}" for e in generated
                      if e["kind"] == "consumption_logged" and e["at"] in windows_edge}
        changed = [rid for rid, r in after.items() if rid in before and before[rid].content_hash != r.content_hash]
        assert changed, "a day of a busy world changes something"
        for rid in changed:
            r = after[rid]
            if r.kind == "consumption":
                assert r.entity_id in used_pairs, rid
            elif r.kind == "contract_chunk":
                assert r.entity_id in touched or r.text.startswith("# ") or "Status" in r.text, rid
            else:
                assert r.entity_id in touched | products_of_renamed, rid
