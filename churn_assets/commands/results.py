"""`churnbench results list|show`: the results catalog (`verify-results` is in `commands/verify.py`).

A RUN is named by its run id (first column of `results list`), its scenario key (today's form, world last, or
the form before issue 20, world first: either finds the run), its experiment hash (or a prefix of at least 4 hex
digits), `<experiment hash>__<code version>`, or its results folder (the path `churnbench run` prints); a name
matching several code versions of one experiment picks the newest.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from churn_assets.commands.experiment_lines import experiment_lines
from churn_assets.errors import UserFacingError
from churn_assets.services import ensure_services, service_errors
from churn_assets.state import WORLD_CONFIG_FILE, StatePaths, require_current_format, validate_world_id

if TYPE_CHECKING:
    from churn_assets.evaluation.catalog import CatalogExperiment, CatalogRun, RunCatalog


@contextmanager
def catalog_of(paths: StatePaths) -> Iterator[RunCatalog]:
    from churn_assets.evaluation.catalog import RunCatalog

    require_current_format(paths)
    urls = ensure_services(paths)
    with service_errors(paths), ExitStack() as stack:
        catalog = RunCatalog(urls.warehouse)
        _report_dead_rows(paths, catalog, lambda: _open_instance(stack, paths, urls))
        yield catalog


def _open_instance(stack: ExitStack, paths: StatePaths, urls: Any) -> Any:
    """The state folder's Dagster instance, opened once, disposed of when `stack` closes."""
    from churn_assets.orchestration.materialize import open_instance

    instance = open_instance(paths, urls)
    stack.callback(instance.dispose)
    return instance


def _report_dead_rows(paths: StatePaths, catalog: RunCatalog, instance: Any) -> None:
    """Rows still `running` whose process is gone are recorded failed before they are listed (one line each), and
    the Dagster runs they name (the instance opened only then)."""
    from churn_assets.orchestration.dead_runs import reap_dead_catalog_rows

    for run in reap_dead_catalog_rows(paths, catalog, functools.cache(instance)):
        click.echo(f"churnbench: {run.line()}", err=True)


def require_known_world(paths: StatePaths, catalog: RunCatalog, world_id: str | None) -> None:
    """Refuse a `--world` that is neither registered nor in the catalog: a typo must not pass as "no runs"
    (a CI gate on `verify-results --all --world X` would pass on a mistyped X)."""
    from churn_assets.orchestration.world_registry import WorldNotFoundError

    if world_id is None or catalog.runs(world_id):
        return
    validate_world_id(world_id)
    if paths.world_config_file(world_id).exists():
        return
    known = sorted(p.parent.name for p in paths.worlds_dir.glob(f"*/{WORLD_CONFIG_FILE}"))
    raise WorldNotFoundError(f"unknown world {world_id}: it is not registered in {paths.root} and has no runs "
                             f"(registered: {', '.join(known) or 'none'}; see `churnbench worlds list`)")


def _policy_name(paths: StatePaths, r: CatalogRun) -> str:
    """The run's policy as `--policy` took it (`ttl:prices=3`), from its scenario's stored definition; the
    policy id (`ttl-4bf6aa`, a hash of the parameters) when the definition is gone."""
    from churn_assets.orchestration.scenarios import load_scenario

    try:
        return load_scenario(paths, r.scenario_key).policy
    except (UserFacingError, OSError, ValueError):
        return r.policy


def _when(value: dt.datetime | None) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def _pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def _num(value: Any, fmt: str = "") -> str:
    return "-" if value is None else format(value, fmt)


@click.group()
def results() -> None:
    """The results catalog: every evaluation run, its status and figures."""


@results.command("list")
@click.option("--world", "world_id", default=None, help="Only the runs of this world.")
def list_(world_id: str | None) -> None:
    """Every run in the catalog (oldest first): status, accuracy, stale answers, when it finished."""
    paths = StatePaths.resolve()
    with catalog_of(paths) as catalog:
        require_known_world(paths, catalog, world_id)
        runs = catalog.runs(world_id)
    if not runs:
        click.echo("no runs yet" + (f" for world {world_id}" if world_id else "")
                   + ": churnbench run --world ID --arm A --t-prime D --t D")
        return
    width = max(len("SCENARIO"), *(len(r.scenario_key) for r in runs))
    code_width = max(len("CODE"), *(len(r.code_version) for r in runs))
    policies = {r.run_id: _policy_name(paths, r) for r in runs}
    policy_width = max(len("POLICY"), *(len(p) for p in policies.values()))
    click.echo(f"{'RUN':>5}  {'SCENARIO':<{width}}  {'POLICY':<{policy_width}}  {'EXPERIMENT':<10}  "
               f"{'CODE':<{code_width}}  {'STATUS':<8}  {'ACC':>6}  {'STALE':>5}  {'TRANSPORT':>9}  FINISHED")
    for r in runs:
        older = "  (older identity: shown, never reused)" if r.older_identity else ""
        retry = f"  (retry {r.retry})" if r.retry else ""
        retry = (f"  (repeat {r.repeat})" if r.repeat else "") + retry
        done = r.status == "complete"  # a row that is not complete has no figures: no summary stands behind them
        accuracy, stale = (_pct(r.accuracy), _num(r.stale_answers)) if done else ("-", "-")
        transport = _num(r.verdicts.get("transport_failure")) if done else "-"
        click.echo(f"{r.run_id:>5}  {r.scenario_key:<{width}}  {policies[r.run_id]:<{policy_width}}  "
                   f"{r.experiment_hash[:10]:<10}  "
                   f"{r.code_version:<{code_width}}  {r.status:<8}  {accuracy:>6}  "
                   f"{stale:>5}  {transport:>9}  "
                   f"{_when(r.finished_at)}{older}{retry}")


@results.command("show")
@click.argument("run_ref", metavar="RUN")
def show(run_ref: str) -> None:
    """One run's identity, status, summary figures, verdict counts and results files.

    RUN: a run id, a scenario key (either form), an experiment hash or prefix, `<hash>__<code version>`, or the
    results folder `churnbench run` printed."""
    paths = StatePaths.resolve()
    with catalog_of(paths) as catalog:
        run, others = catalog.resolve(run_ref)
        repeats = catalog.repeats_of(run)
        experiments = catalog.experiments(run.experiment_hash, run.code_version)
    click.echo(_describe(run, others, _policy_name(paths, run)))
    for line in _experiment_part(run, repeats, experiments):
        click.echo(line)


def _experiment_part(run: CatalogRun, repeats: list[CatalogRun], experiments: list[CatalogExperiment]) -> list[str]:
    """The run's repeats (rows of the same experiment and code version) and the experiment's recorded summary
    over them (the one of the most repeats; issue 33)."""
    lines = []
    if len(repeats) > 1:
        lines.append(f"  repeats        {len(repeats)} rows of this experiment: "
                     + ", ".join(f"repeat {r.repeat} run {r.run_id} ({r.status}"
                                 + (f", accuracy {_pct(r.accuracy)}" if r.status == "complete" else "") + ")"
                                 for r in repeats))
    if experiments:
        e = experiments[0]
        lines.append(f"  experiment summary over {e.repeats} repeat(s) (recorded {_when(e.recorded_at)}"
                     + (f"; also recorded over {', '.join(str(x.repeats) for x in experiments[1:])}"
                        if len(experiments) > 1 else "") + "):")
        lines += [f"    {line}" for line in experiment_lines(e.summary)]
    return lines


def _checkpointed(r: CatalogRun) -> int:
    from churn_assets.evaluation.results import ResultsStore

    return ResultsStore(Path(r.results_dir).parent).checkpointed(Path(r.results_dir))


def _describe(r: CatalogRun, others: list[CatalogRun], policy: str) -> str:
    lines = [
        f"run {r.run_id}: {r.scenario_key}" + (f" (repeat {r.repeat})" if r.repeat else ""),
        f"  experiment     {r.experiment_hash} (identity {r.identity_version}"
        + ("; older: its hash covers less than today's, so it is shown but never reused)" if r.older_identity
           else ")"),
        f"  code version   {r.code_version}",
        f"  world          {r.world}",
        f"  arm / policy   {r.arm} / {policy}" + (f" (policy id {r.policy})" if policy != r.policy else ""),
        f"  T' / T         {r.t_prime} / {r.t}",
        f"  agent / saas   {r.agent_id} / {r.saas_profile}",
        f"  status         {r.status} (attempts {r.attempts}; started {_when(r.started_at)}, "
        f"finished {_when(r.finished_at)})",
    ]
    if r.error:
        lines.append(f"  error          {r.error}")
    if r.status != "complete":
        lines.append(f"  checkpointed   {_checkpointed(r)} task(s) answered so far (not results: no figures until "
                     "the run completes)")
    if r.status == "complete":
        lines += [
            f"  tasks          {r.tasks}, accuracy {_pct(r.accuracy)}",
            f"  transport      {_num(r.verdicts.get('transport_failure'))} transport failure(s)"
            + (f" (retry {r.retry}: `churnbench run --retry-transport` asked the earlier ones again)" if r.retry
               else ""),
            "  verdicts       " + ", ".join(f"{k} {_num(v)}" for k, v in r.verdicts.items()),
            f"  stale answers  {_num(r.stale_answers)} (freshness + mixed vintage); exposure {_num(r.exposure)} "
            f"(degenerate {_num(r.degenerate_exposure)}), prediction {_num(r.prediction, '.2f')}",
            f"  mean cost      {_num(r.mean_cost_units, '.3f')} units; mean latency "
            f"{_num(r.mean_latency_ms, '.1f')} ms",
        ]
    lines.append(f"  results        {r.results_dir}")
    lines += [f"    {name:<8}     {path}" for name, path in r.files.items() if path]
    if others:
        lines.append("  other code versions of this experiment: "
                     + ", ".join(f"run {o.run_id} {o.code_version} ({o.status})" for o in others))
    return "\n".join(lines)
