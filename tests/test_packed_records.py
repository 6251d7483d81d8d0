"""`PackedRecords` (a large world's ledger held as compact JSON, parsed per pass) read as the records it packed:
the same dicts without the chain fields, the same folds, the same exposure rows, and a tenth of the memory."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

from churn_assets.arms.registry import TIERED_ARM, UNTIERED_ARM
from churn_assets.grounding.registry import load_registry
from churn_assets.sweeps.exposure_cells import exposure_of_world, world_exposure
from churn_assets.sweeps.spec import Cell
from churn_assets.world.config import load_config
from churn_assets.world.fold import fold_ledger, walk_ledger
from churn_assets.world.ledger import LedgerError, load_ledger
from churn_assets.world.packed import PACKED_FIELDS, PackedRecords, packed
from churn_assets.world.simulator import generate_ledger

DAYS = 30
T = dt.date(2024, 1, 30)


@pytest.fixture(scope="module")
def ledger_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packed") / "w"
    generate_ledger(load_config(days=DAYS), out)
    return out


def test_packed_records_are_the_records_without_the_chain_fields(ledger_dir: Path) -> None:
    plain, small = load_ledger(ledger_dir), load_ledger(ledger_dir, packed=True)
    assert isinstance(small.records, PackedRecords) and not isinstance(plain.records, PackedRecords)
    expected = [{k: r[k] for k in PACKED_FIELDS} for r in plain.records]
    assert list(small.records) == expected  # floats round-trip exactly
    assert len(small.records) == len(expected) == plain.count == small.count
    assert small.records[0] == expected[0] and small.records[-1] == expected[-1]
    assert small.records[5:9] == expected[5:9]
    assert (small.head_hash, small.first_day, small.last_day, small.counts_per_kind) == \
        (plain.head_hash, plain.first_day, plain.last_day, plain.counts_per_kind)
    assert small.head_hash is not None and small.verified


def test_parsed_records_share_their_strings(ledger_dir: Path) -> None:
    records = load_ledger(ledger_dir, packed=True).records
    first, again = records[0], records[0]
    assert first is not again and first == again  # a new dict on each access: mutating one changes nothing held
    assert first["entity_id"] is again["entity_id"] and first["at"] is again["at"]
    usage = [r for r in records if r["kind"] == "consumption_logged"][:50]
    users = {id(r["payload"]["user_id"]) for r in usage}
    assert len(users) == len({r["payload"]["user_id"] for r in usage})  # one object per distinct id


def test_a_packed_ledger_holds_a_tenth_of_the_memory(ledger_dir: Path) -> None:
    plain = load_ledger(ledger_dir).records
    small = packed(plain)
    held = sum(sys.getsizeof(line) for line in small._lines)
    as_dicts = sum(sys.getsizeof(r) + sys.getsizeof(r["payload"]) + sum(map(sys.getsizeof, r.values()))
                   for r in plain)
    assert held < as_dicts / 4, (held, as_dicts)


def test_folds_of_packed_records_equal_the_plain_ones(ledger_dir: Path) -> None:
    plain = load_ledger(ledger_dir).records
    small = packed(plain)
    for day in (dt.date(2024, 1, 1), dt.date(2024, 1, 17), T):
        assert fold_ledger(small, day) == fold_ledger(plain, day)
    for (d1, s1), (d2, s2) in zip(walk_ledger(plain), walk_ledger(small), strict=True):
        assert d1 == d2 and s1 == s2


def test_exposure_rows_of_packed_records_equal_the_plain_ones(ledger_dir: Path) -> None:
    config = load_config(days=DAYS)
    windows = (T - dt.timedelta(days=1), dt.date(2024, 1, 2))
    cells = [Cell(config.world_id, arm, policy, t_prime, T) for t_prime in windows
             for arm, policy in ((TIERED_ARM, "tiered"), (UNTIERED_ARM, "off"))]
    plain = world_exposure(config, load_ledger(ledger_dir).records, cells, load_registry(), task_count=20, task_seed=0)
    assert exposure_of_world(str(ledger_dir), config, cells, 20, 0) == plain  # reads the ledger packed
    assert any(row["exposure"] for row in plain)  # the comparison is not between empty rows


def test_a_packed_load_verifies_as_the_plain_one(ledger_dir: Path, tmp_path: Path) -> None:
    lines = (ledger_dir / "ledger.jsonl").read_text().splitlines(keepends=True)
    broken = tmp_path / "w"
    broken.mkdir()
    (broken / "manifest.json").write_text((ledger_dir / "manifest.json").read_text())
    (broken / "ledger.jsonl").write_text("".join([*lines[:7], lines[7].replace('"at":', '"at" :', 1), *lines[8:]]))
    with pytest.raises(LedgerError, match="line 8"):
        load_ledger(broken, packed=True)
