"""The operational store's documents (pure): known answers on a hand-made ledger, agreement with the fold's
own query helpers on a simulated 30-day world, plain documents only, and the parity diff."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from ledger_records import make_ledger

from churn_assets.fabric.mongo import (
    OperationalStoreError,
    database_name,
    parse_database_name,
    world_databases,
    write_partition,
)
from churn_assets.fabric.operational import (
    COLLECTIONS,
    INDEXES,
    diff_collections,
    project_operational,
    window_bounds,
)
from churn_assets.world.config import load_config
from churn_assets.world.fold import (
    active_users,
    assigned_licenses,
    fold_ledger,
    license_holders,
    open_tickets,
)
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger


def _use(user: str, product: str, minutes: int = 30) -> dict[str, Any]:
    return {"user_id": user, "product_id": product, "sessions": 1, "session_minutes": minutes, "api_calls": 5}


# Two users; usr_1 is offboarded on 01-04 and their license freed, then re-assigned to usr_0 on 01-05;
# a ticket opens, starts and resolves; consumption on 01-02 and 01-05.
SMALL = make_ledger(
    ("2024-01-01", "vendor_registered", "vnd_000", {"name": "Acme", "tier": "standard", "activity_weight": 1.0}),
    ("2024-01-01", "cost_center_created", "cc_000", {"name": "Eng", "business_unit": "R&D", "activity_weight": 1.0}),
    ("2024-01-01", "product_listed", "prd_0000", {"name": "CRM", "vendor_id": "vnd_000", "license_model": "per_seat",
                                                  "api_access": True, "list_price_usd": 100.0,
                                                  "activity_weight": 1.0}),
    ("2024-01-01", "product_listed", "prd_0001", {"name": "Docs", "vendor_id": "vnd_000",
                                                  "license_model": "per_seat", "api_access": False,
                                                  "list_price_usd": 50.0, "activity_weight": 1.0}),
    ("2024-01-01", "user_hired", "usr_0", {"cost_center_id": "cc_000", "activity_weight": 1.0}),
    ("2024-01-01", "user_hired", "usr_1", {"cost_center_id": "cc_000", "activity_weight": 1.0}),
    ("2024-01-01", "license_purchased", "lic_0", {"product_id": "prd_0000", "contract_id": None,
                                                  "unit_price_usd": 100.0, "activity_weight": 1.0}),
    ("2024-01-01", "license_assigned", "lic_0", {"user_id": "usr_0", "product_id": "prd_0000"}),
    ("2024-01-01", "license_purchased", "lic_1", {"product_id": "prd_0001", "contract_id": None,
                                                  "unit_price_usd": 50.0, "activity_weight": 1.0}),
    ("2024-01-01", "license_assigned", "lic_1", {"user_id": "usr_1", "product_id": "prd_0001"}),
    ("2024-01-02", "ticket_opened", "tkt_0", {"user_id": "usr_0", "product_id": "prd_0000", "priority": "high",
                                              "status": "open"}),
    ("2024-01-02", "consumption_logged", "lic_0", _use("usr_0", "prd_0000", 30)),
    ("2024-01-04", "user_offboarded", "usr_1", {"reason": "voluntary"}),
    ("2024-01-04", "license_unassigned", "lic_1", {"user_id": "usr_1", "product_id": "prd_0001",
                                                   "reason": "offboarded"}),
    ("2024-01-04", "ticket_status_changed", "tkt_0", {"status": "in_progress", "previous_status": "open"}),
    ("2024-01-05", "license_assigned", "lic_1", {"user_id": "usr_0", "product_id": "prd_0001"}),
    ("2024-01-05", "ticket_resolved", "tkt_0", {"status": "resolved", "previous_status": "in_progress"}),
    ("2024-01-05", "consumption_logged", "lic_0", _use("usr_0", "prd_0000", 45)),
    ("2024-01-05", "consumption_logged", "lic_1", _use("usr_0", "prd_0001", 10)),
)


def project(records: list[dict[str, Any]], day: str, window_days: int = 30) -> dict[str, list[dict[str, Any]]]:
    return project_operational(fold_ledger(records, day), day, window_days=window_days)


def by_id(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["_id"]: d for d in docs}


# --- known answers ------------------------------------------------------------------------------------


def test_small_world_as_of_the_offboarding_day() -> None:
    out = project(SMALL, "2024-01-04")
    users = by_id(out["users"])
    assert users["usr_1"] == {"_id": "usr_1", "user_id": "usr_1", "status": "offboarded", "active": False,
                              "hired_on": "2024-01-01", "offboarded_on": "2024-01-04",
                              "offboard_reason": "voluntary", "cost_center_id": "cc_000"}
    assert users["usr_0"]["status"] == "active"
    assert by_id(out["licenses"])["lic_1"]["status"] == "unassigned"
    assert by_id(out["licenses"])["lic_1"]["holder_user_id"] is None
    assert set(by_id(out["assignments"])) == {"lic_0"}
    assert out["entitlements"] == [{"_id": "usr_0:prd_0000", "user_id": "usr_0", "product_id": "prd_0000",
                                    "license_ids": ["lic_0"], "since": "2024-01-01"}]
    assert by_id(out["tickets"])["tkt_0"] == {
        "_id": "tkt_0", "ticket_id": "tkt_0", "user_id": "usr_0", "product_id": "prd_0000", "priority": "high",
        "status": "in_progress", "opened_on": "2024-01-02", "updated_on": "2024-01-04", "resolved_on": None}


def test_small_world_a_day_later_sees_the_reassignment_and_resolution() -> None:
    out = project(SMALL, "2024-01-05")
    assert by_id(out["assignments"])["lic_1"] == {"_id": "lic_1", "license_id": "lic_1", "user_id": "usr_0",
                                                  "product_id": "prd_0001", "assigned_on": "2024-01-05",
                                                  "holder_active": True}
    assert {e["_id"] for e in out["entitlements"]} == {"usr_0:prd_0000", "usr_0:prd_0001"}
    ticket = by_id(out["tickets"])["tkt_0"]
    assert (ticket["status"], ticket["resolved_on"]) == ("resolved", "2024-01-05")


def test_utilization_window_is_inclusive_and_trailing() -> None:
    # Window of 4 days ending 01-05 is 01-02..01-05: both uses of lic_0 count; 3 days drops 01-02.
    four = by_id(project(SMALL, "2024-01-05", window_days=4)["utilization"])["lic_0"]
    assert (four["window_start"], four["window_end"]) == ("2024-01-02", "2024-01-05")
    assert (four["active_days"], four["sessions"], four["session_minutes"], four["api_calls"]) == (2, 2, 75, 10)
    three = by_id(project(SMALL, "2024-01-05", window_days=3)["utilization"])["lic_0"]
    assert (three["active_days"], three["session_minutes"], three["last_used_on"]) == (1, 45, "2024-01-05")
    before = by_id(project(SMALL, "2024-01-04", window_days=3)["utilization"])["lic_1"]
    assert (before["active_days"], before["last_used_on"], before["holder_user_id"]) == (0, None, None)
    assert window_bounds("2024-01-05", 1) == (dt.date(2024, 1, 5), dt.date(2024, 1, 5))
    with pytest.raises(ValueError):
        window_bounds("2024-01-05", 0)


def test_nothing_before_the_day_leaks_in_from_a_later_fold() -> None:
    """A state folded further (a later day) still projects the earlier day exactly."""
    later = fold_ledger(SMALL, "2024-01-05")
    assert project_operational(later, "2024-01-04") == project(SMALL, "2024-01-04")


# --- a simulated world: agreement with the fold's query helpers ----------------------------------------


@pytest.fixture(scope="module")
def world_records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("ledger")
    generate_ledger(load_config(days=30), out)
    return load_ledger(Path(out)).records


PLAIN_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return isinstance(value, PLAIN_SCALARS)


@pytest.mark.parametrize("day", ["2024-01-10", "2024-01-30"])
def test_documents_agree_with_the_fold(world_records: list[dict[str, Any]], day: str) -> None:
    state = fold_ledger(world_records, day)
    out = project_operational(state, day, window_days=7)
    assert tuple(out) == COLLECTIONS
    for name, docs in out.items():
        ids = [d["_id"] for d in docs]
        assert ids == sorted(set(ids)), f"{name}: ids unique and sorted"
        assert all(isinstance(i, str) for i in ids)
        for doc in docs:
            bad = {k: v for k, v in doc.items() if not _plain(v)}
            assert not bad, f"{name} {doc['_id']}: not a plain value: {bad}"
        indexed = {f for fields in INDEXES[name] for f in fields}
        assert indexed <= set(docs[0]), f"{name}: indexes name fields that exist"
    users = out["users"]
    assert {u["_id"] for u in users if u["status"] == "active"} == active_users(state, day)
    assert {a["_id"]: a["user_id"] for a in out["assignments"]} == license_holders(state, day)
    assert {a["_id"] for a in out["assignments"] if a["holder_active"]} == set(assigned_licenses(state, day))
    entitled = {lid: e["user_id"] for e in out["entitlements"] for lid in e["license_ids"]}
    assert entitled == assigned_licenses(state, day)
    assert {t["_id"] for t in out["tickets"] if t["status"] != "resolved"} == open_tickets(state, day)
    # Utilization from the raw consumption records, computed independently of the projection.
    start = dt.date.fromisoformat(day) - dt.timedelta(days=6)
    end = dt.date.fromisoformat(day)
    for doc in out["utilization"]:
        rows = [r for r in state.consumption.records if r.license_id == doc["_id"] and start <= r.day <= end]
        assert doc["api_calls"] == sum(r.api_calls for r in rows)
        assert doc["session_minutes"] == sum(r.session_minutes for r in rows)
        assert doc["active_days"] == len({r.day for r in rows})
    assert sum(d["api_calls"] for d in out["utilization"]) == sum(
        r.api_calls for r in state.consumption.records if start <= r.day <= end)


def test_two_days_give_two_different_stores(world_records: list[dict[str, Any]]) -> None:
    early = project(world_records, "2024-01-10")
    late = project(world_records, "2024-01-30")
    assert len(late["users"]) > len(early["users"])
    assert diff_collections(early, late)
    assert not diff_collections(late, project(world_records, "2024-01-30"))


# --- the parity diff ------------------------------------------------------------------------------------


def test_diff_names_collection_document_and_field() -> None:
    expected = project(SMALL, "2024-01-05")
    stored = {name: [dict(d) for d in docs] for name, docs in expected.items()}
    assert diff_collections(expected, stored) == []
    by_id(stored["users"])["usr_0"]["status"] = "offboarded"
    stored["tickets"] = []
    stored["licenses"].append({"_id": "lic_9"})
    by_id(stored["users"])["usr_1"]["active"] = 0  # a server that stores booleans as numbers
    problems = diff_collections(expected, stored)
    assert "users: document usr_0 field status is 'offboarded', expected 'active'" in problems
    assert "users: document usr_1 field active is 0, expected False" in problems
    assert "tickets: document tkt_0 is missing" in problems
    assert "licenses: document lic_9 should not exist" in problems
    assert len(diff_collections(expected, {}, limit=2)) == 2


# --- database names -------------------------------------------------------------------------------------


def test_database_names_round_trip() -> None:
    assert database_name("default-s42-3f9a1c", "2024-04-27") == "default_s42_3f9a1c_20240427"
    assert parse_database_name("default_s42_3f9a1c_20240427") == ("default-s42-3f9a1c", dt.date(2024, 4, 27))
    assert parse_database_name("my_world_s7_abcdef_20240101") == ("my_world-s7-abcdef", dt.date(2024, 1, 1))
    for other in ("admin", "default_s42_3f9a1c_truth", "default_s42_3f9a1c_20241399", "x_20240101"):
        assert parse_database_name(other) is None
    with pytest.raises(OperationalStoreError, match="not a world id"):
        database_name("Default", "2024-01-01")
    with pytest.raises(OperationalStoreError, match="too long"):
        database_name("a" * 31 + "-s12345678901234567890-abcdef", "2024-01-01")


def test_world_databases_lists_only_that_worlds_days() -> None:
    class FakeClient:
        def list_database_names(self) -> list[str]:
            return ["admin", "w_s1_aaaaaa_20240102", "w_s1_aaaaaa_20240101", "w_s2_bbbbbb_20240101", "local"]

    assert world_databases(FakeClient(), "w-s1-aaaaaa") == {
        "w-s1-aaaaaa": ["w_s1_aaaaaa_20240101", "w_s1_aaaaaa_20240102"]}
    assert set(world_databases(FakeClient())) == {"w-s1-aaaaaa", "w-s2-bbbbbb"}


class _FakeStandaloneMongo:
    """Just enough of a pymongo client for `write_partition`, refusing transactions like a standalone
    MongoDB 7 (which needs a replica set for them)."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.refused = 0
        client = self

        class Coll:
            def __init__(self, db: str, name: str) -> None:
                self.db, self.name = db, name

            def _docs(self) -> list[dict[str, Any]]:
                return client.data.setdefault(self.db, {}).setdefault(self.name, [])

            def insert_many(self, docs: list[dict[str, Any]], ordered: bool = True, session: Any = None) -> None:
                if session is not None:
                    from pymongo.errors import OperationFailure

                    client.refused += 1
                    raise OperationFailure("Transaction numbers are only allowed on a replica set member or mongos",
                                           code=20)
                self._docs().extend(docs)

            def insert_one(self, doc: dict[str, Any]) -> None:
                self._docs().append(doc)

            def find_one(self, flt: dict[str, Any]) -> dict[str, Any] | None:
                return next((d for d in self._docs() if d["_id"] == flt["_id"]), None)

            def create_index(self, keys: Any) -> None:
                pass

        class Db:
            def __init__(self, name: str) -> None:
                self.name = name

            def __getitem__(self, coll: str) -> Coll:
                return Coll(self.name, coll)

            def create_collection(self, coll: str) -> None:
                client.data.setdefault(self.name, {}).setdefault(coll, [])

        self._db = Db

    def __getitem__(self, name: str) -> Any:
        return self._db(name)

    def list_database_names(self) -> list[str]:
        return list(self.data)

    def drop_database(self, name: str) -> None:
        self.data.pop(name, None)

    def start_session(self) -> Any:
        class Session:
            def __enter__(self) -> Session:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def start_transaction(self) -> Session:
                return self

        return Session()


def test_a_server_without_transactions_gets_plain_writes() -> None:
    client = _FakeStandaloneMongo()
    docs = project(SMALL, "2024-01-05")
    for day in ("2024-01-04", "2024-01-05"):
        written = write_partition(client, "w-s1-abcdef", day, docs, indexes=INDEXES, content_key={"v": 1})
        assert not written.skipped
    assert client.refused == 1  # asked once, then remembered for this client
    stored = client.data["w_s1_abcdef_20240105"]
    assert diff_collections(docs, stored) == []
    assert stored["_meta"][0]["complete"] is True and stored["_meta"][0]["counts"]["users"] == 2
    again = write_partition(client, "w-s1-abcdef", "2024-01-05", docs, indexes=INDEXES, content_key={"v": 1})
    assert again.skipped


def test_a_shared_fold_is_only_read_by_the_projection_the_parity_counts_and_the_corpus(
        world_records: list[dict[str, Any]]) -> None:
    """`world_as_of` hands one fold to the operational store, its parity check and the RAG corpus of the day:
    none of them may change it (the state after all three equals a deep copy taken before)."""
    import copy

    from churn_assets.fabric.operational import DEFAULT_WINDOW_DAYS
    from churn_assets.grounding.rag_corpus import corpus_records
    from churn_assets.orchestration.assets.common import world_as_of
    from churn_assets.world.ledger import LoadedLedger

    day = dt.date(2024, 1, 30)
    loaded = LoadedLedger(Path("ledger.jsonl"), 2, True, world_records, None)
    state = world_as_of(loaded, day)
    assert world_as_of(loaded, day) is state  # the same run's check gets the asset's fold
    assert world_as_of(LoadedLedger(Path("l"), 2, True, list(world_records), None), day) is state  # same records
    assert world_as_of(LoadedLedger(Path("l"), 2, True, world_records[:-1], None), day) is not state
    before = copy.deepcopy(state)
    project_operational(state, day, window_days=DEFAULT_WINDOW_DAYS)
    active_users(state, day)
    assigned_licenses(state, day)
    open_tickets(state, day)
    corpus_records(state, day, [])  # the records the corpus states from the fold (the chunks come from documents)
    assert state == before
