"""`churnbench migrate`: bring the state folder to this churnbench's format (`state.STATE_FORMAT`).

Every other command that reads worlds, scenarios or results refuses a folder of an older format in one line
naming this command (`state.require_current_format`); what a migration changes is in
`churn_assets/orchestration/state_migration.py`.
"""

from __future__ import annotations

import click

from churn_assets.state import StatePaths


@click.command()
def migrate() -> None:
    """Migrate the state folder in place: register each world's day partitions, rename scenario keys to the
    form with the world last (results folders, catalog rows, scenario files, eval_run partitions), and check each
    world's ledger for meaning, recording it in its manifest. Idempotent; run it again if it was interrupted."""
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.orchestration.state_migration import migrate_state

    paths = StatePaths.resolve()
    if not paths.root.is_dir():
        click.echo(f"no state folder at {paths.root}: nothing to migrate")
        return
    with open_session(paths, require_format=False) as session:
        report = migrate_state(session)
    for line in report.lines():
        click.echo(line)
