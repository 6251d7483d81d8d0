"""`churnbench project --world ID [--at DAY]`: build a world's projections in process and print row counts.

Steps, each a materialization on the persistent Dagster instance (so they show in the UI):
the `ledger` when the world has none yet, `warehouse_truth` + `warehouse_raw`, then the dbt star schema
(`analytics/*`, with every dbt test and parity check). `--at DAY` also builds the world x day
projections listed in `DAY_ASSETS` for that day, and reports the as-of views on that day.

Dagster is imported inside the command, so that `churnbench --help` stays fast.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import click

from churn_assets.state import StatePaths, validate_world_id
from churn_assets.state_locks import state_locks
from churn_assets.world.calendar import require_in_calendar, typed_day
from churn_assets.world.ledger import LEDGER_FILE

if TYPE_CHECKING:
    import dagster as dg

    from churn_assets.orchestration.materialize import Session

# World x day assets that `--at DAY` materializes for (world, DAY), in order. A later issue that adds a
# day-partitioned projection appends its asset key here (one line), e.g. "contract_documents".
DAY_ASSETS: list[str] = ["contract_documents"]

WAREHOUSE_ASSETS = ["warehouse_truth", "warehouse_raw"]


@click.command("project")
@click.option("--world", "world_id", required=True, metavar="ID", help="A registered world (churnbench worlds list).")
@click.option("--at", "at", metavar="DAY", help="Also build the day-partitioned projections for this day "
              "(YYYY-MM-DD, inside the world's calendar) and report the as-of views on it.")
def project(world_id: str, at: str | None) -> None:
    """Build a world's warehouse (truth, raw, dbt star schema) in process and print row counts."""
    from churn_assets.orchestration.world_registry import load_world_config

    paths = StatePaths.resolve()
    validate_world_id(world_id)
    config = load_world_config(paths, world_id)
    day = parse_day(at, config.start, config.end) if at is not None else None

    from churn_assets.orchestration.definitions import defs_for
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.world_registry import using_world

    with open_session(paths) as session, using_world(paths, world_id):
        defs = defs_for(str(paths.root))
        click.echo(f"world {world_id}: {config.days} days, {config.start}..{config.end}")
        build_world(session, defs, world_id, day, echo=click.echo)
        report_rows(session.urls.warehouse, world_id, day or config.end, echo=click.echo)


def parse_day(value: str, first: dt.date, last: dt.date) -> dt.date:
    try:
        day = typed_day(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--at") from None
    require_in_calendar("--at", day, first, last, "this world")
    return day


def build_world(session: Session, defs: dg.Definitions, world_id: str, day: dt.date | None,
                echo: Callable[[str], None]) -> None:
    """Materialize the world's projections, step by step, echoing one line per step. Each step holds the lock
    the scenario materializer's build of the same partitions holds (`input_lock`): a second `project` (or a run
    building its inputs) of the world waits for it instead of building beside it."""
    from churn_assets.freshness.scenario import DBT_BUILD, LEDGER, WAREHOUSE
    from churn_assets.orchestration.assets.dbt import analytics_dbt
    from churn_assets.orchestration.materialize import materialize
    from churn_assets.orchestration.partitions import world_day_key

    def lock(name: str, *assets: str, day: dt.date | None = None) -> contextlib.AbstractContextManager[None]:
        from churn_assets.orchestration.scenario_materializer import input_lock

        return state_locks(session.paths).hold(
            input_lock(session.paths, world_id, assets, day), what=f"the build of {name}",
            on_wait=lambda: echo(f"  {name:<12} another churnbench process is building it; waiting"))

    with lock("ledger", LEDGER):
        if not (session.paths.ledger_dir(world_id) / LEDGER_FILE).exists():
            with _step("ledger", echo) as note:
                [run] = materialize(session, defs, ["ledger"], [world_id])
                note(f"{run.metadata['ledger']['dagster/row_count']:,} events")

    with lock("truth + raw", *WAREHOUSE), _step("truth + raw", echo) as note:
        [run] = materialize(session, defs, WAREHOUSE_ASSETS, [world_id])
        truth, raw = run.metadata["warehouse_truth"], run.metadata["warehouse_raw"]
        state = "unchanged" if truth["skipped"] and raw["skipped"] else "loaded"
        note(f"{state}: {truth['row_counts'].get('events', 0):,} events, {raw['dagster/row_count']:,} raw rows "
             f"(load {truth['seconds'] + raw['seconds']:.1f}s; checks passed)")

    dbt_keys = sorted(k.to_user_string() for k in analytics_dbt.keys)
    with lock("dbt build", DBT_BUILD), _step("dbt build", echo) as note, _dbt_log() as tally:
        [run] = materialize(session, defs, dbt_keys, [world_id])
        note(f"{len(run.metadata)} models, {tally.get('tests', 0)} dbt tests passed; parity checks passed")

    if day is not None and DAY_ASSETS:
        with lock(f"as of {day}", *DAY_ASSETS, day=day), _step(f"as of {day}", echo) as note:
            materialize(session, defs, DAY_ASSETS, [world_day_key(world_id, day)])
            note(", ".join(DAY_ASSETS))


@contextlib.contextmanager
def _step(name: str, echo: Callable[[str], None]) -> Iterator[Callable[[str], None]]:
    started = time.perf_counter()
    summary: list[str] = []
    yield summary.append
    echo(f"  {name:<12} {'; '.join(summary)} [{time.perf_counter() - started:.1f}s]")


_DBT_RESULT = re.compile(r"^\s*(\d+) of (\d+) (OK|PASS|WARN|ERROR|FAIL|SKIP)\b")


class _DbtLines(io.TextIOBase):
    """Takes dagster-dbt's echo of the dbt log (it writes to stdout): counts the results, and keeps the lines for
    an error message. The build's progress is the asset's own (`progress.Tally`, on stderr)."""

    def __init__(self) -> None:
        self.buffer_text = ""
        self.lines: list[str] = []
        self.tally: dict[str, int] = {}

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.buffer_text += text
        while "\n" in self.buffer_text:
            line, self.buffer_text = self.buffer_text.split("\n", 1)
            self.lines.append(line)
            m = _DBT_RESULT.match(line)
            if m:
                kind = "tests" if m[3] in ("PASS", "FAIL", "WARN") else "models"
                self.tally[kind] = self.tally.get(kind, 0) + 1
        return len(text)


@contextlib.contextmanager
def _dbt_log() -> Iterator[dict[str, int]]:
    """Silence dbt's log during the build (the asset prints its progress); on failure, print its last lines to
    stderr."""
    lines = _DbtLines()
    try:
        with contextlib.redirect_stdout(lines):
            yield lines.tally
    except Exception:
        tail = [ln for ln in lines.lines if ln.strip()][-25:]
        if tail:
            click.echo("--- dbt log (last lines) ---\n" + "\n".join(tail), err=True)
        raise


def report_rows(url: str, world_id: str, day: dt.date, echo: Callable[[str], None]) -> None:
    """Rows per table of the truth, raw and analytics schemas, and of each as-of view on `day`."""
    from psycopg import sql

    from churn_assets.fabric.postgres import connection, ident, schema_name

    sections: list[tuple[str, list[tuple[str, int]]]] = []
    views: list[tuple[str, int]] = []
    with connection(url) as conn:
        for layer in ("truth", "raw", "analytics"):
            schema = schema_name(world_id, layer)
            relations = conn.execute(
                """SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = %s AND c.relkind IN ('r', 'v') ORDER BY c.relname""", (schema,)).fetchall()
            tables = []
            for name, kind in relations:
                if kind == "r":
                    count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident(schema, name))).fetchone()
                    tables.append((name, int(count[0]) if count else 0))
                elif name.endswith("_as_of"):
                    count = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE as_of_day = %s").format(
                        ident(schema, name)), (day,)).fetchone()
                    views.append((name, int(count[0]) if count else 0))
            sections.append((f"{schema} (tables)", tables))
    sections.append((f"{schema_name(world_id, 'analytics')} (as-of views on {day})", views))
    width = max((len(name) for _, rows in sections for name, _ in rows), default=10)
    for title, rows in sections:
        echo(f"{title}:")
        for name, count in rows:
            echo(f"  {name:<{width}} {count:>9,}")
