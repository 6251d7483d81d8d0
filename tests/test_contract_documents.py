"""Contract documents without Dagster: facts from the fold, Markdown and PDF rendering, parsing back,
the atomic day store and its hash manifest, and the parity check (with tampered documents)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pypdf
import pytest
from ledger_records import make_ledger

from churn_assets.world.config import load_config
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger
from contracts.build import build_day
from contracts.facts import ContractFacts, ProductRef, TermFacts, contract_facts_as_of
from contracts.parity import check_parity
from contracts.parse import ContractParseError, parse_contract_markdown, parse_status, parse_summary
from contracts.render import render_contract, render_markdown, render_pdf, status_line
from contracts.store import DocumentStoreError, compare_days, read_day, stored_days, write_day

D = dt.date.fromisoformat
WORLD = "test-s1-000000"


def _vendor(name: str, tier: str) -> dict[str, Any]:
    return {"name": name, "tier": tier, "activity_weight": 1.0}


def _product(name: str, vendor_id: str) -> dict[str, Any]:
    return {"name": name, "vendor_id": vendor_id, "license_model": "per_seat", "api_access": False,
            "list_price_usd": 30.0, "activity_weight": 1.0}


def _signed(vendor_id: str, term: int, signed: str, effective: str, expires: str, value: float, seats: int,
            auto: bool, notice: int) -> dict[str, Any]:
    return {"vendor_id": vendor_id, "term_months": term, "signed_on": signed, "effective_on": effective,
            "expires_on": expires, "annual_value_usd": value, "committed_seats": seats, "auto_renew": auto,
            "renewal_notice_days": notice, "activity_weight": 1.0}


# Two vendors (one with a pipe in its name, which table cells must escape), three products, a renewal on
# 01-05, an expiry on 01-10, a new contract signed 01-12 that takes effect 01-20, a vendor rename on 01-15,
# and events of other classes that documents must ignore.
LEDGER = make_ledger(
    ("2024-01-01", "vendor_registered", "vnd_000", _vendor("Acme|Soft", "strategic")),
    ("2024-01-01", "vendor_registered", "vnd_001", _vendor("Borealis", "standard")),
    ("2024-01-01", "product_listed", "prd_0000", _product("Acme Analytics", "vnd_000")),
    ("2024-01-01", "product_listed", "prd_0001", _product("Acme Vault", "vnd_000")),
    ("2024-01-01", "product_listed", "prd_0002", _product("Borealis CRM", "vnd_001")),
    ("2024-01-01", "contract_signed", "ctr_0000",
     _signed("vnd_000", 12, "2023-01-20", "2023-02-01", "2024-01-31", 12000.5, 10, True, 30)),
    ("2024-01-01", "contract_signed", "ctr_0001",
     _signed("vnd_001", 12, "2023-01-05", "2023-01-10", "2024-01-09", 5000.0, 5, False, 60)),
    ("2024-01-01", "cost_center_created", "cc_00", {"name": "Core", "business_unit": "Engineering",
                                                    "activity_weight": 1.0}),
    ("2024-01-02", "user_hired", "usr_0000", {"cost_center_id": "cc_00", "activity_weight": 1.0}),
    ("2024-01-05", "contract_renewed", "ctr_0000",
     {"term_months": 24, "effective_on": "2024-02-01", "expires_on": "2026-01-31", "annual_value_usd": 13000.0,
      "committed_seats": 12, "previous_expires_on": "2024-01-31"}),
    ("2024-01-05", "price_changed", "prd_0000", {"list_price_usd": 33.0, "previous_list_price_usd": 30.0,
                                                 "reason": "list"}),
    ("2024-01-10", "contract_expired", "ctr_0001", {"expired_on": "2024-01-10"}),
    ("2024-01-12", "contract_signed", "ctr_0002",
     _signed("vnd_001", 12, "2024-01-12", "2024-01-20", "2025-01-19", 7000.0, 8, True, 90)),
    ("2024-01-15", "vendor_changed", "vnd_001", {"change": "renamed", "name": "Borealis Cloud", "tier": "standard",
                                                 "previous_name": "Borealis", "previous_tier": "standard"}),
)


def facts_on(day: str) -> dict[str, ContractFacts]:
    return {f.contract_id: f for f in contract_facts_as_of(LEDGER, day)}


def facts_on_list(day: str) -> list[ContractFacts]:
    return contract_facts_as_of(LEDGER, day)


def changed_lines(a: str, b: str) -> list[tuple[str, str]]:
    la, lb = a.splitlines(), b.splitlines()
    assert len(la) == len(lb)
    return [(x, y) for x, y in zip(la, lb, strict=True) if x != y]


# ---------------------------------------------------------------------------------------------------
# facts
# ---------------------------------------------------------------------------------------------------


def test_facts_come_from_the_fold_as_of_the_day() -> None:
    before = facts_on("2024-01-04")
    assert sorted(before) == ["ctr_0000", "ctr_0001"]
    c = before["ctr_0000"]
    assert (c.vendor_id, c.vendor_name, c.vendor_tier) == ("vnd_000", "Acme|Soft", "strategic")
    assert c.products == (ProductRef("prd_0000", "Acme Analytics"), ProductRef("prd_0001", "Acme Vault"))
    assert (c.signed_on, c.auto_renew, c.renewal_notice_days) == (D("2023-01-20"), True, 30)
    assert c.terms == (TermFacts("signed", D("2024-01-01"), 12, D("2023-02-01"), D("2024-01-31"), 12000.5, 10),)
    assert (c.status, c.expired_on, c.renewals) == ("active", None, ())

    after = facts_on("2024-01-05")["ctr_0000"]
    assert after.renewals == (TermFacts("renewed", D("2024-01-05"), 24, D("2024-02-01"), D("2026-01-31"),
                                        13000.0, 12),)
    assert after.current_term.expires_on == D("2026-01-31")
    assert after.recorded_on == D("2024-01-05")


def test_statuses_follow_the_dates() -> None:
    assert facts_on("2024-01-09")["ctr_0001"].status == "active"
    expired = facts_on("2024-01-10")["ctr_0001"]
    assert (expired.status, expired.expired_on) == ("expired", D("2024-01-10"))
    assert "ctr_0002" not in facts_on("2024-01-11")  # not recorded yet
    assert facts_on("2024-01-12")["ctr_0002"].status == "pending"
    assert facts_on("2024-01-20")["ctr_0002"].status == "active"


def test_vendor_name_is_the_one_of_the_day() -> None:
    assert facts_on("2024-01-14")["ctr_0002"].vendor_name == "Borealis"
    assert facts_on("2024-01-15")["ctr_0002"].vendor_name == "Borealis Cloud"


# ---------------------------------------------------------------------------------------------------
# Markdown and parsing
# ---------------------------------------------------------------------------------------------------


def test_markdown_states_every_fact_and_no_rendering_day() -> None:
    c = facts_on("2024-01-05")["ctr_0000"]
    md = render_markdown(c)
    for text in ("Acme\\|Soft", "vnd_000", "strategic", "2023-01-20", "| Expires on | 2026-01-31 |",
                 "| Term | 24 months |", "USD 13,000.00", "| Committed seats | 12 |", "| Auto-renewal | Yes |",
                 "| Renewal notice | 30 days |", "renews automatically", "Renewal recorded on 2024-01-05",
                 "| 2 | Renewed | 2024-01-05 | 2024-02-01 | 2026-01-31 | 24 | 13,000.00 | 12 |",
                 "| prd_0001 | Acme Vault |", "**Status:** Active."):
        assert text in md, text
    # The document's day is not in it: unchanged facts give unchanged bytes on every later day.
    assert "2024-01-06" not in md and "2024-01-05" in md
    assert render_markdown(facts_on("2024-01-09")["ctr_0000"]) == md
    assert 700 < len(md.split()) < 1400  # a realistic document, a page or two


def test_markdown_round_trips_through_the_parser() -> None:
    for day in range(1, 21):
        for facts in contract_facts_as_of(LEDGER, dt.date(2024, 1, day)):
            assert parse_contract_markdown(render_markdown(facts)) == facts, (day, facts.contract_id)


def test_facts_the_ledger_does_not_carry_round_trip_as_not_stated() -> None:
    bare = ContractFacts(
        contract_id="ctr_0009", vendor_id=None, vendor_name=None, vendor_tier=None, products=(),
        signed_on=D("2024-01-03"), auto_renew=None, renewal_notice_days=None,
        terms=(TermFacts("signed", D("2024-01-03"), 12, D("2024-01-03"), D("2025-01-02"), None, None),),
        expired_on=None, status="active")
    md = render_markdown(bare)
    assert "not stated" in md and "No products of the Vendor are listed" in md
    assert parse_contract_markdown(md) == bare


def test_the_parser_refuses_a_document_that_contradicts_itself() -> None:
    md = render_markdown(facts_on("2024-01-05")["ctr_0000"])
    with pytest.raises(ContractParseError, match="Expires on"):
        parse_contract_markdown(md.replace("| Expires on | 2026-01-31 |", "| Expires on | 2026-02-28 |"))
    with pytest.raises(ContractParseError, match="status"):
        parse_contract_markdown(md.replace("**Status:** ", "Status: "))
    with pytest.raises(ContractParseError, match="Schedule B"):
        parse_contract_markdown(md.split("## Schedule B")[0])


def test_lenient_parsers_read_a_chunk() -> None:
    md = render_markdown(facts_on("2024-01-05")["ctr_0000"])
    chunk = "\n".join(line for line in md.splitlines() if line.startswith("| Vendor") or "Expires on |" in line)
    assert parse_summary(chunk) == {"Vendor": "Acme|Soft", "Vendor ID": "vnd_000", "Vendor tier": "strategic",
                                    "Expires on": "2026-01-31"}
    assert parse_summary(md)["Annual value"] == "USD 13,000.00"
    assert parse_status(md) == "active"


def test_an_expiry_flips_the_status_line() -> None:
    active = render_markdown(facts_on("2024-01-09")["ctr_0001"])
    expired = render_markdown(facts_on("2024-01-10")["ctr_0001"])
    assert changed_lines(active, expired) == [
        ("**Status:** Active. This status line is informative only: the status of the contract on any given day "
         "follows from the term dates in Schedule B.",
         "**Status:** Expired. The last term ended on 2024-01-09. The expiry was recorded on 2024-01-10. This "
         "status line is informative only: the status of the contract on any given day follows from the term "
         "dates in Schedule B."),
        ("| Expiry recorded on | none |", "| Expiry recorded on | 2024-01-10 |"),
    ]
    assert parse_status(expired) == "expired"


def test_status_line_wording() -> None:
    pending = facts_on("2024-01-12")["ctr_0002"]
    assert status_line(pending) == "Pending. The first term takes effect on 2024-01-20."
    # Past the last term before the ledger records the expiry: expired by the dates, no recorded day yet.
    unrecorded = dataclasses.replace(facts_on("2024-01-09")["ctr_0001"], status="expired")
    assert status_line(unrecorded) == "Expired. The last term ended on 2024-01-09."


# ---------------------------------------------------------------------------------------------------
# PDF
# ---------------------------------------------------------------------------------------------------


def test_pdf_text_is_extractable_and_carries_the_facts() -> None:
    c = facts_on("2024-01-10")["ctr_0001"]
    reader = pypdf.PdfReader(io.BytesIO(render_pdf(c)))
    text = "\n".join(page.extract_text() for page in reader.pages)
    assert "Borealis" in text
    assert "Expires on 2024-01-09" in text
    assert "Expired. The last term ended on 2024-01-09." in text
    assert "USD 5,000.00" in text
    assert 1 <= len(reader.pages) <= 2
    meta = reader.metadata
    assert meta is not None
    assert meta.producer == "churnbench contracts"
    assert meta.creation_date is not None and meta.creation_date.date() == D("2024-01-10")


def test_rendering_is_deterministic() -> None:
    c = facts_on("2024-01-05")["ctr_0000"]
    first, second = render_contract(c), render_contract(c)
    assert first.markdown == second.markdown
    assert first.pdf == second.pdf


# ---------------------------------------------------------------------------------------------------
# the store
# ---------------------------------------------------------------------------------------------------


def test_a_day_is_written_with_its_manifest_and_read_back(tmp_path: Path) -> None:
    built = build_day(LEDGER, WORLD, D("2024-01-05"), tmp_path)
    assert built.path == tmp_path / "2024-01-05"
    assert sorted(p.name for p in built.path.iterdir()) == [
        "ctr_0000.md", "ctr_0000.pdf", "ctr_0001.md", "ctr_0001.pdf", "manifest.json"]
    stored = read_day(built.path)
    assert stored.manifest == built.manifest
    assert stored.manifest.world_id == WORLD and stored.manifest.day == D("2024-01-05")
    assert stored.verify() == []
    assert parse_contract_markdown(stored.markdown("ctr_0000")) == facts_on("2024-01-05")["ctr_0000"]
    assert stored_days(tmp_path) == [D("2024-01-05")]
    manifest = json.loads((built.path / "manifest.json").read_text())
    assert manifest["count"] == 2 and set(manifest["documents"]["ctr_0000"]) == {"markdown_sha256", "pdf_sha256"}


def test_a_renewal_changes_only_that_contracts_document(tmp_path: Path) -> None:
    before = build_day(LEDGER, WORLD, D("2024-01-04"), tmp_path)
    after = build_day(LEDGER, WORLD, D("2024-01-05"), tmp_path)
    assert after.changes.touched == ("ctr_0000",)
    assert compare_days(before.manifest, after.manifest).changed == ("ctr_0000",)
    assert compare_days(before.manifest, after.manifest).unchanged == 1


def test_day_to_day_changes(tmp_path: Path) -> None:
    changes = {day: build_day(LEDGER, WORLD, D(day), tmp_path).changes
               for day in ("2024-01-01", "2024-01-06", "2024-01-10", "2024-01-12", "2024-01-15", "2024-01-20")}
    assert changes["2024-01-01"].added == ("ctr_0000", "ctr_0001")
    assert changes["2024-01-06"].touched == ()  # nothing happened to contracts
    assert changes["2024-01-10"].changed == ("ctr_0001",)  # the expiry
    assert changes["2024-01-12"].added == ("ctr_0002",)
    assert changes["2024-01-15"].changed == ("ctr_0001", "ctr_0002")  # their vendor's rename
    assert changes["2024-01-20"].changed == ("ctr_0002",)  # pending -> active, with no ledger event


def test_same_world_and_day_give_the_same_bytes_in_another_process(tmp_path: Path) -> None:
    for facts in facts_on_list("2024-01-20"):
        render_contract(facts)  # this process renders with warm caches, the other one from cold
    here = build_day(LEDGER, WORLD, D("2024-01-15"), tmp_path / "a")
    ledger_file = tmp_path / "ledger.json"
    ledger_file.write_text(json.dumps(LEDGER))
    code = ("import json, sys, datetime as dt; from pathlib import Path; from contracts.build import build_day; "
            "build_day(json.loads(Path(sys.argv[1]).read_text()), sys.argv[2], dt.date(2024, 1, 15), "
            "Path(sys.argv[3]))")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "TZ": "Pacific/Kiritimati"}
    subprocess.run([sys.executable, "-c", code, str(ledger_file), WORLD, str(tmp_path / "b")], check=True, env=env)
    there = tmp_path / "b" / "2024-01-15"
    for path in sorted(here.path.iterdir()):
        assert (there / path.name).read_bytes() == path.read_bytes(), path.name


def test_rewriting_a_day_replaces_it_whole(tmp_path: Path) -> None:
    target = tmp_path / "2024-01-05"
    target.mkdir()
    (target / "stale.md").write_text("from an older run")
    build_day(LEDGER, WORLD, D("2024-01-05"), tmp_path)
    assert not (target / "stale.md").exists()
    # No staging folder left (the day's lock file stays: lock files are never removed, see churn_assets/files.py).
    assert sorted(p.name for p in tmp_path.iterdir()) == [".2024-01-05.lock", "2024-01-05"]


def test_a_crash_while_writing_never_leaves_a_half_written_day(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    docs = [render_contract(f) for f in contract_facts_as_of(LEDGER, "2024-01-05")]
    target = tmp_path / "2024-01-05"
    good = write_day(target, WORLD, D("2024-01-05"), docs)

    real_write_bytes = Path.write_bytes
    calls = {"n": 0}

    def crash_on_third_file(self: Path, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real_write_bytes(self, data)

    monkeypatch.setattr(Path, "write_bytes", crash_on_third_file)
    with pytest.raises(OSError, match="disk full"):
        # Rewriting a complete day with other documents (identical ones are left as they are).
        write_day(target, WORLD, D("2024-01-05"), [dataclasses.replace(docs[0], markdown=b"changed"), *docs[1:]])
    calls["n"] = 0
    with pytest.raises(OSError, match="disk full"):
        write_day(tmp_path / "2024-01-06", WORLD, D("2024-01-06"), docs)  # writing a new day
    monkeypatch.undo()
    assert read_day(target).manifest == good and read_day(target).verify() == []  # untouched
    assert not (tmp_path / "2024-01-06").exists()  # absent, not half there
    assert stored_days(tmp_path) == [D("2024-01-05")]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.suffix != ".lock"] == []


def test_leftovers_of_a_dead_writer_are_cleared(tmp_path: Path) -> None:
    leftover = tmp_path / ".2024-01-05.tmp-999999999-deadbeef"
    leftover.mkdir()
    (leftover / "ctr_0000.md").write_text("half")
    build_day(LEDGER, WORLD, D("2024-01-05"), tmp_path)
    assert not leftover.exists()


def test_reading_a_missing_day_says_so(tmp_path: Path) -> None:
    (tmp_path / "2024-01-05").mkdir()  # a folder without a manifest is not a complete day
    with pytest.raises(DocumentStoreError, match="not materialized"):
        read_day(tmp_path / "2024-01-05")
    assert stored_days(tmp_path) == []


def test_contract_ids_must_be_file_names(tmp_path: Path) -> None:
    doc = render_contract(facts_on("2024-01-05")["ctr_0000"])
    with pytest.raises(DocumentStoreError, match="file name"):
        write_day(tmp_path / "d", WORLD, D("2024-01-05"), [dataclasses.replace(doc, contract_id="../x")])
    with pytest.raises(DocumentStoreError, match="share"):
        write_day(tmp_path / "d", WORLD, D("2024-01-05"), [doc, doc])


# ---------------------------------------------------------------------------------------------------
# parity
# ---------------------------------------------------------------------------------------------------


def test_a_fresh_day_is_in_parity(tmp_path: Path) -> None:
    built = build_day(LEDGER, WORLD, D("2024-01-15"), tmp_path)
    assert check_parity(read_day(built.path), facts_on_list("2024-01-15"), D("2024-01-15")) == []


def test_a_tampered_markdown_fails_parity_naming_the_contract_and_the_day(tmp_path: Path) -> None:
    built = build_day(LEDGER, WORLD, D("2024-01-05"), tmp_path)
    md = built.path / "ctr_0000.md"
    # A consistent edit (the parser cannot tell from the document alone): the fold can.
    md.write_text(md.read_text().replace("| Vendor tier | strategic |", "| Vendor tier | preferred |"))
    problems = [str(p) for p in check_parity(read_day(built.path), facts_on_list("2024-01-05"), D("2024-01-05"))]
    assert problems == [
        "contract ctr_0000 on 2024-01-05: the Markdown states vendor_tier = 'preferred', the ledger 'strategic'",
        "contract ctr_0000 on 2024-01-05: ctr_0000.md differs from the manifest's hash",
    ]


def test_parity_reports_unreadable_missing_and_extra_documents(tmp_path: Path) -> None:
    built = build_day(LEDGER, WORLD, D("2024-01-12"), tmp_path)
    (built.path / "ctr_0001.md").write_text("# not a contract\n")
    (built.path / "ctr_0002.pdf").unlink()
    (built.path / "notes.txt").write_text("hello")
    problems = [str(p) for p in check_parity(read_day(built.path), facts_on_list("2024-01-12"), D("2024-01-12"))]
    assert any(p.startswith("contract ctr_0001 on 2024-01-12: the Markdown cannot be read back") for p in problems)
    assert "contract ctr_0002 on 2024-01-12: ctr_0002.pdf is missing" in problems
    assert "documents on 2024-01-12: notes.txt is not listed in the manifest" in problems
    # Documents for another day's contract set: a contract missing from the folder is named too.
    problems = [str(p) for p in check_parity(read_day(built.path), facts_on_list("2024-01-12")[:2],
                                             D("2024-01-12"))]
    assert "contract ctr_0002 on 2024-01-12: a document for a contract the ledger does not have by this day" \
        in problems


# ---------------------------------------------------------------------------------------------------
# a simulated world
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world_30(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("ledger30")
    generate_ledger(load_config(days=30), out)
    return load_ledger(out).records


def test_in_a_simulated_world_a_renewal_changes_only_its_contract(world_30: list[dict[str, Any]],
                                                                  tmp_path: Path) -> None:
    renewals: dict[str, set[str]] = {}
    for r in world_30:
        if r["kind"] == "contract_renewed":
            renewals.setdefault(r["at"], set()).add(r["entity_id"])
    assert renewals, "the 30-day default world has renewals"
    for day, renewed in sorted(renewals.items()):
        d = D(day)
        prev = {f.contract_id: f for f in contract_facts_as_of(world_30, d - dt.timedelta(days=1))}
        now = {f.contract_id: f for f in contract_facts_as_of(world_30, d)}
        others = {c for c in now if c not in renewed and (c not in prev or prev[c] != now[c])}
        if others:
            continue  # other contracts changed that day too (a status flip, a signing): not a clean case
        before = build_day(world_30, "default-s42-000000", d - dt.timedelta(days=1), tmp_path)
        after = build_day(world_30, "default-s42-000000", d, tmp_path)
        assert after.changes.touched == tuple(sorted(renewed))
        assert compare_days(before.manifest, after.manifest).touched == tuple(sorted(renewed))
        assert after.changes.unchanged == len(now) - len(renewed) > 50
        assert check_parity(read_day(after.path), list(now.values()), d) == []
        return  # one clean renewal day is the proof; each costs two documents partitions
    pytest.fail("no day in the 30-day world on which only renewals changed documents")


def test_a_documents_partition_of_the_default_world(world_30: list[dict[str, Any]], tmp_path: Path) -> None:
    built = build_day(world_30, "default-s42-000000", D("2024-01-30"), tmp_path)
    assert len(built.facts) >= 60
    assert built.status_counts["active"] >= 55
    for facts in built.facts[:5]:
        text = "".join(p.extract_text() for p in pypdf.PdfReader(built.path / f"{facts.contract_id}.pdf").pages)
        assert facts.vendor_name is not None and facts.vendor_name in text
        assert f"Expires on {facts.current_term.expires_on.isoformat()}" in text
