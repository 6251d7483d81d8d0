"""Ledger format 2: writing, verifying, and every refusal of the loader naming its line."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from churn_assets.canonical import canonical_json
from churn_assets.world.config import load_config
from churn_assets.world.ledger import (
    GENESIS_HASH,
    LedgerError,
    load_ledger,
)
from churn_assets.world.simulator import generate_ledger


@pytest.fixture(scope="module")
def small_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ledger") / "w"
    generate_ledger(load_config(days=10), out)
    return out


@pytest.fixture
def ledger_copy(small_ledger: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "w"
    shutil.copytree(small_ledger, dst)
    return dst


def _lines(d: Path) -> list[str]:
    return (d / "ledger.jsonl").read_text().splitlines(keepends=True)


def _write(d: Path, lines: list[str]) -> None:
    (d / "ledger.jsonl").write_text("".join(lines))


def _rehash_from(lines: list[str], start: int) -> list[str]:
    """Re-chain every line from `start` on, as a forger who knows the format would."""
    out = list(lines)
    prev = json.loads(out[start - 1])["hash"] if start > 0 else GENESIS_HASH
    for i in range(start, len(out)):
        rec = json.loads(out[i])
        rec.pop("hash")
        rec["prev_hash"] = prev
        import hashlib

        rec["hash"] = hashlib.sha256(canonical_json(rec).encode()).hexdigest()
        prev = rec["hash"]
        out[i] = canonical_json(rec) + "\n"
    return out


def test_written_ledger_verifies_and_matches_manifest(small_ledger: Path) -> None:
    loaded = load_ledger(small_ledger)
    manifest = json.loads((small_ledger / "manifest.json").read_text())
    assert loaded.verified and loaded.format_version == 2
    assert manifest["format_version"] == 2
    assert manifest["count"] == loaded.count
    assert manifest["head_hash"] == loaded.head_hash
    assert manifest["counts_per_kind"] == loaded.counts_per_kind
    assert manifest["world_id"].startswith("default-s42-")
    assert manifest["world_config"]["calendar"]["days"] == 10
    first = loaded.records[0]
    assert first["seq"] == 0 and first["prev_hash"] == GENESIS_HASH
    assert first["recorded_at"] == f"{first['at']}T00:00:00Z"


def test_lines_are_canonical_json(small_ledger: Path) -> None:
    for line in _lines(small_ledger)[:200]:
        assert line == canonical_json(json.loads(line)) + "\n"


def test_recorded_at_follows_position_in_day(small_ledger: Path) -> None:
    recs = load_ledger(small_ledger).records
    by_day: dict[str, int] = {}
    for r in recs:
        pos = by_day.get(r["at"], 0)
        h, rem = divmod(pos, 3600)
        m, s = divmod(rem, 60)
        assert r["recorded_at"] == f"{r['at']}T{h:02d}:{m:02d}:{s:02d}Z"
        by_day[r["at"]] = pos + 1


def _expect_refusal(d: Path, line: int | None, fragment: str) -> None:
    with pytest.raises(LedgerError) as err:
        load_ledger(d)
    msg = str(err.value)
    if line is not None:
        assert err.value.line == line, msg
        assert f"line {line}" in msg
    assert fragment in msg, msg


Where = int | tuple[str, str]  # a line index, or the first line whose record has (field, value)


def _index(lines: list[str], where: Where) -> int:
    if isinstance(where, int):
        return where
    field, value = where
    return next(i for i, ln in enumerate(lines) if json.loads(ln)[field] == value)


# (where, the edit of that line's record, what the refusal says): each refused at that line.
RECORD_EDITS: dict[str, tuple[Where, Callable[[dict[str, Any]], Any], str]] = {
    "missing field": (3, lambda r: r.pop("entity_id"), "missing entity_id"),
    "mistyped field": (3, lambda r: r.update(seq="3"), "seq must be an integer"),
    "unknown kind": (5, lambda r: r.update(kind="user_teleported"), "unknown event kind 'user_teleported'"),
    "duplicate seq": (9, lambda r: r.update(seq=8), "duplicate seq 8"),
    "non-monotonic seq": (9, lambda r: r.update(seq=2), "non-monotonic seq 2"),
    "days going backwards": (("at", "2024-01-03"), lambda r: r.update(at="2024-01-01"), "goes backwards"),
    "payload violating its schema": (("kind", "vendor_registered"), lambda r: r["payload"].update(tier="platinum"),
                                     "vendor_registered.tier: must be one of"),
    "payload with extra precision": (("kind", "product_listed"),
                                     lambda r: r["payload"].update(list_price_usd=10.123), "more than 2 decimals"),
}
# (where, the edit of that line's text, what the refusal says)
TEXT_EDITS: dict[str, tuple[Where, Callable[[str], str], str]] = {
    "malformed JSON": (6, lambda ln: ln[:40] + "\n", "malformed JSON"),
    "broken hash": (("kind", "product_listed"), lambda ln: ln.replace('"list_price_usd":', '"list_price_usd":1', 1),
                    "hash mismatch"),
    # same content, spaces added
    "reformatted line": (2, lambda ln: json.dumps(json.loads(ln), sort_keys=True) + "\n", "hash mismatch"),
}


@pytest.mark.parametrize("case", RECORD_EDITS)
def test_refuses_an_edited_record_at_its_line(ledger_copy: Path, case: str) -> None:
    where, edit, fragment = RECORD_EDITS[case]
    lines = _lines(ledger_copy)
    idx = _index(lines, where)
    rec = json.loads(lines[idx])
    edit(rec)
    lines[idx] = canonical_json(rec) + "\n"
    _write(ledger_copy, lines)
    _expect_refusal(ledger_copy, idx + 1, fragment)


@pytest.mark.parametrize("case", TEXT_EDITS)
def test_refuses_an_edited_line_at_its_line(ledger_copy: Path, case: str) -> None:
    where, edit, fragment = TEXT_EDITS[case]
    lines = _lines(ledger_copy)
    idx = _index(lines, where)
    lines[idx] = edit(lines[idx])
    _write(ledger_copy, lines)
    _expect_refusal(ledger_copy, idx + 1, fragment)


def test_refuses_rehashed_edit_by_next_line(ledger_copy: Path) -> None:
    """A forger who recomputes the edited line's hash is caught by the next line's prev_hash."""
    lines = _lines(ledger_copy)
    rec = json.loads(lines[20])
    rec["entity_id"] = rec["entity_id"] + "x"
    lines[20] = canonical_json(rec) + "\n"
    lines[20] = _rehash_from(lines, 20)[20]
    _write(ledger_copy, lines)
    _expect_refusal(ledger_copy, 22, "chain broken")


def test_refuses_rechained_ledger_by_manifest_head(ledger_copy: Path) -> None:
    """Re-chaining everything after an edit is caught by the manifest's head hash."""
    lines = _lines(ledger_copy)
    rec = json.loads(lines[20])
    rec["entity_id"] = rec["entity_id"] + "x"
    lines[20] = canonical_json(rec) + "\n"
    _write(ledger_copy, _rehash_from(lines, 20))
    _expect_refusal(ledger_copy, len(lines), "head hash")


def test_refuses_removed_event(ledger_copy: Path) -> None:
    lines = _lines(ledger_copy)
    del lines[30]
    _write(ledger_copy, lines)
    _expect_refusal(ledger_copy, 31, "skips")


def test_refuses_truncation(ledger_copy: Path) -> None:
    lines = _lines(ledger_copy)
    _write(ledger_copy, lines[:-5])
    _expect_refusal(ledger_copy, len(lines) - 5, "truncated")


def test_refuses_format2_without_manifest(ledger_copy: Path) -> None:
    (ledger_copy / "manifest.json").unlink()
    _expect_refusal(ledger_copy, None, "without manifest.json")


def test_missing_file_is_named(tmp_path: Path) -> None:
    _expect_refusal(tmp_path / "nope.jsonl", None, "file not found")


def test_writer_leaves_no_ledger_when_simulation_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from churn_assets.world import simulator

    def boom(self: simulator.Simulator) -> None:
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(simulator.Simulator, "_tickets", boom)
    with pytest.raises(RuntimeError):
        generate_ledger(load_config(days=3), tmp_path / "w")
    assert not (tmp_path / "w" / "ledger.jsonl").exists()
    assert not (tmp_path / "w" / "manifest.json").exists()
