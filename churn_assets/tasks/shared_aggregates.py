"""Aggregates that many gold computations of one state share (spend per cost center, licenses held by active
users, active users per cost center, licenses used in a window), computed once per (sub-states, day) inside a
scope instead of once per task.

Gold is computed task by task; about a third of the templates start from the same whole-world aggregate (every
cost-center spend question computes the spend of every cost center), so measuring answer-change rates (gold of
every task on every day a change touched it, and again with one class a day older) spent most of its time
computing the same few aggregates again. Inside `shared_aggregates()`, an aggregate is keyed by the identity of
the sub-states it reads and its arguments; it is valid only while none of those sub-states changes, so a scope
must not span a change of a sub-state it read (a walker's step). Outside a scope nothing is kept and every call
computes (the plain path, which the tests compare against).

The values are shared, not copied: gold functions only read them.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

_T = TypeVar("_T")

# (name, sub-state ids, args) -> (sub-states, value): the sub-states are held so their ids stay theirs.
_Memo = dict[tuple[Any, ...], tuple[tuple[object, ...], Any]]
_SCOPE: contextvars.ContextVar[_Memo | None] = contextvars.ContextVar("churnbench_shared_aggregates", default=None)


@contextlib.contextmanager
def shared_aggregates(memo: _Memo | None = None) -> Iterator[_Memo]:
    """A scope in which `shared` keeps what it computes (in `memo` when given: a caller whose states never
    change, such as `GoldResolver`, keeps one memo for all its scopes)."""
    kept: _Memo = {} if memo is None else memo
    token = _SCOPE.set(kept)
    try:
        yield kept
    finally:
        _SCOPE.reset(token)


def in_scope() -> bool:
    return _SCOPE.get() is not None


def shared(name: str, subs: tuple[object, ...], args: Hashable, compute: Callable[[], _T]) -> _T:
    """`compute()`, kept in the current scope under (name, the sub-states' identities, args)."""
    memo = _SCOPE.get()
    if memo is None:
        return compute()
    key = (name, tuple(id(s) for s in subs), args)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = (subs, compute())
    value: _T = hit[1]
    return value
