"""The `contract_documents` asset in the session's Dagster instance: a partition's files, metadata and
passing parity check; a renewal seen end to end; a tampered document failing the check (against the fold, and
against the truth schema by SQL); `worlds rm`."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import dagster as dg
import pytest

from churn_assets.orchestration.assets.documents import contract_documents, contract_documents_parity
from churn_assets.orchestration.materialize import MaterializationError, Session, materialize
from churn_assets.orchestration.partitions import world_day_key
from churn_assets.orchestration.world_registry import add_world, is_registered, remove_world, world_artefacts
from churn_assets.world.config import load_config
from churn_assets.world.ledger import load_ledger
from contracts.facts import contract_facts_as_of
from contracts.parse import parse_contract_markdown
from contracts.store import compare_days, read_day

pytestmark = pytest.mark.integration

DAYS = 30  # (docs/rules.md, "Test budget")
PARITY_KEY = dg.AssetCheckKey(dg.AssetKey("contract_documents"), "contract_documents_parity")
TRUTH_KEY = dg.AssetCheckKey(dg.AssetKey("contract_documents"), "contract_documents_match_truth")


def load_truth_of(session: Session, world_id: str) -> None:
    """The world's ledger in its truth schema (what the SQL check reads; idempotent)."""
    from churn_assets.fabric.postgres import connection
    from churn_assets.fabric.truth import load_truth

    with connection(session.urls.warehouse) as conn:
        load_truth(conn, world_id, load_ledger(session.paths.ledger_dir(world_id)))


def run_truth_check(session: Session, session_defs: dg.Definitions, key: str
                    ) -> dg.AssetCheckEvaluation:
    from churn_assets.orchestration.materialize import run_checks

    [evaluation] = run_checks(session, session_defs, [TRUTH_KEY], str(key))
    return evaluation


def first_renewal_day(session: Session, world_id: str) -> tuple[dt.date, set[str]]:
    renewals: dict[str, set[str]] = {}
    for r in load_ledger(session.paths.ledger_dir(world_id)).records:
        if r["kind"] == "contract_renewed":
            renewals.setdefault(r["at"], set()).add(r["entity_id"])
    day = min(renewals)
    return dt.date.fromisoformat(day), renewals[day]


def latest_parity(instance: dg.DagsterInstance, partition: str) -> dg.AssetCheckEvaluation:
    for record in instance.event_log_storage.get_asset_check_execution_history(PARITY_KEY, limit=50):
        if record.partition == partition and record.event is not None and record.event.dagster_event:
            return record.event.dagster_event.event_specific_data
    raise AssertionError(f"the parity check never ran for {partition}")


def run_parity_check(session: Session, session_defs: dg.Definitions, key: str
                     ) -> dg.AssetCheckEvaluation:
    """Run only the check on what is on disk (re-materializing would rewrite the documents).

    Dagster refuses a partition key for a run that selects checks alone, so the run carries the
    partition as a tag, which is where the check's context reads it from.
    """
    defs = dg.Definitions(
        assets=[contract_documents], asset_checks=[contract_documents_parity],
        resources=session_defs.resources,
        jobs=[dg.define_asset_job("parity_only", selection=dg.AssetSelection.checks(contract_documents_parity))],
    )
    result = defs.resolve_job_def("parity_only").execute_in_process(
        instance=session.instance, tags={"dagster/partition": str(key)}, raise_on_error=False)
    [evaluation] = result.get_asset_check_evaluations()
    return evaluation


@pytest.fixture
def scratch_world(session: Session, session_defs: dg.Definitions) -> Iterator[str]:
    """A registered 30-day world of its own (seed 707) with its ledger, removed again afterwards."""
    config = load_config(days=DAYS, seed=707)
    add_world(session.paths, session.instance, config)
    materialize(session, session_defs, ["ledger"], [config.world_id])
    yield config.world_id
    if is_registered(session.instance, config.world_id) or world_artefacts(
            session.paths, session.instance, config.world_id):
        remove_world(session.paths, session.instance, config.world_id)


# ---------------------------------------------------------------------------------------------------


def test_a_partition_writes_every_contract_and_passes_its_check(session: Session, session_defs: dg.Definitions,
                                                                small_world: str) -> None:
    day = dt.date(2024, 1, 20)
    key = world_day_key(small_world, day)
    [run] = materialize(session, session_defs, ["contract_documents"], [key])
    md = run.metadata["contract_documents"]

    folder = session.paths.world_dir(small_world) / "contracts" / "2024-01-20"
    assert md["path"] == str(folder) == str(session.paths.contracts_root(small_world) / "2024-01-20")
    stored = read_day(folder)
    expected = contract_facts_as_of(load_ledger(session.paths.ledger_dir(small_world)).records, day)
    assert md["documents"] == md["dagster/row_count"] == len(expected) == len(stored.contract_ids) >= 60
    assert sum(md["statuses"].values()) == len(expected)
    assert md["manifest_sha256"] == stored.manifest.sha256
    assert stored.manifest.world_id == small_world and stored.verify() == []
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{c}.md" for c in stored.contract_ids] + [f"{c}.pdf" for c in stored.contract_ids] + ["manifest.json"])
    for facts in expected:
        assert parse_contract_markdown(stored.markdown(facts.contract_id)) == facts
    assert latest_parity(session.instance, str(key)).passed
    assert json.loads((folder / "manifest.json").read_text())["day"] == "2024-01-20"


def test_a_renewal_changes_only_its_document(session: Session, session_defs: dg.Definitions,
                                             small_world: str) -> None:
    day, renewed = first_renewal_day(session, small_world)
    before, after = day - dt.timedelta(days=1), day
    runs = materialize(session, session_defs, ["contract_documents"],
                       [world_day_key(small_world, before), world_day_key(small_world, after)])
    changes = runs[1].metadata["contract_documents"]["changes"]
    root = session.paths.contracts_root(small_world)
    on_disk = compare_days(read_day(root / before.isoformat()).manifest, read_day(root / after.isoformat()).manifest)
    assert set(on_disk.touched) == renewed  # by the hashes of both files of every document
    assert changes["changed"] == sorted(renewed) and changes["added"] == changes["removed"] == []


def test_the_same_partition_gives_the_same_bytes(session: Session, session_defs: dg.Definitions,
                                                 small_world: str) -> None:
    key = world_day_key(small_world, "2024-01-10")
    folder = session.paths.contracts_root(small_world) / "2024-01-10"
    materialize(session, session_defs, ["contract_documents"], [key])
    first = {p.name: p.read_bytes() for p in folder.iterdir()}
    materialize(session, session_defs, ["contract_documents"], [key])
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == first


def test_a_tampered_document_fails_the_parity_check(session: Session, session_defs: dg.Definitions,
                                                    small_world: str) -> None:
    day = dt.date(2024, 1, 15)
    key = world_day_key(small_world, day)
    materialize(session, session_defs, ["contract_documents"], [key])
    folder = session.paths.contracts_root(small_world) / day.isoformat()
    victim = sorted(read_day(folder).contract_ids)[7]
    path = folder / f"{victim}.md"
    text = path.read_text()
    seats = next(line for line in text.splitlines() if line.startswith("| Committed seats |"))
    load_truth_of(session, small_world)
    assert run_truth_check(session, session_defs, key).passed  # before the edit
    path.write_text(text.replace(seats, "| Committed seats | 9999 |"))

    evaluation = run_parity_check(session, session_defs, key)
    assert not evaluation.passed
    assert evaluation.description is not None
    assert f"contract {victim} on 2024-01-15" in evaluation.description
    problems = evaluation.metadata["problems"].value
    assert problems and all(p.startswith(f"contract {victim} on 2024-01-15: ") for p in problems)
    # The same edit against the truth schema by SQL (no fold): named by contract and fact.
    by_sql = run_truth_check(session, session_defs, key)
    assert not by_sql.passed and by_sql.severity == dg.AssetCheckSeverity.ERROR
    named = by_sql.metadata["problems"].value
    assert named and all(p.startswith(f"contract {victim} on 2024-01-15: ") for p in named)
    assert any("committed_seats=9999" in p or "9999" in p for p in named)

    materialize(session, session_defs, ["contract_documents"], [key])  # rewrites the day, check passes
    assert latest_parity(session.instance, str(key)).passed
    assert run_truth_check(session, session_defs, key).passed


def test_worlds_rm_removes_the_documents(session: Session, session_defs: dg.Definitions,
                                         scratch_world: str) -> None:
    materialize(session, session_defs, ["contract_documents"], [world_day_key(scratch_world, "2024-01-05")])
    root = session.paths.contracts_root(scratch_world)
    assert (root / "2024-01-05" / "manifest.json").exists()
    assert "contract documents" in world_artefacts(session.paths, session.instance, scratch_world)

    removed = remove_world(session.paths, session.instance, scratch_world)
    assert "contract documents" in removed
    assert not root.exists() and world_artefacts(session.paths, session.instance, scratch_world) == []


def test_a_world_without_a_ledger_fails_clearly(session: Session, session_defs: dg.Definitions) -> None:
    config = load_config(days=DAYS, seed=708)
    add_world(session.paths, session.instance, config)
    try:
        with pytest.raises(MaterializationError, match=f"world {config.world_id} has no ledger"):
            materialize(session, session_defs, ["contract_documents"], [world_day_key(config.world_id, "2024-01-02")])
        assert not session.paths.contracts_root(config.world_id).exists()
    finally:
        remove_world(session.paths, session.instance, config.world_id)
