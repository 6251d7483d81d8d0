"""`churnbench worlds add|list|rm|materialize` and `churnbench gc`: worlds as Dagster partitions.

Dagster is imported inside the commands, so that `churnbench --help` and `services` stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from churn_assets.progress import progress_bar
from churn_assets.state import StatePaths
from churn_assets.state_locks import state_locks
from churn_assets.world.config import load_config

if TYPE_CHECKING:
    from churn_assets.orchestration.materialize import Session

DEFAULT_ASSETS = ("ledger",)


@click.group()
def worlds() -> None:
    """Register, list, materialize and remove worlds (one Dagster partition each)."""


@worlds.command("add")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="World config YAML (partial; merged over the defaults).")
@click.option("--seed", type=click.IntRange(0), help="Override the seed.")
@click.option("--name", help="Override the world name.")
@click.option("--days", type=click.IntRange(1, 3650), help="Override calendar.days (must fit the deployment).")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override any config leaf (repeatable).")
@click.option("--materialize", "then_materialize", is_flag=True,
              help="Materialize the world's ledger right away (in process).")
def add(config_path: Path | None, seed: int | None, name: str | None, days: int | None,
        overrides: tuple[str, ...], then_materialize: bool) -> None:
    """Store a world config in the state folder and register its partition."""
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import add_world

    config = load_config(config_path, seed=seed, days=days, name=name, overrides=list(overrides))
    paths = StatePaths.resolve()
    with open_session(paths) as session:
        added = add_world(paths, session.instance, config)
        verb = "registered" if added else "already registered:"
        click.echo(f"{verb} world {config.world_id} ({config.days} days, {config.start}..{config.end})")
        if then_materialize:
            _materialize(session, [config.world_id], DEFAULT_ASSETS)
        else:
            click.echo(f"materialize its ledger with: churnbench worlds materialize {config.world_id}")


@worlds.command("list")
def list_() -> None:
    """Registered worlds (and unregistered leftovers that `churnbench gc` would remove)."""
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import list_worlds

    paths = StatePaths.resolve()
    with open_session(paths) as session:
        infos = list_worlds(paths, session.instance)
    if not infos:
        click.echo("no worlds yet: churnbench worlds add [--seed S] [--days D]")
        return
    click.echo(f"{'WORLD':<28} {'DAYS':>5}  {'CALENDAR':<22}  {'LEDGER':<14}  STATUS")
    for info in infos:
        cfg = info.config
        days = str(cfg.days) if cfg else "?"
        span = f"{cfg.start}..{cfg.end}" if cfg else "?"
        ledger = f"{info.ledger_events:,} events" if info.ledger_events is not None else "-"
        status = "registered" if info.registered else "not registered (gc removes it)"
        if info.problem:
            status += f"; {info.problem}"
        click.echo(f"{info.world_id:<28} {days:>5}  {span:<22}  {ledger:<14}  {status}")


@worlds.command("rm")
@click.argument("world_ids", nargs=-1, required=True, metavar="WORLD...")
def rm(world_ids: tuple[str, ...]) -> None:
    """Unregister worlds and remove every artefact they have."""
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import remove_world

    paths = StatePaths.resolve()
    with open_session(paths) as session:
        for world_id in world_ids:
            removed = remove_world(paths, session.instance, world_id)
            click.echo(f"removed world {world_id}: {', '.join(removed)}")


@worlds.command("materialize")
@click.argument("world_ids", nargs=-1, metavar="WORLD...")
@click.option("--all", "all_worlds", is_flag=True, help="Every registered world.")
@click.option("--asset", "assets", multiple=True, default=DEFAULT_ASSETS, show_default=True,
              help="World-partitioned asset to materialize (repeatable).")
def materialize_cmd(world_ids: tuple[str, ...], all_worlds: bool, assets: tuple[str, ...]) -> None:
    """Materialize world-partitioned assets in process, on the persistent Dagster instance."""
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import registered_worlds

    if not world_ids and not all_worlds:
        raise click.UsageError("name a world (see `churnbench worlds list`) or pass --all")
    paths = StatePaths.resolve()
    with open_session(paths) as session:
        targets = list(world_ids) or registered_worlds(session.instance)
        _materialize(session, targets, assets)


@worlds.command("verify")
@click.argument("world_ids", nargs=-1, required=True, metavar="WORLD...")
def verify(world_ids: tuple[str, ...]) -> None:
    """Run the ledger's asset checks again (hash chain, manifest, stored config); exit 1 on failure."""
    import dagster as dg

    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import MaterializationError, open_session, run_checks

    paths = StatePaths.resolve()
    failed = []
    with open_session(paths) as session:
        definitions = defs_for(str(paths.root))
        checks = sorted(definitions.resolve_asset_graph().get_check_keys_for_assets({dg.AssetKey("ledger")}),
                        key=lambda k: k.name)
        for world_id in world_ids:
            for evaluation in run_checks(session, definitions, checks, world_id):
                details = {k: v.value for k, v in evaluation.metadata.items()}
                verdict = "passed" if evaluation.passed else "FAILED"
                click.echo(f"{evaluation.check_name} [{world_id}]: {verdict} {details}")
                if not evaluation.passed:
                    failed.append(f"{evaluation.check_name} [{world_id}]")
    if failed:
        raise MaterializationError(f"failed: {', '.join(failed)}")


def _materialize(session: Session, world_ids: list[str], assets: tuple[str, ...]) -> None:
    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import PartitionRun, materialize
    from churn_assets.orchestration.scenario_materializer import input_lock

    with progress_bar(f"materializing {', '.join(assets)}", total=len(world_ids), unit="worlds") as advance:
        def done(run: PartitionRun) -> None:
            advance(1)
            ledger = run.metadata.get("ledger", {})
            summary = (f"{ledger['dagster/row_count']:,} events {ledger['first_day']}..{ledger['last_day']}, "
                       f"head {str(ledger['head_hash'])[:12]}" if ledger else "done")
            click.echo(f"materialized {', '.join(assets)} [{run.partition_key}]: {summary} "
                       f"({run.seconds:.1f}s, run {run.run_id[:8]})")

        definitions = defs_for(str(session.paths.root))
        for world_id in world_ids:
            # The lock the scenario materializer's build of the same partition holds: two `worlds add
            # --materialize` (or a run building its ledger) of one world build it one after the other.
            what = f"{', '.join(assets)} [{world_id}]"

            def waiting(what: str = what) -> None:
                click.echo(f"{what}: another churnbench process is building it; waiting")

            with state_locks(session.paths).hold(input_lock(session.paths, world_id, assets),
                                                 what=f"the build of {what}", on_wait=waiting):
                materialize(session, definitions, assets, [world_id], on_partition=done)


@click.command("gc")
def gc() -> None:
    """Remove the artefacts of worlds that are no longer registered (files, schemas, databases of this state
    folder). Clusters of state folders deleted by hand: `churnbench services gc`."""
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import collect_garbage

    paths = StatePaths.resolve()
    with open_session(paths) as session:
        removed = collect_garbage(paths, session.instance)
    if not removed:
        click.echo("nothing to collect")
    for world_id, what in removed.items():
        click.echo(f"removed unregistered world {world_id}: {', '.join(what)}")
