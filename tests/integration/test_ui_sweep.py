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
from typing import Any

import pytest
import yaml

from churn_assets.deployment import DEPLOYMENT_ENV
from churn_assets.services import free_port
from churn_assets.sweeps.regression import BASELINE_ENV

from .test_ui import wait_for_asset_nodes, wait_until_answering

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
def ui(state_dir: Path, tmp_path_factory: pytest.TempPathFactory, churnbench_exe: str,
       cli_env: Callable[..., dict[str, str]]) -> Iterator[int]:
    """`churnbench ui` on the session's state folder, with a deployment of 20 tasks per task set, and a regression
    baseline that does not exist (the regression job launched here fails fast on it, before running its sweep)."""
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
    assert staged["internalFreshnessPolicy"] is None  # simulated calendar: no wall-clock policy (section 10)
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


def test_a_sweep_launched_like_the_launchpad_evaluates_every_cell_and_reports(ui: int) -> None:
    # Two arms, two T' (the preset's), at gaps 1 and 2 instead of its 1 and 28: the Launchpad's `gaps` field is
    # used, and the tiered arm's refreshes build 2 days of inputs, not 28.
    config = {"preset": "smoke", "overrides": [f"name={WORLD_NAME}"], "gaps": [1, 2]}
    params = {"selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__",
                           "jobName": "sweep"},
              "runConfigData": {"ops": {"run_sweep_cells": {"config": config}}}}
    launched = gql(ui, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    status = wait_for_run(ui, run_id)
    log = run_log(ui, run_id)
    assert status == "SUCCESS", log[-4000:]
    assert log.count("evaluated, stale") == 4
    cells = {p for p in materialized_partitions(ui, "eval_run") if WORLD_NAME in p}
    assert len(cells) == 4
    reports = materialized_partitions(ui, "sweep_report")
    assert any(r.startswith("smoke-") for r in reports)

    relaunched = gql(ui, LAUNCH, {"params": params})["launchRun"]
    assert wait_for_run(ui, relaunched["run"]["runId"]) == "SUCCESS"
    assert run_log(ui, relaunched["run"]["runId"]).count(": reused, stale") == 4


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
    # A dg.Failure: the UI shows its description as the failure, not an exception from deep in the code.
    assert (failure["error"] or {}).get("className") == "Failure", failure
    # Issue 35: the line is the failure's metadata too (`error`), as the CLI would print it; the trace stays in the log.
    entries = {e["label"]: e.get("text") for e in failure["failureMetadata"]["metadataEntries"]}
    assert entries.get("error") == description.strip(), failure
