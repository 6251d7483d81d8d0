"""The `operational_store` asset against the real MongoDB-protocol server (nx-27017): partitions at two days
equal the fold and stay isolated, writes are idempotent and an interrupted one is redone, the parity check
passes and catches a corrupted document; the checks against the truth schema (the store, and the SaaS API of
the same day, by SQL) pass, name a corrupted document, and do not pass when there is no truth to check against.
That `worlds rm` drops a world's databases is tested with every other artefact in
tests/integration/test_worlds.py (`populate_world` materializes an operational store day)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest

from churn_assets.fabric.mongo import (
    META_COLLECTION,
    database_name,
    read_collections,
    require_complete,
)
from churn_assets.fabric.operational import COLLECTIONS, diff_collections, project_operational
from churn_assets.orchestration.materialize import MaterializationError, Session, materialize
from churn_assets.orchestration.partitions import world_day_key
from churn_assets.services import ServiceUrls, mongo_client
from churn_assets.world.fold import fold_ledger
from churn_assets.world.ledger import load_ledger

pytestmark = pytest.mark.integration

DAY_A, DAY_B = "2024-01-10", "2024-01-30"


@pytest.fixture(scope="module")
def mongo(services: ServiceUrls) -> Iterator[Any]:
    client = mongo_client(services.mongodb)
    yield client
    client.close()


@pytest.fixture(scope="module")
def records(small_world: str, session: Session) -> list[dict[str, Any]]:
    return load_ledger(session.paths.ledger_dir(small_world)).records


@pytest.fixture(scope="module")
def two_days(small_world: str, session: Session, session_defs: dg.Definitions) -> dict[str, dict[str, Any]]:
    """Both partitions materialized (asset + its blocking parity check); metadata per day."""
    runs = materialize(session, session_defs, ["operational_store"],
                       [world_day_key(small_world, DAY_A), world_day_key(small_world, DAY_B)])
    return {day: run.metadata["operational_store"] for day, run in zip((DAY_A, DAY_B), runs, strict=True)}


def stored(mongo: Any, world: str, day: str) -> dict[str, list[dict[str, Any]]]:
    return read_collections(require_complete(mongo, world, day), COLLECTIONS)


def test_partitions_at_two_days_equal_the_fold(two_days: dict[str, dict[str, Any]], mongo: Any, small_world: str,
                                               records: list[dict[str, Any]]) -> None:
    for day in (DAY_A, DAY_B):
        expected = project_operational(fold_ledger(records, day), day)
        assert diff_collections(expected, stored(mongo, small_world, day)) == []
        md = two_days[day]
        assert md["documents_per_collection"] == {c: len(expected[c]) for c in COLLECTIONS}
        assert md["database"] == database_name(small_world, day)
        assert md["dagster/row_count"] == sum(md["documents_per_collection"].values())
    a, b = stored(mongo, small_world, DAY_A), stored(mongo, small_world, DAY_B)
    assert diff_collections(a, b), "two as-of days hold different states"
    assert len(b["users"]) > len(a["users"])
    indexes = mongo[database_name(small_world, DAY_B)]["tickets"].index_information()
    assert len(indexes) >= 4  # _id + status, (product_id, status), user_id


def test_partitions_are_isolated(two_days: dict[str, dict[str, Any]], mongo: Any, small_world: str,
                                 session: Session, session_defs: dg.Definitions) -> None:
    """Deleting in one day's database leaves the other alone; the damaged day is found and rewritten."""
    before_b = stored(mongo, small_world, DAY_B)
    db_a = mongo[database_name(small_world, DAY_A)]
    db_a["users"].delete_many({})
    db_a[META_COLLECTION].delete_many({})  # as if the write had stopped half-way
    assert stored(mongo, small_world, DAY_B) == before_b
    with pytest.raises(Exception, match="was not written to the end"):
        require_complete(mongo, small_world, DAY_A)
    run = materialize(session, session_defs, ["operational_store"], [world_day_key(small_world, DAY_A)])[0]
    assert run.metadata["operational_store"]["action"].startswith("rewritten")
    assert len(stored(mongo, small_world, DAY_A)["users"]) == two_days[DAY_A]["documents_per_collection"]["users"]


def test_rematerializing_a_complete_day_changes_nothing(two_days: dict[str, dict[str, Any]], mongo: Any,
                                                       small_world: str, session: Session,
                                                       session_defs: dg.Definitions) -> None:
    run = materialize(session, session_defs, ["operational_store"], [world_day_key(small_world, DAY_B)])[0]
    assert run.metadata["operational_store"]["action"] == "unchanged (already complete)"


def test_parity_check_catches_a_corrupted_document(two_days: dict[str, dict[str, Any]], mongo: Any,
                                                   small_world: str, session: Session,
                                                   session_defs: dg.Definitions) -> None:
    db = mongo[database_name(small_world, DAY_B)]
    victim = db.users.find_one({"status": "active"})
    db.users.replace_one({"_id": victim["_id"]}, {**victim, "status": "offboarded"})
    with pytest.raises(MaterializationError) as raised:
        materialize(session, session_defs, ["operational_store"], [world_day_key(small_world, DAY_B)])
    message = str(raised.value)
    assert f"users: document {victim['_id']} field status is 'offboarded', expected 'active'" in message
    # Repair: a database without `_meta` is incomplete and rewritten by the next materialization.
    db[META_COLLECTION].delete_many({})
    materialize(session, session_defs, ["operational_store"], [world_day_key(small_world, DAY_B)])
    assert db.users.find_one({"_id": victim["_id"]})["status"] == "active"


# ---------------------------------------------------------------------------------------------------
# the checks against the truth schema (SQL, no fold): the store, and the SaaS API of the same day
# ---------------------------------------------------------------------------------------------------

STORE_TRUTH = dg.AssetCheckKey(dg.AssetKey("operational_store"), "operational_store_matches_truth")
SAAS_TRUTH = dg.AssetCheckKey(dg.AssetKey("operational_store"), "saas_api_matches_truth")


@pytest.fixture(scope="module")
def truth(small_world: str, session: Session, services: ServiceUrls) -> str:
    from churn_assets.fabric.postgres import connection
    from churn_assets.fabric.truth import load_truth

    with connection(services.warehouse) as conn:
        load_truth(conn, small_world, load_ledger(session.paths.ledger_dir(small_world)))
    return small_world


def _default_quota_left(session: Session, services: ServiceUrls, world: str) -> int:
    """What the default profile's key of `world` has left, as the API says after one call of its own."""
    import httpx

    from churn_assets.fabric.saas_client import KEY_HEADER
    from churn_assets.services import saas_api_key

    assert services.saas is not None
    answer = httpx.get(f"{services.saas}/v1/tenants/{world}/prices", params={"as_of": str(DAY_A)},
                       headers={KEY_HEADER: saas_api_key(session.paths, "default", world_id=world)}, timeout=10)
    answer.raise_for_status()
    return int(answer.headers["X-RateLimit-Remaining"])


def test_the_truth_checks_pass_and_name_a_corrupted_document(two_days: dict[str, dict[str, Any]], truth: str,
                                                             mongo: Any, session: Session,
                                                             session_defs: dg.Definitions,
                                                             services: ServiceUrls) -> None:
    from churn_assets.orchestration.materialize import run_checks

    key = str(world_day_key(truth, DAY_A))
    before = _default_quota_left(session, services, truth)
    found = {e.check_name: e for e in run_checks(session, session_defs, [STORE_TRUTH, SAAS_TRUTH], key)}
    assert found[STORE_TRUTH.name].passed, found[STORE_TRUTH.name].description
    assert found[SAAS_TRUTH.name].passed, found[SAAS_TRUTH.name].description
    assert found[SAAS_TRUTH.name].metadata["saas_calls"].value > 40  # prices, tickets, every product, users
    # ... on a key of its own: the evaluations' default key lost only this probe's own call (it refills meanwhile)
    assert _default_quota_left(session, services, truth) >= before - 1

    db = mongo[database_name(truth, DAY_A)]
    victim = db.licenses.find_one({"status": "assigned"})
    db.licenses.update_one({"_id": victim["_id"]}, {"$set": {"holder_user_id": "usr_999999"}})
    try:
        [evaluation] = run_checks(session, session_defs, [STORE_TRUTH], key)
        assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
        assert (f"licenses: document {victim['_id']} field holder_user_id is 'usr_999999', expected "
                f"{victim['holder_user_id']!r}") in evaluation.description
    finally:
        db[META_COLLECTION].delete_many({})  # incomplete: the next materialization rewrites the day
        materialize(session, session_defs, ["operational_store"], [world_day_key(truth, DAY_A)])
    [again] = run_checks(session, session_defs, [STORE_TRUTH], key)
    assert again.passed


def test_a_truth_check_without_a_truth_layer_is_not_a_pass(session: Session) -> None:
    import datetime as dt

    from churn_assets.orchestration.assets.truth_parity import truth_parity
    from churn_assets.orchestration.resources import StateResource

    result = truth_parity(StateResource(state_dir=str(session.paths.root)), "default-s1-000000",
                          dt.date(2024, 1, 10), "nothing", lambda conn, truth: [])
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert result.description.startswith("not checked: world default-s1-000000 has no truth layer")
