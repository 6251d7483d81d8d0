"""`churnbench`: the command line. Each command group lives in `churn_assets/commands/<group>.py`;
this module assembles them and turns expected failures into a one-line error and a non-zero exit."""

from __future__ import annotations

import sys

import click

from churn_assets.commands.bench import bench
from churn_assets.commands.llm import llm
from churn_assets.commands.migrate import migrate
from churn_assets.commands.project import project
from churn_assets.commands.regression import gate_power, regression
from churn_assets.commands.results import results, verify_results
from churn_assets.commands.run import paper, run
from churn_assets.commands.services import services
from churn_assets.commands.sweep import sweep
from churn_assets.commands.tasks import exposure, tasks
from churn_assets.commands.ui import ui
from churn_assets.commands.world import generate, ledger
from churn_assets.commands.worlds import gc, worlds


class ChurnbenchGroup(click.Group):
    """Expected errors (bad input, unreachable store) print one line, not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except (click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("churnbench: interrupted", err=True)
            sys.exit(130)
        except Exception as e:
            if not _is_user_facing(e):
                raise
            click.echo(f"churnbench: error: {e}", err=True)
            sys.exit(1)


def _is_user_facing(e: Exception) -> bool:
    """Errors whose message is meant for the user (they name the problem and the place)."""
    from churn_assets.errors import UserFacingError

    return isinstance(e, UserFacingError)


@click.group(cls=ChurnbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="churnbench")
def main() -> None:
    """churnbench: is an agent's answer still true after the data changed?"""


main.add_command(generate)
main.add_command(ledger)
main.add_command(services)
main.add_command(worlds)
main.add_command(gc)
main.add_command(ui)
main.add_command(tasks)
main.add_command(exposure)
main.add_command(sweep)
main.add_command(regression)
main.add_command(gate_power)
main.add_command(project)
main.add_command(run)
main.add_command(paper)
main.add_command(results)
main.add_command(verify_results)
main.add_command(bench)
main.add_command(migrate)
main.add_command(llm)
