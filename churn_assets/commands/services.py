"""`churnbench services up|down|status`: the embedded services of this state folder.

Kept free of Dagster imports: a warm `services up` must answer in well under a second.
"""

from __future__ import annotations

import sys
import time

import click

from churn_assets.services import ServiceStatus, services_status, start_services, stop_services
from churn_assets.state import StatePaths


@click.group()
def services() -> None:
    """Embedded services of this state folder: Postgres 16 + pgvector, MongoDB-protocol server, SaaS API.

    The state folder is ./.churnbench or $CHURNBENCH_STATE_DIR. Set CHURNBENCH_POSTGRES_URL /
    CHURNBENCH_MONGODB_URI / CHURNBENCH_SAAS_URL to use external servers instead (nothing is started
    or stopped for them).
    """


@services.command("up")
def up() -> None:
    """Start what is not running (a second `up` finds the running ones)."""
    paths = StatePaths.resolve()
    started = time.perf_counter()
    statuses = start_services(paths)
    elapsed = time.perf_counter() - started
    for status in statuses:
        click.echo(format_status(status))
    click.echo(f"state folder {paths.root}; DAGSTER_HOME={paths.dagster_home} ({elapsed:.2f}s)")


@services.command("down")
def down() -> None:
    """Stop the services churnbench started for this state folder (external ones are left alone)."""
    paths = StatePaths.resolve()
    for status in stop_services(paths):
        click.echo(f"{status.name:<9} {status.action}")


@services.command("status")
def status() -> None:
    """Show each service; exit 1 when one has died or does not answer."""
    paths = StatePaths.resolve()
    statuses = services_status(paths)
    for s in statuses:
        click.echo(format_status(s))
    broken = [s for s in statuses if s.state in ("dead", "unresponsive")]
    if broken:
        names = ", ".join(f"{s.name} ({s.state})" for s in broken)
        click.echo(f"churnbench: error: {names}: `churnbench services up` restarts a dead service; "
                   "an unresponsive one needs `churnbench services down` first", err=True)
        sys.exit(1)


def format_status(s: ServiceStatus) -> str:
    pid = f"pid {s.pid}" if s.pid else ""
    parts = [f"{s.name:<9}", f"{s.state:<12}", f"{s.mode:<9}", f"{pid:<10}", s.url or ""]
    note = ", ".join(p for p in (s.action, s.detail) if p)
    return "  ".join(parts).rstrip() + (f"  ({note})" if note else "")
