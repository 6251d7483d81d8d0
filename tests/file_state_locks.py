"""The state folder's locks as file locks, for unit tests that register or plan scenarios in a state folder with no
services: the seam `state_locks.state_locks` resolves the folder's Postgres (starting it), which these tests do not
have and must not start. The product never uses this: its locks are Postgres advisory locks
(`tests/integration/test_state_locks.py` tests them on the real embedded Postgres)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import churn_assets.state_locks
from churn_assets.files import file_lock, is_locked
from churn_assets.state import StatePaths


class FileStateLocks:
    """`StateLocks`' interface on flocks under `<root>/test-locks/` (one machine's processes only)."""

    def __init__(self, root: Path) -> None:
        self.folder = root / "test-locks"

    def _path(self, name: str) -> Path:
        return self.folder / (name.replace("/", "--") + ".lock")

    @contextmanager
    def hold(self, name: str, *, shared: bool = False, timeout: float | None = None, what: str | None = None,
             on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        with file_lock(self._path(name), shared=shared, timeout=timeout, what=what or name, on_wait=on_wait):
            yield

    def is_held(self, name: str) -> bool:
        return is_locked(self._path(name))


def use_file_locks(monkeypatch: pytest.MonkeyPatch, paths: StatePaths) -> None:
    """`state_locks(paths)` gives file locks for the rest of the test."""
    monkeypatch.setitem(churn_assets.state_locks._RESOLVED, str(paths.root), FileStateLocks(paths.root))
