"""`churnbench worker`: one cell engine worker (celery) on this host, for a run whose engine is celery.

On the host of the state folder, `run_cells` starts its local workers itself (`services/engine.py`). On another host
(docs/deployment.md, "Workers on other hosts"): the variables `churnbench services urls --show-secrets` prints on the
state folder's host (the services' addresses and credentials, the broker's URL with its password), and
`churnbench worker`: it starts no service, reaches them all over TCP and evaluates what the broker sends it.
`churnbench worker --runs` is a run worker instead: it executes the Dagster runs launched from the UI, a schedule
or a sensor on the state folder (`orchestration/run_launcher.py`), several at once.
"""

from __future__ import annotations

import importlib
import os
import socket

import click

from churn_assets.errors import UserFacingError
from churn_assets.orchestration.code_location import CODE_LOCATION_MODULE
from churn_assets.services.engine import RUN_SLOTS, RUN_WORKER


@click.command("worker")
@click.option("--name", default=None,
              help="The worker's name (default worker@<host>-<pid>; with --runs run-worker@<host>-<pid>, and a "
                   "name given is prefixed run-worker-).")
@click.option("--code-version", default=None, hidden=True,
              help="The code version this worker runs (default: this checkout's, `git-<sha>`).")
@click.option("--log-file", default=None, help="Where celery logs (default: standard error).")
@click.option("--runs", is_flag=True,
              help=f"Execute launched Dagster runs (the UI's, schedules', sensors'), up to {RUN_SLOTS} at once, "
                   "instead of cells.")
def worker(name: str | None, code_version: str | None, log_file: str | None, runs: bool) -> None:
    """Run a cell engine worker: evaluate the input builds and cells a celery run sends to the broker
    ($CHURNBENCH_BROKER_URL, else this state folder's embedded broker), one at a time, until stopped (SIGTERM lets
    the current one finish). A job sent by a run of other code is refused in one line. With --runs: execute the
    Dagster runs launched on this code version instead."""
    from churn_assets.evaluation.results import code_version as this_code
    from churn_assets.services.engine import BROKER_URL_ENV, QUEUE, broker_url_of_record, runs_queue
    from churn_assets.state import StatePaths

    url = os.environ.get(BROKER_URL_ENV) or broker_url_of_record(StatePaths.resolve())
    if not url:
        raise UserFacingError(f"no broker: set {BROKER_URL_ENV} (`churnbench services urls --show-secrets` on the "
                              "state folder's host prints it) or run a celery run on this state folder first")
    version = code_version or this_code()
    if os.geteuid() == 0:
        # Celery refuses pickled jobs as root unless told: whoever can send a job runs code here. The broker asks
        # for a password (the embedded one: generated, 0600), so only a holder of the state folder's secrets can;
        # containers and CI run as root.
        os.environ.setdefault("C_FORCE_ROOT", "1")
    from celery.signals import worker_process_init

    from churn_assets.orchestration import cells, engine

    engine.serving(version)
    app = engine.engine_app(url)
    if runs:
        # The code location imported once, here: each process that runs a run is forked from this one (celery's
        # prefork pool) and opens its session at its first run (decision 333).
        importlib.import_module(CODE_LOCATION_MODULE)

    @worker_process_init.connect(weak=False)
    def open_session(**_kwargs: object) -> None:  # each process that runs jobs opens its own session at its start
        engine.serving(version)
        if not runs:
            cells.start_engine_worker()

    name = name or f"{RUN_WORKER if runs else 'worker'}@{socket.gethostname()}-{os.getpid()}"
    if runs and not name.startswith(RUN_WORKER):
        name = f"{RUN_WORKER}-{name}"  # a sweep counts its cell workers by name: a run worker takes no cell
    argv = ["worker", "-Q", runs_queue(version) if runs else QUEUE, "-c", str(RUN_SLOTS if runs else 1),
            "--pool", "prefork", "-n", name, "--without-gossip", "--without-mingle", "-l", "INFO"]
    if log_file:
        argv += ["-f", log_file]
    app.worker_main(argv)
