"""A process whose pool ran on the fork server waits for it at exit, so its parent's `wait4` counts the workers
(the bench's peak RSS and CPU of `churnbench paper`; orchestration/fork_server.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent("""
    import multiprocessing, sys
    from concurrent.futures import ProcessPoolExecutor
    from churn_assets.orchestration import fork_server

    def hold(mib):
        block = bytearray(mib * 1024 * 1024)
        for i in range(0, len(block), 4096):  # touch every page: resident, not only reserved
            block[i] = 1
        return len(block)

    if __name__ == "__main__":
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([])
        if sys.argv[1] == "wait":
            fork_server.stop_at_exit()
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            pool.submit(hold, 300).result()
""")


def _child_peak_mib(tmp_path: Path, mode: str) -> float:
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    # Measured from a fresh interpreter, not from this one: Linux carries the peak RSS of the process a child
    # was forked from into the child's own (a test worker of 1.4 GiB made every child "use" 1.4 GiB).
    measure = ("import os, subprocess, sys\n"
               "proc = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]])\n"
               "_pid, status, usage = os.wait4(proc.pid, 0)\n"
               "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", measure, str(script), mode], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "0", out
    return int(out[1]) / 1024


@pytest.mark.timeout(120)
def test_the_workers_memory_counts_for_the_caller(tmp_path: Path) -> None:
    assert _child_peak_mib(tmp_path, "wait") >= 300


@pytest.mark.timeout(120)
def test_without_the_wait_it_does_not(tmp_path: Path) -> None:
    """The control: what the bench measured before (the fork server left unwaited)."""
    assert _child_peak_mib(tmp_path, "no-wait") < 300
