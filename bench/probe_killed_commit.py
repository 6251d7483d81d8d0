"""Does a commit survive Postgres being killed right after it? The embedded cluster commits asynchronously
(decision 26); the results catalog's connections wait for the WAL flush (decision 309). This measures both.

    python bench/probe_killed_commit.py [--trials 6]

In a temporary state folder (its services purged at the end): for each trial and each setting (the cluster's
`synchronous_commit=off`, and `on` as `catalog.durable_connection` sets it), commit a transaction, SIGKILL the
postmaster at once, restart the cluster and look for the transaction's row. Prints how many commits were lost.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from churn_assets.evaluation.catalog import durable_connection
from churn_assets.fabric.postgres import connect
from churn_assets.services import purge_embedded_data
from churn_assets.services.postgres import PostgresService
from churn_assets.services.supervisor import ensure_services
from churn_assets.state import STATE_DIR_ENV, StatePaths

MARK = -1  # the row the last transaction commits


def lost_after_kill(paths: StatePaths, durable: bool) -> bool:
    """Commit one transaction, kill the postmaster, restart: whether the transaction is gone."""
    url = ensure_services(paths).warehouse
    with connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS killed_commit_probe (i int)")
        conn.execute("TRUNCATE killed_commit_probe")
    conn = durable_connection(url) if durable else connect(url)
    for _ in range(20):  # some WAL to flush, as a run's bookkeeping writes
        conn.execute("INSERT INTO killed_commit_probe SELECT generate_series(1, 200)")
    conn.execute("INSERT INTO killed_commit_probe VALUES (%s)", (MARK,))
    conn.commit()
    pid = PostgresService().status(paths, check_health=False).pid
    assert pid is not None, "the embedded Postgres is not running"
    os.kill(pid, signal.SIGKILL)
    conn.close()
    time.sleep(1.0)  # the backends notice the postmaster is gone
    with connect(ensure_services(paths).warehouse) as check:
        row = check.execute("SELECT count(*) FROM killed_commit_probe WHERE i = %s", (MARK,)).fetchone()
    return row is None or row[0] == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="killed-commit-"))
    os.environ[STATE_DIR_ENV] = str(root)
    paths = StatePaths.resolve(root)
    try:
        for durable in (False, True):
            lost = sum(lost_after_kill(paths, durable) for _ in range(args.trials))
            setting = "on (durable_connection)" if durable else "off (the cluster's)"
            print(f"synchronous_commit {setting}: the last commit lost in {lost} of {args.trials} kills")
    finally:
        purge_embedded_data(paths)  # stops the services first
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
