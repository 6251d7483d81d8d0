"""`churnbench services up|down|status|urls|purge|gc`: the embedded services of this state folder, the settings a
worker on another host needs to reach them, and removing what state folders leave on the machine.

Kept free of Dagster imports: a warm `services up` must answer in well under a second.
"""

from __future__ import annotations

import shlex
import sys
import time

import click

from churn_assets.services import ServiceStatus, redact, services_status, start_services, stop_services
from churn_assets.state import StatePaths


@click.group()
def services() -> None:
    """Embedded services of this state folder: Postgres 16 + pgvector, MongoDB-protocol server, SaaS API (and
    the local model server, which an `--agent llm` run starts: `status` shows it, `down` stops it).

    The state folder is ./.churnbench or $CHURNBENCH_STATE_DIR. Set CHURNBENCH_POSTGRES_URL /
    CHURNBENCH_MONGODB_URI / CHURNBENCH_SAAS_URL to use external servers instead (nothing is started
    or stopped for them). The embedded ones bind to $CHURNBENCH_SERVICE_HOST (default 127.0.0.1).
    """


@services.command("up")
@click.option("--workers", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Above 1: also the cell engine's broker and this many local workers, as a run with `--workers` "
                   "above 1 starts them (they take this command's settings: start them as you will run).")
def up(workers: int) -> None:
    """Start what is not running (a second `up` finds the running ones)."""
    paths = StatePaths.resolve()
    started = time.perf_counter()
    statuses = start_services(paths)
    if workers > 1:
        from churn_assets.evaluation.results import code_version
        from churn_assets.services.engine import engine_statuses, ensure_local_workers

        ensure_local_workers(paths, workers, code_version())
        statuses = [*statuses, *engine_statuses(paths, check_health=False)]
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
        click.echo(f"churnbench: error: {names}: `churnbench services up` restarts a dead service (the next "
                   "`--agent llm` run, the model server); an unresponsive one needs `churnbench services down` "
                   "first", err=True)
        sys.exit(1)


@services.command("urls")
@click.option("--show-secrets", is_flag=True,
              help="Print the passwords and keys too, as `export` lines for a worker's environment.")
def urls(show_secrets: bool) -> None:
    """The settings a worker on another host needs to reach these services over TCP only (Postgres with its
    password, the Dagster storage, the arm roles' secret, the MongoDB-protocol server, the SaaS API and its key):
    the variables that select external services. Secrets are masked unless --show-secrets; then write them to a
    private file, e.g. `(umask 077; churnbench services urls --show-secrets > worker.env)`. Starts nothing."""
    from churn_assets.services import worker_settings

    paths = StatePaths.resolve()
    settings, notes = worker_settings(paths)
    for setting in settings:
        value = setting.shown(secrets=show_secrets)
        click.echo(f"export {setting.name}={shlex.quote(value)}" if show_secrets else f"{setting.name}={value}")
    for note in notes:
        click.echo(f"churnbench: note: {note}", err=True)
    if not show_secrets and any(s.secret for s in settings):
        click.echo("churnbench: secrets masked; `churnbench services urls --show-secrets` prints them", err=True)


@services.command("purge")
@click.option("--yes", is_flag=True, help="Remove without asking.")
def purge(yes: bool) -> None:
    """Stop this state folder's services and remove everything of it: the folder and its Postgres cluster.

    The cluster lives outside the state folder, in /var/tmp/churnbench-pg-<hash> (or under
    CHURNBENCH_PG_ROOT). External services and their data are left alone.
    """
    from churn_assets.services.cleanup import human_size, purge_plan, purge_state_folder

    paths = StatePaths.resolve()
    plan = purge_plan(paths)
    if not plan:
        click.echo(f"nothing to purge: neither {paths.root} nor {paths.pg_home} exists")
        return
    for item in plan:
        click.echo(f"{item.what:<26} {human_size(item.bytes):>9}  {item.path}")
    if not yes:
        click.confirm("stop its services and remove all of this?", abort=True, err=True)
    removed = purge_state_folder(paths)
    click.echo(f"purged: {human_size(sum(i.bytes for i in removed))} removed")


@services.command("gc")
@click.option("--yes", is_flag=True, help="Remove the orphans (default: list them only).")
def gc(yes: bool) -> None:
    """List the embedded Postgres clusters of this machine whose state folder is gone; --yes removes them.

    Each state folder's cluster is /var/tmp/churnbench-pg-<hash of its path> (or under CHURNBENCH_PG_ROOT); a
    state folder deleted or moved by hand leaves its cluster behind. Artefacts of unregistered worlds inside a
    state folder: `churnbench gc`.
    """
    from churn_assets.services.cleanup import find_clusters, human_size, remove_cluster

    clusters = find_clusters()
    orphans = [c for c in clusters if c.orphan]
    for c in clusters:
        mark = "orphan" if c.orphan else "kept"
        click.echo(f"{mark:<7} {human_size(c.bytes):>9}  {c.path}  ({c.reason})")
    if not orphans:
        click.echo(f"no orphaned clusters ({len(clusters)} in use)")
        return
    total = human_size(sum(c.bytes for c in orphans))
    if not yes:
        click.echo(f"{len(orphans)} orphaned cluster(s), {total}: `churnbench services gc --yes` removes them")
        return
    for c in orphans:
        remove_cluster(c)
    click.echo(f"removed {len(orphans)} orphaned cluster(s), {total}")


def format_status(s: ServiceStatus) -> str:
    pid = f"pid {s.pid}" if s.pid else ""
    parts = [f"{s.name:<9}", f"{s.state:<12}", f"{s.mode:<9}", f"{pid:<10}", redact(s.url) if s.url else ""]
    note = ", ".join(p for p in (s.action, s.detail) if p)
    return "  ".join(parts).rstrip() + (f"  ({note})" if note else "")
