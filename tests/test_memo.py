"""The process's caches (`churn_assets/memo.py`): bounded, and keyed by values, so a freed ledger's id reused by
another ledger, or a ledger file rewritten in place, gets a fresh entry, never the old one's value."""

from __future__ import annotations

import copy
import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest

from churn_assets.evaluation import exposure
from churn_assets.fabric.quality import fold_measures
from churn_assets.memo import Memo, clear_all, memo
from churn_assets.orchestration.assets import common, warehouse_checks
from churn_assets.tasks.generator import generate_task_set
from churn_assets.world.config import load_config
from churn_assets.world.ledger import LoadedLedger, load_ledger
from churn_assets.world.packed import packed, records_key
from churn_assets.world.simulator import generate_ledger


def test_the_bound_holds_and_the_least_recently_used_goes_first() -> None:
    kept: Memo[str] = Memo("test.bound", 2)
    kept.put("a", "A")
    kept.put("b", "B")
    assert kept.get("a") == "A"  # a is now the most recently used: b goes first
    kept.put("c", "C")
    assert len(kept) == 2 and kept.get("b") is None and kept.get("a") == "A" and kept.get("c") == "C"
    for i in range(50):
        kept.get_or_compute(i, lambda i=i: str(i))
    assert len(kept) == 2 and kept.get(49) == "49" and kept.get(48) == "48"
    with pytest.raises(ValueError, match="at least 1"):
        Memo("test.empty", 0)


def test_a_computed_value_is_kept_once_and_clear_all_empties_every_memo() -> None:
    named: Memo[list[int]] = memo("test.clear_all", 3)
    calls: list[int] = []
    first = named.get_or_compute("k", lambda: calls.append(1) or [1])
    assert named.get_or_compute("k", lambda: calls.append(2) or [2]) is first and calls == [1]
    with pytest.raises(ValueError, match="exists already"):
        memo("test.clear_all", 3)
    clear_all()
    assert len(named) == 0


def _record(seq: int, at: str, chain: bool) -> dict[str, Any]:
    rec = {"seq": seq, "at": at, "kind": "user_hired", "entity_type": "user", "entity_id": f"u{seq}",
           "payload": {"name": f"user {seq}"}}
    return {**rec, "hash": f"h{seq}"} if chain else rec


@pytest.mark.parametrize("chain", [True, False])
def test_records_key_is_the_records_value_not_the_object(chain: bool) -> None:
    records = [_record(i, "2024-01-01", chain) for i in range(4)]
    assert records_key(records) == records_key(copy.deepcopy(records))  # another object, the same ledger
    assert records_key(records) != records_key(records[:-1])
    if not chain:  # a changed record in the middle changes the digest (with a chain, its head would change)
        changed = copy.deepcopy(records)
        changed[1]["payload"]["name"] = "someone else"
        assert records_key(changed) != records_key(records)
    packed_key = records_key(packed(records))
    assert packed_key == records_key(packed(copy.deepcopy(records)))
    assert packed_key != records_key(packed(records[:-1]))
    assert records_key([]) == records_key(packed([]))


@pytest.fixture(scope="module")
def two_ledgers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    generate_ledger(load_config(days=20, seed=1), first)
    generate_ledger(load_config(days=20, seed=2), second)
    return first, second


def test_a_reused_id_gets_the_new_ledger_s_folds(two_ledgers: tuple[Path, Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The parity checks' fold measures were keyed by `id(loaded)`: a ledger freed and another one made at its
    address got the first one's measures. CPython does hand a freed address out again, but when is up to its
    allocator, so here every object of the caching modules has the same address (their `id` returns 1): the
    second ledger still gets its own fold and measures, and an equal ledger the kept ones."""
    for module in (warehouse_checks, common):
        monkeypatch.setattr(module, "id", lambda _obj: 1, raising=False)
    monkeypatch.setattr(warehouse_checks, "FOLD_MEASURES", Memo("test.fold_measures", 1))
    monkeypatch.setattr(common, "FOLDS", Memo("test.world_as_of", 1))
    first_records, second_records = (load_ledger(path).records for path in two_ledgers)
    days, day = [dt.date(2024, 1, 10), dt.date(2024, 1, 20)], dt.date(2024, 1, 20)
    loaded = LoadedLedger(Path("ledger"), 2, True, first_records, None)
    first, first_state = warehouse_checks._fold_measures(loaded, days), common.world_as_of(loaded, day)
    other = LoadedLedger(Path("ledger"), 2, True, second_records, None)
    second = warehouse_checks._fold_measures(other, days)
    assert second == fold_measures(second_records, days) and second != first
    assert common.world_as_of(other, day) is not first_state
    equal = LoadedLedger(Path("elsewhere"), 2, True, list(second_records), None)
    assert warehouse_checks._fold_measures(equal, days) is second


def test_a_rewritten_ledger_file_is_read_again(two_ledgers: tuple[Path, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "LEDGERS", Memo("test.world_ledger", 2))
    monkeypatch.setattr(common, "FOLDS", Memo("test.world_as_of", 1))
    first_dir, second_dir = two_ledgers
    ledger_dir = tmp_path / "ledger"
    shutil.copytree(first_dir, ledger_dir)
    loaded = common.load_world_ledger(ledger_dir, "w")
    assert common.load_world_ledger(ledger_dir, "w") is loaded  # unchanged files: read once
    day = dt.date(2024, 1, 15)
    state = common.world_as_of(loaded, day)
    shutil.rmtree(ledger_dir)
    shutil.copytree(second_dir, ledger_dir)
    again = common.load_world_ledger(ledger_dir, "w")
    assert again is not loaded and again.head_hash != loaded.head_hash
    assert common.world_as_of(again, day) is not state
    assert len(common.LEDGERS) == 1  # one entry per path: the rewritten file's read replaced the first


def test_two_task_sets_of_one_ledger_get_their_own_change_rates(two_ledgers: tuple[Path, Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every task set numbers its tasks q001, q002, ...: the change rates were keyed by the task ids, so a task
    set of another count or seed on the same ledger got the first one's rates (a paper's prediction moved with
    the order in which one test worker ran its tests)."""
    monkeypatch.setattr(exposure, "RATES", Memo("test.change_rates", 6))
    records = load_ledger(two_ledgers[0]).records
    start, anchor = dt.date(2024, 1, 1), dt.date(2024, 1, 20)
    first, second = (generate_task_set(records, world_id="w", anchor=anchor, n=12, task_seed=seed).tasks
                     for seed in (0, 1))
    assert [t.task_id for t in first] == [t.task_id for t in second] and first != second
    kept = exposure.change_rates(records, first, start=start, anchor=anchor)
    fresh = exposure.AnswerChangeRates.measure(records, second, start=start, until=anchor - dt.timedelta(days=1))
    got = exposure.change_rates(records, second, start=start, anchor=anchor)
    assert got is not kept and got.changed == fresh.changed
    assert exposure.change_rates(records, list(first), start=start, anchor=anchor) is kept  # equal tasks: kept
