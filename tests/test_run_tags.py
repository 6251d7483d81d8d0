"""The bookkeeping tags that say which process runs a Dagster run (issue 46, decision 323): hidden from the Runs
list (Dagster's `.dagster/` prefix), and a run tagged by an older version, in the visible form, still read back by
the dead-run reaper; the run launcher's termination of a run by its engine job."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import ClassVar

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.storage.tags import TagType, get_tag_type

from churn_assets.files import process_stamp
from churn_assets.orchestration import dead_runs, run_launcher
from churn_assets.orchestration.dead_runs import (
    CREATED_TAG,
    HOST_TAG,
    LEGACY_TAGS,
    PID_TAG,
    has_process_tags,
    process_stamp_of,
    process_tags,
)


def test_the_process_tags_are_hidden_from_the_runs_list() -> None:
    for key in (*process_tags(), run_launcher.TASK_TAG):
        assert get_tag_type(key) == TagType.HIDDEN, key
    for key in LEGACY_TAGS.values():  # what an older version wrote: shown
        assert get_tag_type(key) == TagType.USER_PROVIDED, key


def _tags(stamp: dict[str, object], legacy: bool) -> dict[str, str]:
    tags = {PID_TAG: str(stamp["pid"]), CREATED_TAG: repr(stamp["create_time"]), HOST_TAG: str(stamp["host"])}
    return {LEGACY_TAGS[k]: v for k, v in tags.items()} if legacy else tags


def test_a_stamp_is_read_from_either_form() -> None:
    stamp = process_stamp()
    assert process_stamp_of(_tags(stamp, legacy=False)) == stamp
    assert process_stamp_of(_tags(stamp, legacy=True)) == stamp
    assert has_process_tags(_tags(stamp, legacy=True)) and has_process_tags(_tags(stamp, legacy=False))
    assert process_stamp_of({PID_TAG: "12"}) is None and not has_process_tags({"churnbench/kind": "sweep"})
    assert process_stamp_of({**_tags(stamp, legacy=False), PID_TAG: "not a pid"}) is None


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


def _started_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> str:
    run_id = str(uuid.uuid4())
    instance.add_run(DagsterRun(job_name="sweep", run_id=run_id, status=dg.DagsterRunStatus.STARTED, tags=tags))
    return run_id


def test_the_reaper_records_dead_runs_tagged_in_either_form_and_leaves_a_live_one(
        instance: dg.DagsterInstance) -> None:
    alive = process_stamp()
    dead = {**alive, "create_time": float(alive["create_time"]) - 3600}  # this pid, started an hour earlier: gone
    new, old = _started_run(instance, _tags(dead, legacy=False)), _started_run(instance, _tags(dead, legacy=True))
    live = _started_run(instance, _tags(alive, legacy=False))
    found = dead_runs._reap_dagster_runs(instance)
    assert sorted(d.ref for d in found) == sorted([new, old])
    status = {r: instance.get_run_by_id(r).status for r in (new, old, live)}  # type: ignore[union-attr]
    assert status == {new: dg.DagsterRunStatus.FAILURE, old: dg.DagsterRunStatus.FAILURE,
                      live: dg.DagsterRunStatus.STARTED}


class _Job:
    """The seam's fake of a celery AsyncResult: records how it was revoked."""

    revoked: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id

    def revoke(self, terminate: bool, signal: str) -> None:
        assert terminate
        self.revoked.append((self.job_id, signal))


def test_the_launcher_cancels_a_started_run_in_its_worker_and_a_queued_one_at_once(
        instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    from churn_assets.orchestration import engine
    from churn_assets.services import engine as engine_services

    _Job.revoked = []
    monkeypatch.setattr(engine, "engine_app", lambda _url: type("App", (), {"AsyncResult": staticmethod(_Job)})())
    monkeypatch.setattr(engine_services, "broker_url", lambda _paths: "redis://broker")
    launcher = run_launcher.EngineRunLauncher()
    launcher.register_instance(instance)
    started = _started_run(instance, {run_launcher.TASK_TAG: "job-1"})
    queued = str(uuid.uuid4())
    instance.add_run(DagsterRun(job_name="sweep", run_id=queued, status=dg.DagsterRunStatus.STARTING,
                                tags={run_launcher.TASK_TAG: "job-2"}))
    assert launcher.terminate(started) and launcher.terminate(queued)
    assert _Job.revoked == [("job-1", engine.CANCEL_SIGNAL), ("job-2", engine.CANCEL_SIGNAL)]
    status = {r: instance.get_run_by_id(r).status for r in (started, queued)}  # type: ignore[union-attr]
    # The started run ends CANCELED from its own process (the interrupt); the queued one has no process to.
    assert status == {started: dg.DagsterRunStatus.CANCELING, queued: dg.DagsterRunStatus.CANCELED}
    assert not launcher.terminate(_started_run(instance, {}))  # not launched by the engine
    assert not launcher.terminate(queued)  # already ended


def test_a_launched_run_loses_the_stamp_it_inherited_so_the_reaper_leaves_it_to_its_worker(
        instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """A re-execution carries its parent's tags (Dagster copies them), so its parent's process stamp: a re-executed
    cell whose worker process had exited was recorded failed by the reaper before its worker took it. The launcher
    blanks the inherited stamp; the worker that takes the run stamps it (`execute_launched_run`)."""
    from churn_assets.orchestration import engine
    from churn_assets.services import engine as engine_services

    sent: list[str] = []
    app = type("App", (), {"send_task": staticmethod(lambda _name, **kw: sent.append(kw["task_id"])
                                                     or type("Job", (), {"id": kw["task_id"],
                                                                         "ready": lambda self: False})())})
    monkeypatch.setattr(engine, "engine_app", lambda _url: app())
    monkeypatch.setattr(engine_services, "broker_url", lambda _paths: "redis://broker")
    monkeypatch.setenv(engine_services.BROKER_URL_ENV, "redis://broker")  # a cluster's broker: no local run worker
    launcher = run_launcher.EngineRunLauncher()
    launcher.register_instance(instance)
    monkeypatch.setattr(launcher, "_paths", lambda: type("Paths", (), {"root": tmp_path, "state_id": "s"})())
    alive = process_stamp()
    parents = {**alive, "create_time": float(alive["create_time"]) - 3600}  # its parent's process: gone
    run_id = str(uuid.uuid4())
    instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=run_id, status=dg.DagsterRunStatus.STARTING,
                                tags=_tags(parents, legacy=False)))
    assert [d.ref for d in dead_runs._reap_dagster_runs(instance)] == [run_id]  # what the reaper did to it
    instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=(run_id := str(uuid.uuid4())),
                                status=dg.DagsterRunStatus.STARTING, tags=_tags(parents, legacy=False)))
    launcher.launch_run(type("Context", (), {"dagster_run": instance.get_run_by_id(run_id)})())  # type: ignore[arg-type]
    tags = instance.get_run_by_id(run_id).tags  # type: ignore[union-attr]
    assert sent == [tags[run_launcher.TASK_TAG]] and not has_process_tags(tags) and process_stamp_of(tags) is None
    assert dead_runs._reap_dagster_runs(instance) == []
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTING  # type: ignore[union-attr]
