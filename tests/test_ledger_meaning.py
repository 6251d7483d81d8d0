"""The ledger's meaning check (issue 35, item 4): a ledger with a valid hash chain and an impossible event is
refused by `ledger verify`, naming the line, and by every loader; generated ledgers pass and record the check in
their manifest; the loaders require that record (no second pass per load).

The probe's ledgers are a 30-day world (seed 5) with one impossible event appended on its last day and the chain
and manifest recomputed around it, as someone writing a ledger by hand would."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from churn_assets.canonical import canonical_json
from churn_assets.cli import main
from churn_assets.seal_key import SealKey, current_key, seal_key
from churn_assets.world.config import load_config
from churn_assets.world.ledger import (
    LEDGER_FILE,
    MANIFEST_FILE,
    Event,
    LedgerError,
    LedgerManifest,
    LedgerStream,
    LedgerWriter,
    check_meaning,
    load_ledger,
    meaning_record,
    reseal_meaning,
)
from churn_assets.world.meaning import CHECK_VERSION
from churn_assets.world.simulator import generate_ledger


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("meaning") / "w30"
    generate_ledger(load_config(days=30, seed=5), out)
    return out


def _records(world: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (world / LEDGER_FILE).read_text().splitlines()]


def _write(records: list[dict[str, Any]], source: Path, out: Path, *, keep_check: bool = True) -> Path:
    """`records` re-chained into a ledger at `out`, its manifest's count and head updated; the meaning record is
    carried over from the source (a hand-written ledger claiming the old check) unless `keep_check` is False."""
    out.mkdir(parents=True, exist_ok=True)
    prev, lines = "0" * 64, []
    for seq, rec in enumerate(records):
        body = {k: v for k, v in rec.items() if k != "hash"} | {"seq": seq, "prev_hash": prev}
        digest = hashlib.sha256(canonical_json(body).encode()).hexdigest()
        lines.append(canonical_json({**body, "hash": digest}))
        prev = digest
    (out / LEDGER_FILE).write_text("\n".join(lines) + "\n")
    manifest = json.loads((source / MANIFEST_FILE).read_text())
    manifest.update(count=len(records), head_hash=prev)
    if not keep_check:
        manifest.pop("meaning_check", None)
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out


def _event(last: dict[str, Any], kind: str, entity_type: str, entity_id: str,
           payload: dict[str, Any]) -> dict[str, Any]:
    return {"at": last["at"], "kind": kind, "entity_type": entity_type, "entity_id": entity_id, "payload": payload,
            "recorded_at": last["at"] + "T23:59:59Z"}


def _first(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(r for r in records if r["kind"] == kind)


def _impossible(records: list[dict[str, Any]], case: str) -> dict[str, Any]:
    last = records[-1]
    hired = _first(records, "user_hired")["entity_id"]
    offboarded = _first(records, "user_offboarded")["entity_id"]
    lic = _first(records, "license_purchased")
    return {
        "offboarding a user never hired": _event(last, "user_offboarded", "user", "usr_9999",
                                                 {"reason": "voluntary"}),
        "a second offboarding": _event(last, "user_offboarded", "user", offboarded, {"reason": "voluntary"}),
        "a license assigned to a user never hired": _event(last, "license_assigned", "license", lic["entity_id"],
                                                           {"user_id": "usr_9999",
                                                            "product_id": lic["payload"]["product_id"]}),
        "usage of a license never bought": _event(last, "consumption_logged", "license", "lic_999999",
                                                  {"user_id": hired, "product_id": lic["payload"]["product_id"],
                                                   "sessions": 1, "session_minutes": 5, "api_calls": 1}),
        "a product of a vendor never registered": _event(last, "product_listed", "product", "prd_9999", {
            "name": "x", "vendor_id": "vnd_9999", "license_model": "per_seat", "api_access": False,
            "list_price_usd": 10.0, "activity_weight": 1.0}),
    }[case]


CASES = ("offboarding a user never hired", "a second offboarding", "a license assigned to a user never hired",
         "usage of a license never bought", "a product of a vendor never registered")


def test_a_generated_ledger_passes_and_its_manifest_records_the_check(world: Path) -> None:
    manifest = json.loads((world / MANIFEST_FILE).read_text())
    assert manifest["meaning_check"] == meaning_record(manifest["head_hash"], current_key())
    assert manifest["meaning_check"]["key_id"] == current_key().key_id and len(manifest["meaning_check"]["mac"]) == 64
    checked = check_meaning(world)
    assert checked.already and checked.count == manifest["count"] == load_ledger(world).count


@pytest.mark.parametrize("case", CASES)
def test_an_impossible_event_with_a_valid_chain_is_refused_naming_the_line(world: Path, tmp_path: Path,
                                                                            case: str) -> None:
    records = _records(world)
    bad = _write([*records, _impossible(records, case)], world, tmp_path / "bad")
    line = len(records) + 1
    with pytest.raises(LedgerError, match=rf"line {line}: impossible event: seq {line - 1}"):
        check_meaning(bad)
    got = CliRunner().invoke(main, ["ledger", "verify", str(bad)])
    assert got.exit_code == 1 and got.stderr.count("\n") == 1 and f"line {line}: impossible event" in got.stderr
    # the loaders: the manifest's record is for another head
    for args in (["ledger", "stats", str(bad)], ["tasks", "--ledger", str(bad), "--at", records[0]["at"],
                                                  "--out", str(tmp_path / "t.jsonl")]):
        refused = CliRunner().invoke(main, args)
        assert refused.exit_code == 1 and "records no passed meaning check" in refused.stderr, refused.output
        assert f"churnbench ledger verify {bad}" in refused.stderr
    assert not (tmp_path / "t.jsonl").exists()  # no task set built from it, though the bad event is after T


def test_the_loaders_require_the_record_and_ledger_verify_writes_it(world: Path, tmp_path: Path) -> None:
    records = _records(world)
    unchecked = _write(records, world, tmp_path / "unchecked", keep_check=False)  # a ledger of an older churnbench
    with pytest.raises(LedgerError, match="records no passed meaning check"):
        load_ledger(unchecked)
    assert load_ledger(unchecked, require_meaning=False).count == len(records)
    got = CliRunner().invoke(main, ["ledger", "verify", str(unchecked)])
    assert got.exit_code == 0 and "meaning (check version 1; recorded in the manifest) verified" in got.stdout
    assert load_ledger(unchecked).count == len(records)
    again = CliRunner().invoke(main, ["ledger", "verify", str(unchecked)])
    assert "recorded in the manifest before" in again.stdout
    # a record of another version is not a record of today's check
    manifest = json.loads((unchecked / MANIFEST_FILE).read_text())
    manifest["meaning_check"]["version"] = CHECK_VERSION - 1
    (unchecked / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(LedgerError, match=rf"version {CHECK_VERSION}"):
        load_ledger(unchecked)


def test_the_writer_refuses_an_impossible_event(tmp_path: Path) -> None:
    import datetime as dt

    config = load_config(days=2)
    writer = LedgerWriter(tmp_path / "w", config.data, config.world_id, config.config_hash)
    day = dt.date(2024, 1, 1)
    writer.append(Event(day, "cost_center_created", "cost_center", "cc_000",
                        {"name": "x", "business_unit": "y", "activity_weight": 1.0}))
    writer.append(Event(day, "user_hired", "user", "usr_0000", {"cost_center_id": "cc_000", "activity_weight": 1.0}))
    writer.append(Event(day, "user_offboarded", "user", "usr_0000", {"reason": "voluntary"}))
    with pytest.raises(LedgerError, match=r"line 4: impossible event: .*usr_0000 is offboarded twice"):
        writer.append(Event(day, "user_offboarded", "user", "usr_0000", {"reason": "voluntary"}))
    with pytest.raises(LedgerError, match=r"\(user_moved_cost_center usr_0001 on 2024-01-01\): user usr_0001: no such"):
        writer.append(Event(day, "user_moved_cost_center", "user", "usr_0001",
                            {"from_cost_center_id": "cc_000", "to_cost_center_id": "cc_000"}))
    manifest = writer.close()
    assert manifest.count == 3 and manifest.meaning_check == meaning_record(manifest.head_hash or "", current_key())


def test_the_manifest_round_trips_its_record() -> None:
    manifest = LedgerManifest(2, 3, "h" * 64, "2024-01-01", "2024-01-01", {},
                              meaning_check=meaning_record("h" * 64, SealKey.from_text("k")))
    assert LedgerManifest.from_dict(manifest.to_dict(), "m") == manifest
    assert "meaning_check" not in dataclasses.replace(manifest, meaning_check=None).to_dict()


def _claim(ledger: Path, record: dict[str, Any]) -> None:
    manifest = json.loads((ledger / MANIFEST_FILE).read_text())
    (ledger / MANIFEST_FILE).write_text(json.dumps({**manifest, "meaning_check": record}, indent=2) + "\n")


def test_a_forged_record_is_refused_by_every_loader(world: Path, tmp_path: Path) -> None:
    """Issue 46: the record is a MAC under the state folder's key. Typed by hand (the unkeyed form of before) or
    sealed under another folder's key, it is refused by `load_ledger`, the stream and `ledger stats`/`tasks`, which
    never say "verified" for it; `ledger verify` checks the events and seals its own record."""
    records = _records(world)
    bad = _write([*records, _impossible(records, CASES[0])], world, tmp_path / "bad")
    head = json.loads((bad / MANIFEST_FILE).read_text())["head_hash"]
    other = seal_key(tmp_path / "another-state-folder")
    forged = {
        "typed by hand": ({"version": CHECK_VERSION, "head_hash": head}, "without a seal"),
        "another folder's key": (meaning_record(head, other), f"key changed: {other.key_id}"),
        "a made-up MAC": ({**meaning_record(head, other), "key_id": current_key().key_id},
                          "does not verify under this state folder's key"),
    }
    for claim, (record, said) in forged.items():
        _claim(bad, record)
        with pytest.raises(LedgerError, match=said):
            load_ledger(bad)
        with pytest.raises(LedgerError, match=said):
            list(LedgerStream(bad))
        for args in (["ledger", "stats", str(bad)], ["tasks", "--ledger", str(bad), "--at", records[0]["at"],
                                                      "--out", str(tmp_path / "t.jsonl")]):
            refused = CliRunner().invoke(main, args)
            assert refused.exit_code == 1 and said in refused.stderr and "verified" not in refused.output, claim
        with pytest.raises(LedgerError, match="impossible event"):  # the check itself trusts no record
            check_meaning(bad)
    # under the other folder's key the sealed record is that folder's own: it loads there
    _claim(bad, meaning_record(head, other))
    assert load_ledger(bad, key=other).count == len(records) + 1


def test_a_ledger_from_another_state_folder_is_checked_again_here(world: Path, tmp_path: Path) -> None:
    theirs = _write(_records(world), world, tmp_path / "theirs", keep_check=False)
    other = seal_key(tmp_path / "another-state-folder")
    assert check_meaning(theirs, key=other).recorded
    with pytest.raises(LedgerError, match="key changed"):
        load_ledger(theirs)
    checked = check_meaning(theirs)  # this folder's owner checks the events and seals the record with its key
    assert checked.recorded and not checked.already and load_ledger(theirs).verified


def test_a_rotation_reseals_a_record_that_verifies_and_leaves_a_forged_one(world: Path, tmp_path: Path) -> None:
    records = _records(world)
    old, new = seal_key(tmp_path / "old"), seal_key(tmp_path / "new")
    good = _write(records, world, tmp_path / "good", keep_check=False)
    check_meaning(good, key=old)
    assert reseal_meaning(good, old, new) == (True, None)
    assert load_ledger(good, key=new).verified
    assert reseal_meaning(good, old, new) == (False, None)  # done already (a rotation run again)
    bad = _write([*records, _impossible(records, CASES[1])], world, tmp_path / "bad")
    _claim(bad, {"version": CHECK_VERSION, "head_hash": json.loads((bad / MANIFEST_FILE).read_text())["head_hash"]})
    done, problem = reseal_meaning(bad, old, new)
    assert not done and problem is not None and "without a seal" in problem
    with pytest.raises(LedgerError, match="without a seal"):
        load_ledger(bad, key=new)  # it gained no seal
