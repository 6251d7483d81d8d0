"""`churnbench generate` and `churnbench ledger ...`: make and check ledgers outside Dagster."""

from __future__ import annotations

import time
from pathlib import Path

import click

from churn_assets.progress import progress_bar
from churn_assets.world.config import load_config
from churn_assets.world.ledger import check_meaning, load_ledger, resolve_ledger_paths
from churn_assets.world.meaning import CHECK_VERSION
from churn_assets.world.simulator import generate_ledger


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="World config YAML (partial; merged over the defaults).")
@click.option("--days", type=click.IntRange(1, 3650), help="Override calendar.days.")
@click.option("--seed", type=click.IntRange(0), help="Override the seed.")
@click.option("--name", help="Override the world name.")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override any config leaf, e.g. --set rates_per_day.hires=2.5 (repeatable).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Output directory (default: out/<world id>).")
def generate(config_path: Path | None, days: int | None, seed: int | None, name: str | None,
             overrides: tuple[str, ...], out_dir: Path | None) -> None:
    """Simulate a world and write its hash-chained ledger (ledger.jsonl + manifest.json)."""
    config = load_config(config_path, seed=seed, days=days, name=name, overrides=list(overrides))
    out = out_dir or Path("out") / config.world_id
    started = time.perf_counter()
    with progress_bar(f"simulating {config.world_id}", total=config.days, unit="days") as advance:
        manifest = generate_ledger(config, out, on_day=lambda _day: advance(1))
    elapsed = time.perf_counter() - started
    click.echo(f"world {config.world_id}: {manifest.count:,} events over {config.days} days "
               f"({manifest.first_day} .. {manifest.last_day}) in {elapsed:.1f}s -> {out}")
    click.echo(f"head hash {manifest.head_hash}")
    click.echo("events per kind:")
    for kind, n in sorted(manifest.counts_per_kind.items(), key=lambda kv: -kv[1]):
        click.echo(f"  {kind:<26} {n:>8,}")
    click.echo("entities created:")
    for entity, n in entity_counts(manifest.counts_per_kind).items():
        click.echo(f"  {entity:<26} {n:>8,}")


def entity_counts(counts_per_kind: dict[str, int]) -> dict[str, int]:
    """Entities created, read off the creation kinds of the manifest."""
    creation = {
        "vendors": "vendor_registered", "cost centers": "cost_center_created",
        "products": "product_listed", "users": "user_hired", "licenses": "license_purchased",
        "contracts": "contract_signed", "tickets": "ticket_opened",
    }
    return {entity: counts_per_kind.get(kind, 0) for entity, kind in creation.items()}


@click.group()
def ledger() -> None:
    """Inspect and verify ledgers."""


@ledger.command("verify")
@click.argument("path", type=click.Path(path_type=Path))
def verify(path: Path) -> None:
    """Verify a ledger: schema, ordering, hash chain and manifest (format 2), and its meaning: every event possible
    in the world the events before it made (nothing created twice, nothing changed that does not exist or no
    longer exists, every entity an event names existing). Records the passed meaning check in the manifest, which
    every loader requires. Format 1 loads unverified."""
    ledger_file, _ = resolve_ledger_paths(path)
    with progress_bar(f"verifying {ledger_file.name}", total=None, unit="events") as advance:
        last = [0]

        def on_progress(n: int) -> None:
            advance(n - last[0])
            last[0] = n

        checked = check_meaning(path, progress=on_progress)
    if checked.format_version != 2:
        click.echo(f"LOADED (unverified): {checked.count:,} events, format {checked.format_version} "
                   f"has no hash chain; schema and ordering checked")
        return
    recorded = ("recorded in the manifest before" if checked.already else "recorded in the manifest"
                if checked.recorded else "NOT recorded: the manifest could not be written")
    click.echo(f"OK: {checked.count:,} events, format 2, hash chain, manifest and meaning (check version "
               f"{CHECK_VERSION}; {recorded}) verified, head {checked.head_hash}")


@ledger.command("stats")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--at", "at", metavar="DAY", help="As-of day YYYY-MM-DD (default: the ledger's last day).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with snake_case keys.")
def stats(path: Path, at: str | None, as_json: bool) -> None:
    """The world of a ledger in figures as of a day: events, users, licenses, contracts, tickets."""
    # Imported here so that this command stays one block at the end of the file.
    import json

    from churn_assets.world.stats import format_stats, stats_of

    with progress_bar("loading ledger", total=None, unit="events") as advance:
        last = [0]

        def on_progress(n: int) -> None:
            advance(n - last[0])
            last[0] = n

        loaded = load_ledger(path, progress=on_progress)
    figures = stats_of(loaded, at)
    click.echo(json.dumps(figures.to_dict(), sort_keys=True) if as_json else format_stats(figures))
