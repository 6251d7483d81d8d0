"""A process whose pool ran on the fork server waits for it at exit, so its parent's `wait4` counts the workers
(the bench's peak RSS and CPU of `churnbench paper`; orchestration/cells.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent("""
    import multiprocessing, sys
    from concurrent.futures import ProcessPoolExecutor
    from churn_assets.orchestration import cells

    def hold(mib):
        block = bytearray(mib * 1024 * 1024)
        for i in range(0, len(block), 4096):  # touch every page: resident, not only reserved
            block[i] = 1
        return len(block)

    if __name__ == "__main__":
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([])
        if sys.argv[1] == "wait":
            cells._wait_for_fork_server_at_exit()
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            pool.submit(hold, 300).result()
""")


def _child_peak_mib(tmp_path: Path, mode: str) -> float:
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script), mode])
    _pid, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_maxrss / 1024


@pytest.mark.timeout(120)
def test_the_workers_memory_counts_for_the_caller(tmp_path: Path) -> None:
    assert _child_peak_mib(tmp_path, "wait") >= 300


@pytest.mark.timeout(120)
def test_without_the_wait_it_does_not(tmp_path: Path) -> None:
    """The control: what the bench measured before (the fork server left unwaited)."""
    assert _child_peak_mib(tmp_path, "no-wait") < 300
