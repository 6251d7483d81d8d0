"""Stopping `churnbench ui` stops Dagster's processes and leaves the state folder's services running, those its runs
started inside Dagster's process tree included (the engine's broker and run worker: decision 333)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil

from churn_assets.commands.ui import _shutdown, service_processes
from churn_assets.services.process import write_record
from churn_assets.state import StatePaths

# A stand-in for `dagster dev`: it starts a service the way `ProcessService` does (a session of its own), prints the
# service's pid and waits to be interrupted.
DAGSTER_DEV = """
import subprocess, sys, time
service = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print(service.pid, flush=True)
time.sleep(120)
"""


def test_stopping_the_ui_leaves_a_service_its_runs_started(tmp_path: Path) -> None:
    paths = StatePaths.resolve(tmp_path / "state").ensure()
    paths.services_dir.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-c", DAGSTER_DEV], stdout=subprocess.PIPE, start_new_session=True)
    assert child.stdout is not None
    service = psutil.Process(int(child.stdout.readline()))
    try:
        write_record(paths, "run-worker", {"pid": service.pid, "create_time": service.create_time()})
        write_record(paths, "saas-keys", {"keys": []})  # not a service record: no pid
        assert service_processes(paths) == {service.pid}
        _shutdown(child, service_processes(paths))
        assert child.poll() is not None  # Dagster's side stopped
        assert service.is_running()  # the service it started did not
    finally:
        service.kill()
        if child.poll() is None:
            child.kill()
