"""The process's caches of values derived from a ledger: one place, each bounded, each keyed by values.

Reading a verified ledger, folding it as of a day, measuring a task set's answer-change rates and resolving gold
cost seconds to minutes on a large world, and the same process asks for them again and again (a backfill's days,
an asset and its checks, a paper's cells in one worker). Every such cache is a `Memo` made here with `memo(name,
max_entries)`: a thread-safe map that keeps the `max_entries` entries used last (least recently used goes first),
so no cache grows with the number of worlds, days or cells a long-lived process sees.

Keys are values, never an object's identity. `id(obj)` is reused by a new object once `obj` is freed, so a cache
keyed by it can hand a new ledger the fold of a freed one; a ledger's records are keyed by `records_key`
(`world/packed.py`: the record count and the head of the hash chain, which commits to every event before it, or
a digest of the content where there is no chain), a ledger file by its path with its size and mtimes, and days,
task ids and formats by themselves. Equal keys mean equal inputs, so a hit returns what a recomputation would.

Values are shared, not copied: callers only read them (a fold, a rate table, a gold resolver whose `gold`
returns copies). `clear_all()` empties every cache (a benchmark repeat that must measure as a new process would).

The model of `grounding/embeddings.py` and the worker of `orchestration/cells.py` are process singletons on
purpose (decisions 198-199) and are not kept here. Decision 300 records this module's choice.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    """A bounded LRU cache from hashable value keys to values (see the module doc)."""

    def __init__(self, name: str, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"memo {name}: max_entries must be at least 1, not {max_entries}")
        self.name = name
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        """The value kept for `key` (now the most recently used), or None."""
        with self._lock:
            if key not in self._entries:
                return None
            self._entries.move_to_end(key)
            return self._entries[key]

    def put(self, key: Hashable, value: V) -> V:
        """Keep `value` for `key` (replacing what was kept), dropping the least recently used beyond the bound."""
        with self._lock:
            return self._put_locked(key, value)

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value kept for `key`, else `compute()` kept. The computation runs outside the lock (a fold may take
        a minute; other keys stay readable); when two threads compute the same key, both get the first kept."""
        found = self.get(key)
        if found is not None:
            return found
        value = compute()
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
            return self._put_locked(key, value)

    def _put_locked(self, key: Hashable, value: V) -> V:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_MEMOS: dict[str, Memo[object]] = {}


def memo(name: str, max_entries: int) -> Memo[V]:
    """A new cache named `name` (unique in the process), registered for `clear_all`."""
    if name in _MEMOS:
        raise ValueError(f"memo {name} exists already")
    made: Memo[V] = Memo(name, max_entries)
    _MEMOS[name] = made  # type: ignore[assignment]
    return made


def clear_all() -> None:
    """Empty every cache of the process."""
    for kept in _MEMOS.values():
        kept.clear()
