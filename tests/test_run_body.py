"""Which runs are made with a job origin (decision 334): a run started by a sweep whose own run has one (made by the
webserver or the daemon), in a process whose environment names the session's state folder; the CLI's runs and any
other stay in process. (Made and re-executed through the UI: tests/integration/test_ui_sweep.py.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.remote_origin import GrpcServerCodeLocationOrigin, RemoteRepositoryOrigin
from dagster._core.storage.dagster_run import DagsterRun

from churn_assets.orchestration.code_location import CODE_LOCATION_MODULE
from churn_assets.orchestration.run_body import SWEEP_RUN_TAG, origins_from_sweep
from churn_assets.state import STATE_DIR_ENV, StatePaths

JOB = "__ASSET_JOB"


def test_only_a_launched_sweeps_runs_get_its_origin_and_only_on_the_same_state_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = StatePaths.resolve(tmp_path / "state")
    monkeypatch.setenv(STATE_DIR_ENV, str(paths.root))
    remote = RemoteRepositoryOrigin(GrpcServerCodeLocationOrigin(host="localhost", port=4266,
                                                                 location_name="churnbench"), "__repository__")
    code = ReconstructableRepository.for_module(CODE_LOCATION_MODULE, "defs").get_python_origin()
    with dg.DagsterInstance.ephemeral() as instance:
        launched, in_process = str(uuid.uuid4()), str(uuid.uuid4())
        instance.add_run(DagsterRun(job_name="sweep", run_id=launched, remote_job_origin=remote.get_job_origin("sweep"),
                                    job_code_origin=code.get_job_origin("sweep")))
        instance.add_run(DagsterRun(job_name="sweep", run_id=in_process))

        origins = origins_from_sweep(instance, {SWEEP_RUN_TAG: launched}, JOB, paths)
        assert origins is not None
        assert (origins.remote.job_name, origins.remote.repository_origin) == (JOB, remote)
        assert (origins.code.job_name, origins.code.repository_origin) == (JOB, code)
        assert origins_from_sweep(instance, {SWEEP_RUN_TAG: in_process}, JOB, paths) is None  # a CLI sweep's
        assert origins_from_sweep(instance, {}, JOB, paths) is None  # started by no sweep
        monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "another"))  # the code location would bind another folder
        assert origins_from_sweep(instance, {SWEEP_RUN_TAG: launched}, JOB, paths) is None
