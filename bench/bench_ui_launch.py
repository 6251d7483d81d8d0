"""Launch latency of a run launched from the UI, and how long fresh UI starts take (issue 36, item 3; decision 271;
issue 46, item 8).

Two modes:

    # a UI that is already running: N launches, one after another
    python bench/bench_ui_launch.py --port 3000 --partition <eval_run partition key> [--launches 3]

    # N fresh UI starts (issue 46, item 8: "median of three fresh UI starts at load 5")
    python bench/bench_ui_launch.py --fresh [--starts 3] --partition <key> [--port 3300] [--later-launches 1]
                                    [--load 5] [--warmup 240] [--json out.json]

Each launch runs the `eval_run` partition through the UI's GraphQL API the way the Launchpad does, waits for the
run to end and reads its event log: the launch request (the webserver queues the run; the daemon takes it),
RUN_STARTING (the daemon's run launcher sends it to the engine's run worker), "Started process" (a process of the
run worker took it: decision 333; the run worker imports the code location when it starts, at the first launch on a
state folder, and stays running between UI sessions), RUN_START, the first STEP_START, the run's end. Two figures
per launch:

- `to_step_start_s`: RUN_STARTING to the first STEP_START, the figure of docs/ui.md and decision 271 since issue
  36 (the 14.9 s at load 5 that issue 46 compares with); the issue's bound "first launch at most 20 s" is read
  against it.
- `submitted_to_step_start_s`: from the launch's GraphQL request to the first STEP_START, what a user clicking
  "Materialize" waits for; it adds the queue (the daemon dequeues runs on its own tick) to the figure above.

Fresh mode: for each start, `churnbench ui --port P` is started as a subprocess (its own session), and timed from
that moment until the UI's GraphQL answers (`server_up_s`) and until every code location of workspace.yaml has
loaded (`ui_up_s`: the UI can show assets and launch; the issue's "UI up in under 40 s" is read against it). Then
one launch (the first of the session), then `--later-launches` more. The UI is then stopped the way Ctrl-C does
(SIGINT to `churnbench ui`, which stops `dagster dev`'s process group), every process of it (webserver, daemon,
code servers) is waited for, killed if still there after 30 s, and nothing may listen on
the port any more, so each start is fresh. Start n uses port P + n - 1: a stopped UI's port stays in TIME_WAIT for
60 s, which `churnbench ui` takes for "taken" (it would then pick another port). The embedded services stay up
between starts (as between two `churnbench ui` of a user); the first start finds them running if they were
(`services` in the output says).

`--load L` puts the machine at a synthetic load: L CPU-spinning processes (plain `python` busy loops, niceness 0,
nothing else) run from before the first start to the end, after a warm-up until the 1-minute load average reaches
90% of L (at most `--warmup` s). /proc/loadavg is read every second during each start; each start reports the
1-minute load average at its start, when the UI was up, at its first launch, and the range over the start. The
load is synthetic: busy loops compete for the CPU but not for memory, disk or the database the way a sweep does.

The partition must be a finished scenario of this code version, so the launched step reuses its result (the step is
short; `step_to_end_s` shows it). A finished result belongs to its code version (the commit, plus a hash of
uncommitted changes): prepare it on a clean tree at the commit measured, and again after each commit or edit (a
second `churnbench run` of the same scenario answers again in about 30 s, its inputs being built). Preparation on a
state folder (about 3 minutes at idle, once):

    export CHURNBENCH_STATE_DIR=/some/state
    churnbench worlds add --days 30 --materialize       # prints the world id, e.g. default-s42-1baecb
    churnbench run --world default-s42-1baecb --arm grounding --t-prime 2024-01-15 --t 2024-01-29
    # partition: grounding__tiered__tp20240115__t20240129__det__default__default-s42-1baecb

Run the bench with the same CHURNBENCH_STATE_DIR (and PYTHONPATH, for a worktree whose venv is another clone's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from churn_assets.commands.ui import port_is_free  # as the webserver binds: a port in TIME_WAIT is free

LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
EVENTS = """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { __typename
  ... on MessageEvent { timestamp message } } } } }"""
STATUS = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"
LOCATIONS = """{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")
STOP_WAIT_S = 30.0
START_TIMEOUT_S = 600.0


def gql(port: int, query: str, variables: dict[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql",
                                     data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())["data"]


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def launch_once(port: int, partition: str) -> dict[str, Any]:
    params = {"selector": {"repositoryLocationName": "churnbench", "repositoryName": "__repository__",
                           "jobName": "__ASSET_JOB", "assetSelection": [{"path": ["eval_run"]}]},
              "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]}}
    load = os.getloadavg()[0]
    submitted = time.time()
    launched = gql(port, LAUNCH, {"params": params})["launchRun"]
    if launched["__typename"] != "LaunchRunSuccess":
        raise SystemExit(f"launch refused: {launched}")
    run_id = launched["run"]["runId"]
    status = ""
    while status not in FINISHED:
        time.sleep(1)
        status = gql(port, STATUS, {"id": run_id})["runOrError"]["status"]
    events = gql(port, EVENTS, {"id": run_id})["logsForRun"]["events"]
    first: dict[str, float] = {}
    for e in events:
        stamp = float(e["timestamp"]) / 1000
        first.setdefault(e["__typename"], stamp)
        if e["__typename"] == "EngineEvent" and (e.get("message") or "").startswith("Started process"):
            first.setdefault("forked", stamp)
    starting, started, step = (first.get(k) for k in ("RunStartingEvent", "RunStartEvent", "ExecutionStepStartEvent"))
    if starting is None or step is None:
        raise SystemExit(f"run {run_id}: no RUN_STARTING or STEP_START event ({sorted(first)})")
    ended = first.get("RunSuccessEvent") or first.get("RunFailureEvent") or first.get("RunCanceledEvent")

    def since(start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else round(end - start, 1)

    return {"run_id": run_id, "status": status, "load": round(load, 2),
            "to_step_start_s": round(step - starting, 1), "to_run_start_s": round((started or step) - starting, 1),
            "submitted_to_step_start_s": round(step - submitted, 1),
            # the parts of submission to STEP_START
            "submitted_to_run_starting_s": round(starting - submitted, 1),
            "run_starting_to_forked_s": since(starting, first.get("forked")),
            "forked_to_run_start_s": since(first.get("forked"), started),
            "run_start_to_step_start_s": since(started, step),
            "step_to_end_s": since(step, ended)}


# --- fresh UI starts -------------------------------------------------------------------------------------------


def churnbench_command() -> list[str]:
    """The `churnbench` script of this interpreter's environment (else the one on PATH)."""
    beside = Path(sys.executable).parent / "churnbench"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("churnbench")
    if found is None:
        raise SystemExit("no churnbench command beside this python or on PATH")
    return [found]


def wait_port_free(port: int, timeout: float = STOP_WAIT_S) -> bool:
    """Until nothing listens on the port (at most `timeout` s)."""
    deadline = time.monotonic() + timeout
    while not port_is_free(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


class Spinners:
    """`count` CPU-spinning python processes (busy loops, niceness 0): a synthetic load."""

    def __init__(self, count: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                                       start_new_session=True) for _ in range(count)]

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in self.procs:
            proc.wait()


class LoadSampler(threading.Thread):
    """Reads the 1-minute load average every second: (time.time(), load1)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.samples.append((time.time(), load1()))
            self._halt.wait(1.0)

    def stop(self) -> list[tuple[float, float]]:
        self._halt.set()
        self.join()
        return self.samples


class TimedLog(threading.Thread):
    """Copies the UI's output to a log file, each line prefixed with the seconds since the start."""

    def __init__(self, stream: IO[bytes], log: Path, t0: float) -> None:
        super().__init__(daemon=True)
        self.stream, self.log, self.t0 = stream, log, t0
        self.lines: list[tuple[float, str]] = []

    def run(self) -> None:
        with self.log.open("w") as out:
            for raw in iter(self.stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip()
                at = time.time() - self.t0
                self.lines.append((at, line))
                out.write(f"{at:7.1f} {line}\n")
                out.flush()


def at(samples: list[tuple[float, float]], when: float) -> float | None:
    """The load sample nearest to `when`."""
    return min(samples, key=lambda s: abs(s[0] - when))[1] if samples else None


def stop_ui(proc: subprocess.Popen[bytes], port: int) -> tuple[float, int]:
    """Ctrl-C's way (SIGINT to `churnbench ui`), then every process of it gone and nothing listening on the port:
    (seconds taken, processes that had to be killed)."""
    import psutil

    from churn_assets.commands.ui import service_processes
    from churn_assets.state import StatePaths

    began = time.monotonic()
    services = service_processes(StatePaths.resolve())  # the run worker and the broker outlive the UI (decision 333)
    try:
        family = [p for p in (psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True))
                  if p.pid not in services]
    except psutil.NoSuchProcess:
        family = []
    # `dagster dev` and its processes run in their own session (churnbench ui starts it so): gather them too
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGINT)
    _, alive = psutil.wait_procs(family, timeout=STOP_WAIT_S)
    for leftover in alive:
        print(f"  still running after {STOP_WAIT_S:.0f} s, killed: {leftover.pid}", file=sys.stderr)
        with contextlib.suppress(psutil.NoSuchProcess):
            leftover.kill()
    psutil.wait_procs(alive, timeout=5)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    if not wait_port_free(port):
        raise SystemExit(f"something still listens on port {port} {STOP_WAIT_S:.0f} s after the UI stopped")
    return round(time.monotonic() - began, 1), len(alive)


def wait_up(port: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[float, float]:
    """(time the GraphQL API first answered, time every code location had loaded)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    server_up: float | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"churnbench ui exited ({proc.returncode}); its output: {log}")
        try:
            data = gql(port, LOCATIONS, timeout=10)
        except (urllib.error.URLError, OSError, KeyError, ValueError):
            time.sleep(0.25)
            continue
        now = time.time()
        server_up = server_up or now
        workspace = data.get("workspaceOrError") or {}
        entries = workspace.get("locationEntries") or []
        errors = [e for e in entries if (e.get("locationOrLoadError") or {}).get("__typename") == "PythonError"]
        if errors:
            raise SystemExit(f"a code location failed to load: {errors}")
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            return server_up, now
        time.sleep(0.25)
    raise SystemExit(f"the UI was not up within {START_TIMEOUT_S:.0f} s; its output: {log}")


def fresh_start(n: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    # Each start on the next port: the previous one is left in TIME_WAIT by the closed connections for 60 s, and
    # `churnbench ui` takes such a port as taken and picks another one (its check binds without SO_REUSEADDR).
    port = args.port + n - 1
    if not port_is_free(port):
        raise SystemExit(f"port {port} is taken (churnbench ui would pick another one): choose another --port")
    log = log_dir / f"ui-start-{n}.log"
    sampler = LoadSampler()
    sampler.start()
    t0 = time.time()
    proc = subprocess.Popen([*churnbench_command(), "ui", "--port", str(port)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    assert proc.stdout is not None
    output = TimedLog(proc.stdout, log, t0)
    output.start()
    try:
        server_up, ui_up = wait_up(port, proc, log)
        launches = [launch_once(port, args.partition) for _ in range(1 + args.later_launches)]
    finally:
        stop_s, killed = stop_ui(proc, port)
        samples = sampler.stop()
        output.join(timeout=5)
    # when `dagster dev` was started (the services checked, the instance opened): the command's own line
    def seen(text: str) -> float | None:
        return next((round(t, 1) for t, line in output.lines if text in line), None)

    first = launches[0]
    loads = [s[1] for s in samples]
    return {"start": n, "port": port, "server_up_s": round(server_up - t0, 1), "ui_up_s": round(ui_up - t0, 1),
            # the parts of the UI's start: the command's services check and instance, then `dagster dev` (code
            # servers loading the code locations, then the webserver)
            "dagster_dev_started_s": seen("Dagster UI: http"), "webserver_serving_s": seen("Serving dagster-webserver"),
            "services": [line for _, line in output.lines if line.split(" ")[0] in ("postgres", "mongo", "saas")],
            "first_launch_s": first["to_step_start_s"],
            "first_launch_submitted_s": first["submitted_to_step_start_s"],
            "later_launches_s": [x["to_step_start_s"] for x in launches[1:]],
            "load1_at_start": loads[0] if loads else None, "load1_at_ui_up": at(samples, ui_up),
            "load1_at_first_launch": first["load"], "load1_min": min(loads, default=None),
            "load1_max": max(loads, default=None), "stop_s": stop_s, "killed_after_stop": killed,
            "launches": launches, "log": str(log)}


def warm_up(target: float, limit: float) -> float:
    """Wait until the 1-minute load average reaches `target` (at most `limit` s); the load reached."""
    deadline = time.monotonic() + limit
    while load1() < target and time.monotonic() < deadline:
        time.sleep(5)
    return load1()


def fresh_mode(args: argparse.Namespace) -> dict[str, Any]:
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="bench_ui_launch-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    spinners = Spinners(args.load) if args.load else None
    starts: list[dict[str, Any]] = []
    try:
        if spinners:
            print(f"{args.load} CPU-spinning processes started; warming up (load1 {load1():.2f}) ...", flush=True)
            print(f"load1 {warm_up(0.9 * args.load, args.warmup):.2f} after the warm-up", flush=True)
        for n in range(1, args.starts + 1):
            starts.append(fresh_start(n, args, log_dir))
            shown = {k: v for k, v in starts[-1].items() if k != "launches"}
            print(f"start {n}: {json.dumps(shown)}", flush=True)
    finally:
        if spinners:
            spinners.stop()

    def med(key: str) -> float:
        return statistics.median(s[key] for s in starts)

    return {"mode": "fresh", "partition": args.partition, "port": args.port, "synthetic_load_processes": args.load,
            "median_ui_up_s": med("ui_up_s"), "median_server_up_s": med("server_up_s"),
            "median_first_launch_s": med("first_launch_s"),
            "median_first_launch_submitted_s": med("first_launch_submitted_s"),
            "median_later_launch_s": statistics.median(x for s in starts for x in s["later_launches_s"])
            if args.later_launches else None,
            "loads_at_first_launch": [s["load1_at_first_launch"] for s in starts],
            "load_ranges": [[s["load1_min"], s["load1_max"]] for s in starts],
            "targets": {"first_launch_s": 20.0, "ui_up_s": 40.0}, "log_dir": str(log_dir), "starts": starts}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, help="the running UI's port; with --fresh, the port the UI is started "
                        "on (default 3300)")
    parser.add_argument("--partition", required=True, help="a finished eval_run partition key")
    parser.add_argument("--launches", type=int, default=3, help="launches against a running UI")
    parser.add_argument("--fresh", action="store_true", help="start the UI afresh --starts times")
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--later-launches", type=int, default=1, help="launches after each start's first one")
    parser.add_argument("--load", type=int, default=0, help="CPU-spinning processes to run (synthetic load)")
    parser.add_argument("--warmup", type=float, default=240.0, help="at most this long for the load to build up")
    parser.add_argument("--log-dir", help="where the UI's output goes (default: a new temporary folder)")
    parser.add_argument("--json", help="write every figure to this file as JSON")
    args = parser.parse_args(argv)
    if args.fresh:
        args.port = args.port or 3300
        found = fresh_mode(args)
        summary = {k: v for k, v in found.items() if k != "starts"}
    else:
        if args.port is None:
            parser.error("--port (a running UI) or --fresh is needed")
        launches = []
        for n in range(args.launches):
            launches.append(launch_once(args.port, args.partition))
            print(f"launch {n + 1}: {json.dumps(launches[-1])}", flush=True)
        found = {"mode": "running", "median_to_step_start_s": statistics.median(f["to_step_start_s"] for f in launches),
                 "median_to_run_start_s": statistics.median(f["to_run_start_s"] for f in launches),
                 "median_submitted_to_step_start_s": statistics.median(f["submitted_to_step_start_s"]
                                                                       for f in launches),
                 "loads": [f["load"] for f in launches], "launches": launches}
        summary = found
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
