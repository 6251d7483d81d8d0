"""The cyclic collector's pause (churn_assets/world/gc_pause.py) and where the folds hold it."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from churn_assets.world import gc_pause
from churn_assets.world.config import load_config
from churn_assets.world.fold import fold_vintage, uniform_vintage, walk_ledger
from churn_assets.world.ledger import load_ledger
from churn_assets.world.simulator import generate_ledger


@pytest.fixture(autouse=True)
def collector_enabled() -> Iterator[None]:
    gc.enable()
    yield
    assert gc_pause._holders == 0, "a pause was left held"
    gc.enable()


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("gc") / "w"
    generate_ledger(load_config(days=6), out)
    return list(load_ledger(out).records)


def test_nested_pauses_bring_the_collector_back_after_the_last() -> None:
    gc_pause.pause()
    gc_pause.pause()
    assert not gc.isenabled()
    gc_pause.resume()
    assert not gc.isenabled()
    gc_pause.resume()
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    with gc_pause.cyclic_gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_resume_without_a_pause_is_refused() -> None:
    with pytest.raises(RuntimeError, match="without a pause"):
        gc_pause.resume()


def test_threads_releasing_in_any_order_bring_it_back_once() -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with gc_pause.cyclic_gc_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with gc_pause.cyclic_gc_paused():
            second_in.set()
            first_out.wait(5)
            assert not gc.isenabled(), "the first thread's release must not end the second's pause"

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert gc.isenabled()


def test_walk_pauses_only_while_it_applies_records(records: list[dict]) -> None:
    seen = []

    def watched() -> Iterator[dict]:
        for rec in records:
            seen.append(gc.isenabled())
            yield rec

    walker = walk_ledger(watched())
    for _day, _state in walker:
        assert gc.isenabled(), "the caller holds a day's state with the collector on"
    assert seen and not any(seen), "records are applied with the collector paused"
    assert gc.isenabled()


def test_a_walk_left_early_releases_its_pause(records: list[dict]) -> None:
    walker = walk_ledger(records)
    next(walker)
    walker.close()
    assert gc.isenabled()


def test_fold_vintage_releases_its_pause_when_it_fails(records: list[dict]) -> None:
    broken = [*records[:5], {**records[5], "payload": {}}]
    with pytest.raises(Exception):  # noqa: B017 - any fold error; what matters is the collector after it
        fold_vintage(broken, uniform_vintage(records[-1]["at"]))
    assert gc.isenabled()


def test_a_freeze_asked_by_any_holder_happens_when_the_last_resumes() -> None:
    frozen = gc.get_freeze_count()
    try:
        with gc_pause.cyclic_gc_paused():
            with gc_pause.cyclic_gc_paused(freeze=True):
                kept = [[i] for i in range(1000)]  # lists: objects the cyclic collector tracks
            assert gc.get_freeze_count() == frozen, "not while another holder still builds"
        assert gc.get_freeze_count() >= frozen + len(kept)
        with gc_pause.cyclic_gc_paused():
            pass
        assert not gc_pause._freeze, "a freeze is asked once, not by every later pause"
    finally:
        gc.unfreeze()
