"""Launch latency of a run launched from the UI: from its RUN_STARTING event to its first STEP_START (issue 36,
item 3; decision 271).

    python bench/bench_ui_launch.py --port 3000 --partition <eval_run partition key> [--launches 3]

Launches the `eval_run` partition (a finished scenario: the step reuses its result, so the step itself is short)
through the UI's GraphQL API the way the Launchpad does, one launch after another, waits for each to end, and
reads its event log: RUN_STARTING (the run launcher started it), RUN_START (its process has loaded the code
location), the first STEP_START. Prints each launch's seconds and the load average, and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from typing import Any

LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
EVENTS = """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { __typename
  ... on MessageEvent { timestamp } } } } }"""
STATUS = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"


def gql(port: int, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql",
                                     data=json.dumps({"query": query, "variables": variables}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["data"]


def launch_once(port: int, partition: str) -> dict[str, Any]:
    params = {"selector": {"repositoryLocationName": "churnbench", "repositoryName": "__repository__",
                           "jobName": "__ASSET_JOB", "assetSelection": [{"path": ["eval_run"]}]},
              "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]}}
    load = os.getloadavg()[0]
    launched = gql(port, LAUNCH, {"params": params})["launchRun"]
    if launched["__typename"] != "LaunchRunSuccess":
        raise SystemExit(f"launch refused: {launched}")
    run_id = launched["run"]["runId"]
    while gql(port, STATUS, {"id": run_id})["runOrError"]["status"] not in ("SUCCESS", "FAILURE", "CANCELED"):
        time.sleep(1)
    events = gql(port, EVENTS, {"id": run_id})["logsForRun"]["events"]
    first = {}
    for e in events:
        first.setdefault(e["__typename"], float(e["timestamp"]) / 1000)
    starting, started, step = (first.get(k) for k in ("RunStartingEvent", "RunStartEvent", "ExecutionStepStartEvent"))
    if starting is None or step is None:
        raise SystemExit(f"run {run_id}: no RUN_STARTING or STEP_START event ({sorted(first)})")
    return {"run_id": run_id, "load": round(load, 2), "to_step_start_s": round(step - starting, 1),
            "to_run_start_s": round((started or step) - starting, 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--partition", required=True)
    parser.add_argument("--launches", type=int, default=3)
    args = parser.parse_args(argv)
    found = []
    for n in range(args.launches):
        found.append(launch_once(args.port, args.partition))
        print(f"launch {n + 1}: {json.dumps(found[-1])}", flush=True)
    print(json.dumps({"median_to_step_start_s": statistics.median(f["to_step_start_s"] for f in found),
                      "median_to_run_start_s": statistics.median(f["to_run_start_s"] for f in found),
                      "loads": [f["load"] for f in found], "launches": found}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
