"""Pause Python's cyclic garbage collector while a large state is built that holds no reference cycle.

A fold or a simulation of a large world keeps millions of small objects (a 100x world's folds: 5.4M usage
tuples in lists). The cyclic collector cannot free any of them (they form no cycle; reference counting frees
what is dropped), but each full collection walks every list holding them, and full collections come more
often as the state grows: at 100x, 16 of them took 10 s of a 28 s walk over the ledger (1x: 0.02 s), which
made the walk alone 187x its 1x time (136x with the collector off). Paused, the collections that would have
run simply do not; the cycles other code makes meanwhile are collected once the collector is back.

The pause counts its holders, so threads and nested holders may pause and resume in any order: the collector
comes back when the last holder resumes, and only if it was enabled when the first one paused. A holder that
builds objects meant to stay (the SaaS mock's tenant records and views, decision 196) asks for them to be frozen
(`gc.freeze`) when the last holder resumes, so no later collection walks them again.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_reenable = False
_freeze = False


def pause(*, freeze: bool = False) -> None:
    """Hold the collector paused (undo with `resume`). `freeze`: freeze every object when the last holder
    resumes."""
    global _holders, _reenable, _freeze
    with _lock:
        if _holders == 0:
            _reenable = gc.isenabled()
            gc.disable()
        _holders += 1
        _freeze = _freeze or freeze


def resume() -> None:
    """Release one `pause`; the last release brings the collector back if it was enabled before the first."""
    global _holders, _freeze
    with _lock:
        if _holders == 0:
            raise RuntimeError("gc_pause.resume() without a pause()")
        _holders -= 1
        if _holders == 0:
            if _freeze:
                gc.freeze()
                _freeze = False
            if _reenable:
                gc.enable()


@contextmanager
def cyclic_gc_paused(*, freeze: bool = False) -> Iterator[None]:
    """The collector paused inside the block (see the module doc)."""
    pause(freeze=freeze)
    try:
        yield
    finally:
        resume()
