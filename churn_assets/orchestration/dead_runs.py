"""Runs whose process is gone: found by the next command and recorded failed, in Dagster and in the catalog.

This reaper covers only what Dagster's own run monitoring cannot see (decision 271): a CLI run materializes in
process, without a launcher or a daemon, so run monitoring never sees it, and the run launcher of a state folder
(`run_launcher.EngineRunLauncher`, like Dagster's default one) reports no worker health to it either. A
process killed outright (SIGKILL, power loss, OOM killer) therefore leaves its Dagster run STARTED and its catalog
row `running` for ever. Each process records who it is (`files.process_stamp`: pid, start time, host):

- on every Dagster run it launches in process (`materialize`), as the tags `PID_TAG`, `CREATED_TAG`, `HOST_TAG`;
  an `eval_run` launched from the UI adds them to its own run when it starts. They are hidden tags (Dagster's
  `.dagster/` prefix, which its GraphQL leaves out of a run's tags, so the Runs list does not show them:
  decision 323); a run recorded by an older version carries them as `churnbench/pid`, `churnbench/pid_created`,
  `churnbench/host`, and is read the same (`process_stamp_of`, `runs_of_host`);
- in the results folder of the run it evaluates (`owner.json`, `evaluation/results.py`); the folder's writer
  holds its advisory lock (`state_locks.py`), which Postgres releases when the writer's connection ends.

`reap_dead_runs` (called by `open_session`, so by every churnbench command that opens the state folder, and by
the `dead_runs` sensor while `churnbench ui` runs; `results` and `verify-results` call `reap_dead_catalog_rows`,
this module's half that imports no Dagster until it has a run to record) reports a STARTED or STARTING run whose
process is gone as failed through the instance (`report_run_failed`, the event Dagster writes itself when a run
fails), and records a `running` catalog row failed when its results folder's lock is free, whichever host its
writer ran on (complete, if the folder was completed before the kill), and then the Dagster run the row names
(`dagster_run_id`) if it is still STARTED or STARTING: `results list` used to leave it STARTED until the next
materializing command. A pid that now belongs to another process does not keep a run alive: the start times
differ. Dagster runs of another host with no catalog row (an input build of a remote engine worker) are left
alone: this machine cannot tell whether their processes live.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.results import SUMMARY_FILE, TIMINGS_FILE, ResultsStore
from churn_assets.files import process_gone, process_stamp
from churn_assets.state import StatePaths
from churn_assets.state_locks import state_locks
from churn_assets.unique_keys import load_json

if TYPE_CHECKING:
    import dagster as dg

# Dagster's prefix of hidden tags (`dagster._core.storage.tags.HIDDEN_TAG_PREFIX`): kept on the run, left out of
# the tags its GraphQL returns, so the Runs list shows none of these bookkeeping tags.
HIDDEN_PREFIX = ".dagster/churnbench/"
PID_TAG = f"{HIDDEN_PREFIX}pid"
CREATED_TAG = f"{HIDDEN_PREFIX}pid_created"
HOST_TAG = f"{HIDDEN_PREFIX}host"
# What a run recorded before decision 323 carries instead: read back, never written.
LEGACY_TAGS = {PID_TAG: "churnbench/pid", CREATED_TAG: "churnbench/pid_created", HOST_TAG: "churnbench/host"}


def tag_value(tags: Mapping[str, str], key: str, legacy: Mapping[str, str] = LEGACY_TAGS) -> str | None:
    """The value of a process tag `key` on a run: its hidden form, else the visible one an older version wrote."""
    value = tags.get(key)
    return value if value is not None else tags.get(legacy.get(key, key))


def has_process_tags(tags: Mapping[str, str]) -> bool:
    """Whether the run already records the process that runs it (in either form)."""
    return bool(tag_value(tags, PID_TAG))


# A launched run that no process runs yet. Dagster copies a run's tags to its re-execution, so a re-executed run
# would otherwise carry its parent's stamp, and the reaper would record it failed as soon as the parent's process
# was gone (a canceled cell's worker process exits); the process that takes the run stamps it again.
UNSTAMPED = {PID_TAG: "", CREATED_TAG: "", HOST_TAG: ""}


def process_tags() -> dict[str, str]:
    """This process's stamp as Dagster run tags."""
    stamp = process_stamp()
    return {PID_TAG: str(stamp["pid"]), CREATED_TAG: repr(stamp["create_time"]), HOST_TAG: stamp["host"]}


def process_stamp_of(tags: Mapping[str, str]) -> dict[str, Any] | None:
    """The stamp a run's tags record (either form), or None when it records none or a malformed one."""
    pid, created, host = (tag_value(tags, k) for k in (PID_TAG, CREATED_TAG, HOST_TAG))
    if pid is None or created is None or host is None:
        return None
    try:
        return {"pid": int(pid), "create_time": float(created), "host": host}
    except ValueError:
        return None


def runs_of_host(instance: dg.DagsterInstance, host: str, statuses: list[dg.DagsterRunStatus]) -> list[dg.DagsterRun]:
    """The runs with `statuses` whose tags say this host ran them, tagged in either form (one query per form:
    Dagster's run filter matches every tag it is given)."""
    import dagster as dg

    found: dict[str, dg.DagsterRun] = {}
    for key in (HOST_TAG, LEGACY_TAGS[HOST_TAG]):
        for run in instance.get_runs(filters=dg.RunsFilter(statuses=statuses, tags={key: host})):
            found.setdefault(run.run_id, run)
    return list(found.values())


@dataclass(frozen=True)
class DeadRun:
    """One run found dead: where (`dagster` or `catalog`), which, and what it was recorded as."""

    where: str
    ref: str
    recorded: str
    pid: int | None

    def line(self) -> str:
        what = "Dagster run" if self.where == "dagster" else "results catalog run"
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"{what} {self.ref}: its process{pid} is gone; recorded {self.recorded}"


def reap_dead_runs(paths: StatePaths, instance: dg.DagsterInstance, warehouse_url: str | None) -> list[DeadRun]:
    """Record as failed every run of this state folder whose process is gone; returns what it recorded."""
    found = _reap_dagster_runs(instance)
    if warehouse_url:
        found += reap_dead_catalog_rows(paths, RunCatalog(warehouse_url), lambda: instance)
    return found


def record_dagster_run_failed(instance: dg.DagsterInstance, run_id: str, message: str) -> bool:
    """Report a Dagster run failed if it is still STARTED or STARTING (False: unknown, or it ended already)."""
    import dagster as dg

    run = instance.get_run_by_id(run_id)
    if run is None or run.status not in (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING):
        return False
    instance.report_run_failed(run, message=message)
    return True


def _reap_dagster_runs(instance: dg.DagsterInstance) -> list[DeadRun]:
    import dagster as dg

    out = []
    host = process_stamp()["host"]
    for run in runs_of_host(instance, host, [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING]):
        stamp = process_stamp_of(run.tags)
        if stamp is None or process_gone(stamp) is not True:
            continue
        instance.report_run_failed(run, message=(
            f"the process of this run (pid {stamp['pid']} on {stamp['host']}) is gone: killed or crashed; "
            "recorded failed by churnbench (run the command again: it resumes what was checkpointed)"))
        out.append(DeadRun("dagster", run.run_id, "failed", stamp["pid"]))
    return out


def reap_dead_catalog_rows(paths: StatePaths, catalog: RunCatalog,
                           instance: Callable[[], dg.DagsterInstance] | None = None) -> list[DeadRun]:
    """Record failed (or complete) the `running` catalog rows of this state folder whose process is gone, and the
    Dagster run a failed row names (through `instance()`, called only when there is one: opening an instance
    costs seconds, and `results list` has none open)."""
    store = ResultsStore(paths.results_root, state_locks(paths))
    out = []
    for row in catalog.running_rows():
        run_dir = Path(row.results_dir)
        if not run_dir.is_relative_to(store.root):
            continue  # another state folder's run (a catalog on an external Postgres is shared)
        if store.is_writing(run_dir):
            continue  # its process (on any host) holds the folder: alive
        # A row is `running` only while its writer holds the folder's advisory lock (`runner.evaluate`), and the
        # lock ends with its holder's connection: free, the writer is gone, on this host or another.
        owner = store.read_owner(run_dir)
        pid = int(owner["pid"]) if owner else None
        ref = f"{row.run_id} {row.scenario_key}"
        if (run_dir / SUMMARY_FILE).exists():
            summary = load_json((run_dir / SUMMARY_FILE).read_text(), str(run_dir / SUMMARY_FILE))
            timings_file = run_dir / TIMINGS_FILE
            timings = load_json(timings_file.read_text(), str(timings_file)) if timings_file.exists() else {}
            if catalog.mark_dead_complete(row, summary, timings):
                out.append(DeadRun("catalog", ref, "complete (its results folder was complete)", pid))
            continue
        done = store.checkpointed(run_dir)
        who = f"pid {pid}" if pid is not None else "no process recorded"
        message = f"killed: the run's process ({who}) is gone with {done} task(s) checkpointed; run it again to resume"
        if catalog.mark_dead(row, message):
            out.append(DeadRun("catalog", ref, "failed", pid))
            if row.dagster_run_id and instance is not None and \
                    record_dagster_run_failed(instance(), row.dagster_run_id, message):
                out.append(DeadRun("dagster", row.dagster_run_id, "failed", pid))
    return out
