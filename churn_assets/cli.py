"""`churnbench`: the command line. Each command group lives in `churn_assets/commands/<group>.py`;
this module assembles them; every error leaves as one line and a non-zero exit (`commands/error_output.py`)."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from churn_assets.commands.bench import bench
from churn_assets.commands.error_output import report
from churn_assets.commands.llm import llm
from churn_assets.commands.measures import measures
from churn_assets.commands.migrate import migrate
from churn_assets.commands.project import project
from churn_assets.commands.regression import gate_power, regression
from churn_assets.commands.results import results
from churn_assets.commands.run import paper, run
from churn_assets.commands.seals import seals
from churn_assets.commands.services import services
from churn_assets.commands.sweep import sweep
from churn_assets.commands.tasks import exposure, tasks
from churn_assets.commands.ui import ui
from churn_assets.commands.verify import verify_results
from churn_assets.commands.worker import worker
from churn_assets.commands.world import generate, ledger
from churn_assets.commands.worlds import gc, worlds
from churn_assets.errors import DEBUG_ENV


def _debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """`--debug`: the environment variable, so worker processes and nested commands print traces too."""
    if value:
        os.environ[DEBUG_ENV] = "1"


class ChurnbenchGroup(click.Group):
    """Every error prints one line (`commands/error_output.py`): a usage error exits 2, any other error 1 with
    the full trace written to a file the line names; `--debug` / `CHURNBENCH_DEBUG=1` prints the trace."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except SystemExit:
            raise
        except BaseException as e:
            if not isinstance(e, Exception | KeyboardInterrupt):
                raise
            sys.exit(report(e))
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=ChurnbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="churnbench")
@click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_debug,
              help=f"Print the full trace of an error (also: {DEBUG_ENV}=1); without it an error is one line "
                   "naming the file the trace was written to.")
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
main.add_command(seals)
main.add_command(bench)
main.add_command(migrate)
main.add_command(llm)
main.add_command(measures)
main.add_command(worker)
