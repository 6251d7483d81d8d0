"""The sweep and the scenario-inputs sensor, driven the way the UI drives them: a running `churnbench ui` (its
webserver and daemon), the Launchpad's run config and launch mutation over GraphQL, run status polled until it
ends, materializations read back over GraphQL."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import pytest
import yaml

from churn_assets.deployment import DEPLOYMENT_ENV
from churn_assets.services import free_port
from churn_assets.sweeps.markdown import parse_table
from churn_assets.sweeps.regression import BASELINE_ENV

from .test_ui import wait_for_asset_nodes, wait_until_answering

if TYPE_CHECKING:
    from churn_assets.orchestration.materialize import Session

pytestmark = pytest.mark.integration

LOCATION = "churnbench"  # workspace.yaml
EXAMPLE_LOCATION = "production_tiers"  # workspace.yaml: examples/production_tiers/definitions.py
RUN_TIMEOUT_S = 900
TASKS = 20
WORLD_NAME = "uisweep"  # its own world: the UI's runs use 20 tasks, the in-process tests 180

LAUNCH = """
mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename
  ... on LaunchRunSuccess { run { runId } }
  ... on RunConfigValidationInvalid { errors { message } }
  ... on PythonError { message }
  ... on InvalidSubsetError { message }
} }"""


def gql(port: int, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql",
                                     data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        data = json.loads(response.read())
    assert "errors" not in data, data
    return data["data"]


def wait_for_run(port: int, run_id: str) -> str:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        status = gql(port, "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                     {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            return status
        time.sleep(2)
    raise AssertionError(f"run {run_id} did not end within {RUN_TIMEOUT_S} s")


def run_log(port: int, run_id: str) -> str:
    data = gql(port, "query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { "
                     "__typename ... on MessageEvent { message } ... on ExecutionStepFailureEvent { "
                     "error { message } failureMetadata { description } } } } } }", {"id": run_id})
    return "\n".join(f"{e.get('message') or ''} {(e.get('error') or {}).get('message', '')} "
                     f"{(e.get('failureMetadata') or {}).get('description') or ''}"
                     for e in data["logsForRun"]["events"])


def materialized_partitions(port: int, asset: str) -> set[str]:
    data = gql(port, "query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode { "
                     "assetMaterializations(limit: 200) { partition } } } }", {"k": {"path": [asset]}})
    return {m["partition"] for m in data["assetNodeOrError"]["assetMaterializations"]}


@pytest.fixture(scope="module")
def ui(state_dir: Path, services: object, tmp_path_factory: pytest.TempPathFactory, churnbench_exe: str,
       cli_env: Callable[..., dict[str, str]]) -> Iterator[int]:
    """`churnbench ui` on the session's state folder, with a deployment of 20 tasks per task set, and a regression
    baseline that does not exist (the regression job launched here fails fast on it, before running its sweep).
    `services`: the session's own, so that they are stopped at its end even when this module runs alone (the UI
    leaves the services it started running, as every command does)."""
    folder = tmp_path_factory.mktemp("ui-sweep")
    packaged = yaml.safe_load((Path(__file__).parents[2] / "churn_assets" / "deployment.yaml").read_text())
    packaged["tasks"]["count"] = TASKS
    deployment = folder / "deployment.yaml"
    deployment.write_text(yaml.safe_dump(packaged))
    port = free_port()
    log = folder / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([churnbench_exe, "ui", "--port", str(port)],
                                env=cli_env(state_dir, **{DEPLOYMENT_ENV: str(deployment),
                                                          BASELINE_ENV: str(folder / "no-baseline.json")}),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until_answering(port, proc, log)
        wait_for_asset_nodes(port, proc, log)
        yield port
    finally:
        import signal

        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_the_ui_lists_the_jobs_and_sensors(ui: int) -> None:
    repos = repositories(ui)
    repo = repos[LOCATION]
    assert {"sweep", "build_scenario", "regression"} <= {j["name"] for j in repo["jobs"]}
    sensors = {s["name"]: s["sensorState"]["status"] for s in repo["sensors"]}
    assert sensors["scenario_inputs"] == "RUNNING"
    assert sensors["dead_runs"] == "RUNNING"  # runs whose process is gone are recorded failed while the UI is up
    schedules = {s["name"]: s for s in repo["schedules"]}
    nightly = schedules["nightly_regression"]
    assert (nightly["cronSchedule"], nightly["executionTimezone"]) == ("0 2 * * *", "UTC")
    assert nightly["pipelineName"] == "regression" and nightly["scheduleState"]["status"] == "STOPPED"
    # The example code location: its refresh sensor is listed, stopped (opening the UI launches nothing).
    example = {s["name"]: s["sensorState"]["status"] for s in repos[EXAMPLE_LOCATION]["sensors"]}
    assert example == {"churnbench_tier_refresh_sensor": "STOPPED"}


def repositories(port: int) -> dict[str, dict[str, Any]]:
    data = gql(port, "{ repositoriesOrError { ... on RepositoryConnection { nodes { location { name } jobs { name } "
                     "sensors { name sensorState { status } } schedules { name cronSchedule executionTimezone "
                     "pipelineName scheduleState { status } } } } } }")
    return {r["location"]["name"]: r for r in data["repositoriesOrError"]["nodes"]}


ASSET_NODES = """{ assetNodes { assetKey { path } repository { location { name } } description tags { key value }
  internalFreshnessPolicy { __typename ... on TimeWindowFreshnessPolicy { failWindowSeconds warnWindowSeconds } }
  assetChecksOrError { ... on AssetChecks { checks { name blocking } } } } }"""


def test_the_ui_shows_the_tiers_the_checks_and_the_example_location(ui: int) -> None:
    nodes = {(n["repository"]["location"]["name"], "/".join(n["assetKey"]["path"])): n
             for n in gql(ui, ASSET_NODES)["assetNodes"]}
    staged = nodes[(LOCATION, "staged_prices")]
    tags = {t["key"]: t["value"] for t in staged["tags"]}
    assert (tags["churnbench/entity_class"], tags["churnbench/freshness_tier"], tags["churnbench/ttl_days"]) == (
        "prices", "warm", "7")
    assert "freshness tier warm, TTL 7 day(s)" in staged["description"]
    assert staged["internalFreshnessPolicy"] is None  # docs/rules.md, "No wall clock"
    hot = {t["key"]: t["value"] for t in nodes[(LOCATION, "staged_assignments")]["tags"]}
    assert (hot["churnbench/freshness_tier"], hot["churnbench/ttl_days"]) == ("hot", "1")
    checks = {c["name"]: c["blocking"] for c in nodes[(LOCATION, "eval_run")]["assetChecksOrError"]["checks"]}
    assert {f"served_age_within_ttl_{c}" for c in ("assignments", "user_status", "prices", "cost_center_membership",
                                                   "contract_terms", "vendor_dims")} <= set(checks)
    gate = {c["name"]: c["blocking"] for c in nodes[(LOCATION, "regression_report")]["assetChecksOrError"]["checks"]}
    assert gate == {"regression_gate": True}
    # The example's wall-clock caches carry the registry's policies: TTL k -> warn k days, fail k + 1 days.
    prices = nodes[(EXAMPLE_LOCATION, "vendor_price_list")]["internalFreshnessPolicy"]
    assert (prices["warnWindowSeconds"], prices["failWindowSeconds"]) == (7 * 86400, 8 * 86400)
    assert nodes[(EXAMPLE_LOCATION, "ticket_feed")]["internalFreshnessPolicy"] is None  # live: never cached


def test_the_regression_job_launches_from_the_ui(ui: int) -> None:
    params = {"selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__",
                           "jobName": "regression"}, "runConfigData": {}}
    launched = gql(ui, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    assert wait_for_run(ui, run_id) == "FAILURE"  # this UI's baseline file does not exist: it stops at once
    log = run_log(ui, run_id)
    assert "no-baseline.json: file not found" in log, log[-3000:]
    assert "evaluated, stale" not in log  # nothing ran before the baseline was read


SWEEP: dict[str, str] = {}  # the sweep test's sweep id and run, for the lineage test after it


def _sweep_params(config: dict[str, Any]) -> dict[str, Any]:
    return {"selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", "jobName": "sweep"},
            "runConfigData": {"ops": {"run_sweep_cells": {"config": config}}}}


RUNS = """query($filter: RunsFilter) { runsOrError(filter: $filter) { ... on Runs { results {
  runId jobName status creationTime tags { key value } } } } }"""
ROOTS = """query($filter: RunsFilter) { runsFeedOrError(view: ROOTS, filter: $filter, limit: 50) {
  ... on RunsFeedConnection { results { __typename id } } } }"""


def runs_tagged(port: int, key: str, value: str) -> list[dict[str, Any]]:
    found = gql(port, RUNS, {"filter": {"tags": [{"key": key, "value": value}]}})["runsOrError"]["results"]
    for run in found:
        run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
    return found


def test_a_sweep_launched_like_the_launchpad_evaluates_every_cell_and_reports(ui: int) -> None:
    # Two arms, two T' (the preset's), at gaps 1 and 2 instead of its 1 and 28: the Launchpad's `gaps` field is
    # used, and the tiered arm's refreshes build 2 days of inputs, not 28. A grid changed from the preset's: a
    # custom sweep, whose report names the grid that ran.
    config = {"preset": "smoke", "overrides": [f"name={WORLD_NAME}"], "gaps": [1, 2]}
    launched = gql(ui, LAUNCH, {"params": _sweep_params(config)})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    status = wait_for_run(ui, run_id)
    log = run_log(ui, run_id)
    assert status == "SUCCESS", log[-4000:]
    assert log.count("evaluated, stale") == 4
    cells = {p for p in materialized_partitions(ui, "eval_run") if WORLD_NAME in p}
    assert len(cells) == 4
    [sweep_id] = [r for r in materialized_partitions(ui, "sweep_report") if r.startswith("custom-")]
    SWEEP.update(sweep_id=sweep_id, run_id=run_id)
    report = latest_metadata(ui, "sweep_report", sweep_id)["report"]
    grid = {r["what"]: r["values"] for r in parse_table(report.split("## Grid", 1)[1])}
    assert grid["arms"] == "grounding, naive" and grid["T"] == "2024-01-30", grid
    assert grid["T'"].startswith("gaps T - T' of 1, 2 day(s)") and "a custom grid from the `smoke` preset" in report

    # The Runs list shows the sweep as one entry, its own run; every run it started carries the sweep's id and
    # launcher and is filed under the sweep-runs backfill, and nothing else ran meanwhile untagged.
    roots = gql(ui, ROOTS, {"filter": {"tags": [{"key": "churnbench/sweep", "value": sweep_id}]}})
    assert [(e["__typename"], e["id"]) for e in roots["runsFeedOrError"]["results"]] == [("Run", run_id)]
    tagged = runs_tagged(ui, "churnbench/sweep", sweep_id)
    started = [r for r in tagged if r["runId"] != run_id]
    assert {r["tags"]["churnbench/launched_by"] for r in tagged} == {"ui"}
    assert all(r["tags"].get("dagster/backfill") == "sweep-runs" and r["tags"]["churnbench/sweep_run"] == run_id
               for r in started)
    inputs = [r for r in started if r["tags"].get("churnbench/started_by") == "scenario_materializer"]
    evaluations = [r for r in started if r["tags"].get("dagster/partition", "") in cells]
    rest = sorted(r["tags"]["dagster/partition"] for r in started if r not in inputs and r not in evaluations)
    world = next(iter(cells)).rsplit("__", 1)[1]
    assert len(evaluations) == 4 and len(inputs) > 4 and rest == sorted([sweep_id, world]), rest  # report, ledger
    since = min(r["creationTime"] for r in tagged)
    everything = gql(ui, RUNS, {"filter": {"createdAfter": since - 0.001}})["runsOrError"]["results"]
    assert {r["runId"] for r in everything} == {r["runId"] for r in tagged}, "a run of the sweep escaped its tags"

    # Each run the sweep started is Dagster's to re-execute (it carries the sweep's job origin, run_body.py): the
    # run page's "Re-execute" (its mutation) on a cell's run launches that cell again, in the run worker.
    origins = gql(ui, """query($tags: [ExecutionTag!]) { runsOrError(filter: {tags: $tags}) { ... on Runs {
        results { runId repositoryOrigin { repositoryLocationName } } } } }""",
                  {"tags": [{"key": "churnbench/sweep_run", "value": run_id}]})["runsOrError"]["results"]
    assert len(origins) == len(started) and all(r["repositoryOrigin"] == {"repositoryLocationName": LOCATION}
                                                 for r in origins), origins
    again = gql(ui, REEXECUTE, {"p": {"parentRunId": evaluations[0]["runId"], "strategy": "ALL_STEPS"}})
    assert again["launchRunReexecution"]["__typename"] == "LaunchRunSuccess", again
    retry = again["launchRunReexecution"]["run"]["runId"]
    assert wait_for_run(ui, retry) == "SUCCESS", run_log(ui, retry)[-3000:]
    assert f"{evaluations[0]['tags']['dagster/partition']}: reusing the finished result" in run_log(ui, retry)

    relaunched = gql(ui, LAUNCH, {"params": _sweep_params(config)})["launchRun"]
    assert wait_for_run(ui, relaunched["run"]["runId"]) == "SUCCESS"
    assert run_log(ui, relaunched["run"]["runId"]).count(": reused, stale") == 4


REEXECUTE = """mutation($p: ReexecutionParams!) { launchRunReexecution(reexecutionParams: $p) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
TERMINATE = """mutation($ids: [String!]!) { terminateRuns(runIds: $ids, terminatePolicy: SAFE_TERMINATE) {
  __typename ... on TerminateRunsResult { terminateRunResults { __typename } } } }"""


@pytest.mark.parametrize(("parallelism", "gaps"), [(2, [3, 5]), (1, [4, 6])])  # gaps: cells not yet evaluated
def test_terminate_in_the_ui_cancels_the_sweep_and_the_run_it_was_running(ui: int, parallelism: int,
                                                                          gaps: list[int]) -> None:
    """Decision 333: the sweep's run executes in the engine's run worker and sends its input builds and cells to
    two cell workers (`parallelism: 2`, as from the command line), or runs them in its own process (1); the UI's
    Terminate (its mutation) revokes the sweep's job in the run worker, and the runs it had started end CANCELED
    with it, no cell evaluated after (decision 334: a run on Dagster's run body that ends canceled stops the
    sweep; the body catches the interrupt that `execute_in_process` let out)."""
    config = {"preset": "smoke", "overrides": [f"name={WORLD_NAME}"], "gaps": gaps, "parallelism": parallelism}
    launched = gql(ui, LAUNCH, {"params": _sweep_params(config)})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not [r for r in runs_tagged(ui, "churnbench/sweep_run", run_id)
               if r["status"] == "STARTED" and "__tp" in r["tags"].get("dagster/partition", "")]:  # a cell's
        assert time.monotonic() < deadline, "the sweep started no cell"
        time.sleep(0.5)
    result = gql(ui, TERMINATE, {"ids": [run_id]})["terminateRuns"]["terminateRunResults"]
    assert result == [{"__typename": "TerminateRunSuccess"}], result
    assert wait_for_run(ui, run_id) == "CANCELED", run_log(ui, run_id)[-3000:]
    ended = time.monotonic() + 30
    while any(r["status"] in ("STARTED", "STARTING", "CANCELING") for r in runs_tagged(ui, "churnbench/sweep_run",
                                                                                          run_id)):
        assert time.monotonic() < ended, runs_tagged(ui, "churnbench/sweep_run", run_id)
        time.sleep(0.5)
    statuses = [r["status"] for r in runs_tagged(ui, "churnbench/sweep_run", run_id)]
    assert "CANCELED" in statuses and "FAILURE" not in statuses, statuses
    assert "evaluated," not in run_log(ui, run_id), run_log(ui, run_id)[-3000:]

    # A canceled run's retry is its run page's "Re-execute" (the mutation): it ends SUCCESS in the run worker,
    # although the cell worker process its parent ran in has exited (the parent's stamp is not inherited).
    canceled = next(r for r in runs_tagged(ui, "churnbench/sweep_run", run_id) if r["status"] == "CANCELED")
    again = gql(ui, REEXECUTE, {"p": {"parentRunId": canceled["runId"], "strategy": "ALL_STEPS"}})
    assert again["launchRunReexecution"]["__typename"] == "LaunchRunSuccess", again
    retry = again["launchRunReexecution"]["run"]["runId"]
    assert wait_for_run(ui, retry) == "SUCCESS", run_log(ui, retry)[-3000:]


def latest_metadata(port: int, asset: str, partition: str) -> dict[str, Any]:
    """The metadata of the latest materialization of an asset's partition (text values as text, JSON parsed)."""
    data = gql(port, """query($k: AssetKeyInput!, $p: [String!]) { assetNodeOrError(assetKey: $k) { ... on AssetNode {
        assetMaterializations(partitions: $p, limit: 1) { metadataEntries { label __typename
          ... on MarkdownMetadataEntry { mdStr } ... on TextMetadataEntry { text }
          ... on JsonMetadataEntry { jsonString } ... on UrlMetadataEntry { url } } } } } }""",
               {"k": {"path": asset.split("/")}, "p": [partition]})
    [event] = data["assetNodeOrError"]["assetMaterializations"]
    out: dict[str, Any] = {}
    for entry in event["metadataEntries"]:
        value = entry.get("mdStr") or entry.get("text") or entry.get("url")
        out[entry["label"]] = json.loads(entry["jsonString"]) if "jsonString" in entry else value
    return out


def test_the_launchpad_offers_the_enumerated_fields_and_refuses_an_unknown_arm(ui: int) -> None:
    from churn_assets.arms.registry import arm_names
    from churn_assets.fabric.saas_profiles import SAAS_PROFILES
    from churn_assets.sweeps.presets import PRESETS
    from churn_assets.sweeps.spec import AGENTS

    schema = gql(ui, """{ runConfigSchemaOrError(selector: {repositoryLocationName: "churnbench",
        repositoryName: "__repository__", pipelineName: "sweep"}) { ... on RunConfigSchema { allConfigTypes {
        ... on EnumConfigType { givenName values { value } } } } } }""")["runConfigSchemaOrError"]
    enums = {t["givenName"]: [v["value"] for v in t["values"]] for t in schema["allConfigTypes"] if t.get("givenName")}
    assert enums == {"Arm": list(arm_names()), "Preset": list(PRESETS), "Agent": list(AGENTS),
                     "SaasProfile": list(SAAS_PROFILES)}
    before = len(gql(ui, RUNS, {"filter": {"pipelineName": "sweep"}})["runsOrError"]["results"])
    launched = gql(ui, LAUNCH, {"params": _sweep_params({"preset": "smoke", "arms": ["grounding", "oracle"]})})
    refused = launched["launchRun"]
    assert refused["__typename"] == "RunConfigValidationInvalid", refused
    assert any("arms[1]" in e["message"] and "not in enum type Arm" in e["message"] for e in refused["errors"])
    assert len(gql(ui, RUNS, {"filter": {"pipelineName": "sweep"}})["runsOrError"]["results"]) == before


PARTITIONS = {"world": "ledger", "world_day": "task_set", "scenario": "eval_run", "sweep": "sweep_report"}


def partition_lists(port: int) -> dict[str, set[str]]:
    nodes = {"/".join(n["assetKey"]["path"]): n for n in gql(port, "{ assetNodes { assetKey { path } partitionKeys "
                                                                  "} }")["assetNodes"]}
    return {name: set(nodes[asset]["partitionKeys"]) for name, asset in PARTITIONS.items()}


def test_a_t_outside_the_calendar_is_refused_naming_t_and_adding_no_partition(ui: int) -> None:
    before = partition_lists(ui)
    config = {"preset": "smoke", "overrides": ["name=uicalendar"], "t": "2024-03-01"}
    launched = gql(ui, LAUNCH, {"params": _sweep_params(config)})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    assert wait_for_run(ui, launched["run"]["runId"]) == "FAILURE"
    [failure] = step_failures(ui, launched["run"]["runId"])
    assert failure.startswith("t: T = 2024-03-01 is outside the calendar of world uicalendar-s42-"), failure
    assert failure.endswith("(2024-01-01..2024-01-30)") and "\n" not in failure, failure
    assert partition_lists(ui) == before  # no world, day, scenario or sweep partition added
    tags = gql(ui, "query($id: ID!) { runOrError(runId: $id) { ... on Run { tags { key value } } } }",
               {"id": launched["run"]["runId"]})["runOrError"]["tags"]
    assert "churnbench/sweep" not in {t["key"] for t in tags}, tags  # issue 46: no tag of a sweep never made


FAILURES = """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { __typename
  ... on ExecutionStepFailureEvent { error { message className stack } }
  ... on RunFailureEvent { error { message className stack } } } } } }"""
PROCESS_TAGS = {"churnbench/pid", "churnbench/pid_created", "churnbench/host", "churnbench/run_worker_pid", "host"}


def test_a_refused_launch_fails_in_one_line_naming_the_field_and_the_runs_list_hides_process_tags(
        ui: int, session: Session, small_world: str) -> None:
    """Issue 46: a Launchpad config the run refuses (T' after T) shows, as the step's failure and as the run's, the
    one line naming the field, with no `dagster._core` class path and no stack; and no run in the Runs list shows
    the tags that record which process runs it, which the runs still carry, hidden (decision 323)."""
    from churn_assets.orchestration import dead_runs, run_launcher

    config = {"preset": "smoke", "overrides": ["name=uirefused"], "t": "2024-01-20", "t_primes": ["2024-01-25"]}
    launched = gql(ui, LAUNCH, {"params": _sweep_params(config)})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    assert wait_for_run(ui, run_id) == "FAILURE"
    events = gql(ui, FAILURES, {"id": run_id})["logsForRun"]["events"]
    failures = {e["__typename"]: e["error"] for e in events if e.get("error")}
    assert set(failures) == {"ExecutionStepFailureEvent", "RunFailureEvent"}, events
    for where, error in failures.items():
        line = error["message"]
        assert line.startswith("sweep smoke: t_primes: T'=2024-01-25 is after t (T=2024-01-20)"), (where, line)
        assert "\n" not in line and "dagster._core" not in line and error["stack"] == [], (where, error)

    runs = gql(ui, RUNS, {"filter": {}})["runsOrError"]["results"]
    shown = {t["key"] for r in runs for t in r["tags"]}
    assert not shown & PROCESS_TAGS, shown & PROCESS_TAGS
    assert not [k for k in shown if k.endswith(("pid", "pid_created", "host"))], shown
    # Hidden, not gone: the UI-launched run has its engine job and its run worker's process stamp, the CLI's ledger
    # run its process stamp.
    refused = session.instance.get_run_by_id(run_id)
    assert refused is not None and run_launcher.TASK_TAG in refused.tags, refused
    assert dead_runs.process_stamp_of(refused.tags) is not None, refused.tags
    ledger_runs = session.instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": small_world}))
    assert any(dead_runs.process_stamp_of(r.tags) is not None for r in ledger_runs), [r.tags for r in ledger_runs]


def step_failures(port: int, run_id: str) -> list[str]:
    data = gql(port, "query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { __typename "
                     "... on ExecutionStepFailureEvent { failureMetadata { description } } } } } }", {"id": run_id})
    return [(e.get("failureMetadata") or {}).get("description") or "" for e in data["logsForRun"]["events"]
            if e["__typename"] == "ExecutionStepFailureEvent"]


def _add_partition(port: int, partitions: str, key: str) -> None:
    added = gql(port, """mutation($r: RepositorySelector!, $p: String!, $k: String!) {
        addDynamicPartition(repositorySelector: $r, partitionsDefName: $p, partitionKey: $k) { __typename } }""",
                {"r": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__"}, "p": partitions,
                 "k": key})
    assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", added


def _launch_partition(port: int, asset: str, key: str) -> str:
    params = {"selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__",
                           "jobName": "__ASSET_JOB", "assetSelection": [{"path": asset.split("/")}]},
              "executionMetadata": {"tags": [{"key": "dagster/partition", "value": key}]}}
    launched = gql(port, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return str(launched["run"]["runId"])


def test_a_hand_added_world_partition_is_refused_naming_the_command_and_removed(ui: int) -> None:
    """A world id typed into "Add a partition" on `ledger`: its run fails in one line naming the command that
    registers a world, and the key leaves the partition list."""
    key = "handmade-s1-abcdef"
    _add_partition(ui, "world", key)
    run_id = _launch_partition(ui, "ledger", key)
    assert wait_for_run(ui, run_id) == "FAILURE"
    [failure] = step_failures(ui, run_id)
    assert "world handmade-s1-abcdef is not registered" in failure and "churnbench worlds add" in failure, failure
    assert "\n" not in failure, failure
    assert key not in partition_lists(ui)["world"]  # the run's step removed it


def test_an_evaluation_is_marked_when_an_input_it_read_changes_and_another_is_not(ui: int, state_dir: Path) -> None:
    """One staged partition that the gap-1 grounding cell read and the gap-2 one did not is rematerialized from the
    UI with other content: the `evaluation_inputs` sensor runs the gap-1 cell's `inputs_as_read` check, which fails
    naming the partition; the gap-2 cell's is not run again and stays passed. Putting the content back passes it
    again (the check compares data versions: the same rows are the same version)."""
    from churn_assets.fabric.postgres import connection
    from churn_assets.services import ensure_services
    from churn_assets.state import StatePaths

    assert SWEEP, "the sweep test (earlier in this module) makes the evaluations this test reads"
    cells = sorted(p for p in materialized_partitions(ui, "eval_run") if WORLD_NAME in p and p.startswith("grounding"))
    gap1, gap2 = (next(c for c in cells if f"__tp{d}__" in c) for d in ("20240129", "20240128"))
    read1, read2 = (latest_metadata(ui, "eval_run", c)["input_versions"] for c in (gap1, gap2))
    only1 = sorted(k for k in read1 if k.startswith("staged_prices[") and k not in read2)
    assert only1, (read1, read2)
    partition = only1[0][len("staged_prices["):-1]
    day, world = partition.split("|")
    urls = ensure_services(StatePaths.resolve(state_dir))
    table = f"{world.replace('-', '_')}_analytics.fct_price"
    with connection(urls.warehouse, autocommit=True) as conn:
        [price_key] = conn.execute(f"SELECT price_key FROM {table} WHERE valid_from <= %s AND valid_to IS NULL "
                                   "ORDER BY price_key LIMIT 1", (day,)).fetchone()
        conn.execute(f"UPDATE {table} SET price_change_reason = price_change_reason || ' (edited)' "
                     "WHERE price_key = %s", (price_key,))
    try:
        assert wait_for_run(ui, _launch_partition(ui, "staged_prices", partition)) == "SUCCESS"
        marked = wait_for_check(ui, gap1, passed=False)
        assert f"staged_prices[{partition}]: read at version" in marked["evaluation"]["description"], marked
        assert latest_check(ui, gap2)["evaluation"]["success"] is True
    finally:
        with connection(urls.warehouse, autocommit=True) as conn:
            conn.execute(f"UPDATE {table} SET price_change_reason = replace(price_change_reason, ' (edited)', '') "
                         "WHERE price_key = %s", (price_key,))
        assert wait_for_run(ui, _launch_partition(ui, "staged_prices", partition)) == "SUCCESS"
    assert wait_for_check(ui, gap1, passed=True)["evaluation"]["success"] is True


CHECKS = """query($p: String) { assetCheckExecutions(assetKey: {path: ["eval_run"]}, checkName: "inputs_as_read",
  partition: $p, limit: 1) { runId status timestamp evaluation { success description } } }"""


def latest_check(port: int, partition: str) -> dict[str, Any]:
    [found] = gql(port, CHECKS, {"p": partition})["assetCheckExecutions"]
    return found


def wait_for_check(port: int, partition: str, *, passed: bool) -> dict[str, Any]:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        found = latest_check(port, partition)
        if (found.get("evaluation") or {}).get("success") is passed:
            return found
        time.sleep(3)
    raise AssertionError(f"inputs_as_read of {partition} did not become {passed}: {latest_check(port, partition)}")


def test_an_eval_run_launched_with_missing_inputs_gets_them(ui: int, state_dir: Path) -> None:
    """A scenario defined (not built) and launched as an `eval_run` partition: the launch fails listing what is
    missing, the `scenario_inputs` sensor launches `build_scenario`, and the partition ends materialized."""
    from churn_assets.arms.registry import define_scenario
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.scenarios import register_scenario
    from churn_assets.orchestration.world_registry import add_world
    from churn_assets.state import StatePaths
    from churn_assets.world.config import load_config

    config = load_config(days=30, overrides=[f"name={WORLD_NAME}"])
    scenario = define_scenario(config.world_id, "naive", "tiered", dt.date(2024, 1, 20), dt.date(2024, 1, 21))
    with open_session(StatePaths.resolve(state_dir)) as session:
        add_world(session.paths, session.instance, config)  # registered by the sweep test too, when it ran first
        key = register_scenario(session.paths, session.instance, scenario)
    params = {"selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__",
                           "jobName": "__ASSET_JOB", "assetSelection": [{"path": ["eval_run"]}]},
              "executionMetadata": {"tags": [{"key": "dagster/partition", "value": key}]}}
    launched = gql(ui, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    assert wait_for_run(ui, launched["run"]["runId"]) == "FAILURE"
    log = run_log(ui, launched["run"]["runId"])
    assert "input partition(s) missing" in log, log
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while key not in materialized_partitions(ui, "eval_run"):
        assert time.monotonic() < deadline, "the scenario_inputs sensor did not get the partition materialized"
        time.sleep(3)
    query = ("query($tags: [ExecutionTag!]) { runsOrError(filter: {tags: $tags}) { ... on Runs { results { "
             "runId jobName status } } } }")
    after = [{"key": "churnbench/after_run", "value": launched["run"]["runId"]}]
    runs = gql(ui, query, {"tags": after})["runsOrError"]["results"]
    assert [r["jobName"] for r in runs] == ["build_scenario"]  # one run, requested once
    # The partition is recorded before the run itself ends: wait for its status.
    assert wait_for_run(ui, runs[0]["runId"]) == "SUCCESS"


def test_a_malformed_partition_key_added_in_the_ui_fails_in_one_line(ui: int) -> None:
    """A key typed into the UI's "Add a partition" dialog (the `addDynamicPartition` mutation) that is no
    scenario key: its launch fails with one line saying why, not a stack trace."""
    from churn_assets.orchestration.partitions import SCENARIO_PARTITIONS_NAME

    bad = "grounding-at-d28"
    added = gql(ui, """mutation($r: RepositorySelector!, $p: String!, $k: String!) {
        addDynamicPartition(repositorySelector: $r, partitionsDefName: $p, partitionKey: $k) { __typename } }""",
                {"r": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__"},
                 "p": SCENARIO_PARTITIONS_NAME, "k": bad})
    assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", added
    params = {"selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__",
                           "jobName": "__ASSET_JOB", "assetSelection": [{"path": ["eval_run"]}]},
              "executionMetadata": {"tags": [{"key": "dagster/partition", "value": bad}]}}
    launched = gql(ui, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    assert wait_for_run(ui, launched["run"]["runId"]) == "FAILURE"
    data = gql(ui, "query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { "
                   "__typename ... on ExecutionStepFailureEvent { error { message className } "
                   "failureMetadata { description metadataEntries { label ... on TextMetadataEntry { text } } } "
                   "} } } } }", {"id": launched["run"]["runId"]})
    [failure] = [e for e in data["logsForRun"]["events"] if e["__typename"] == "ExecutionStepFailureEvent"]
    description = (failure.get("failureMetadata") or {}).get("description") or ""
    assert f"'{bad}' is not a scenario key" in description and "\n" not in description.strip(), failure
    # A dg.Failure whose error is its description alone (issue 46): no class path, no stack, and no copy of the
    # line as an `error` metadata entry (the UI showed it twice in one row).
    assert (failure["error"] or {}).get("className") == "Failure", failure
    assert failure["error"]["message"] == description, failure
    entries = {e["label"]: e.get("text") for e in failure["failureMetadata"]["metadataEntries"]}
    assert "error" not in entries, failure
    assert bad not in partition_lists(ui)["scenario"]  # and the key no longer stays in the list
