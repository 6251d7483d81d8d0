"""`churnbench results list|show` (the results catalog) and `churnbench verify-results` (every verdict of a
run recomputed from the ledger; with `--independent`, also set against the SQL gold over the truth schema).

A RUN is named by its run id (first column of `results list`), its scenario key (today's form, world last, or
the form before issue 20, world first: either finds the run), its experiment hash (or a prefix of at least 4 hex
digits), `<experiment hash>__<code version>`, or its results folder (the path `churnbench run` prints); a name
matching several code versions of one experiment picks the newest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from churn_assets.errors import UserFacingError
from churn_assets.state import StatePaths

if TYPE_CHECKING:
    from churn_assets.evaluation.catalog import CatalogExperiment, CatalogRun, RunCatalog
    from churn_assets.evaluation.verify import VerifyReport


class VerificationFailed(UserFacingError):
    """verify-results found rows the ledger does not confirm."""


@contextmanager
def _catalog(paths: StatePaths) -> Iterator[RunCatalog]:
    from churn_assets.evaluation.catalog import RunCatalog
    from churn_assets.services import ensure_services, service_errors
    from churn_assets.state import require_current_format

    require_current_format(paths)
    urls = ensure_services(paths)
    with service_errors(paths):
        catalog = RunCatalog(urls.warehouse)
        _report_dead_rows(paths, catalog)
        yield catalog


def _report_dead_rows(paths: StatePaths, catalog: RunCatalog) -> None:
    """Rows still `running` whose process is gone are recorded failed before they are listed (one line each)."""
    from churn_assets.orchestration.dead_runs import reap_dead_catalog_rows

    for run in reap_dead_catalog_rows(paths, catalog):
        click.echo(f"churnbench: {run.line()}", err=True)


def _require_known_world(paths: StatePaths, catalog: RunCatalog, world_id: str | None) -> None:
    """Refuse a `--world` that is neither registered nor in the catalog: a typo must not pass as "no runs"
    (a CI gate on `verify-results --all --world X` would pass on a mistyped X)."""
    from churn_assets.orchestration.world_registry import WorldNotFoundError
    from churn_assets.state import WORLD_CONFIG_FILE, validate_world_id

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
    with _catalog(paths) as catalog:
        _require_known_world(paths, catalog, world_id)
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
        click.echo(f"{r.run_id:>5}  {r.scenario_key:<{width}}  {policies[r.run_id]:<{policy_width}}  "
                   f"{r.experiment_hash[:10]:<10}  "
                   f"{r.code_version:<{code_width}}  {r.status:<8}  {_pct(r.accuracy):>6}  "
                   f"{_num(r.stale_answers):>5}  {_num(r.verdicts.get('transport_failure')):>9}  "
                   f"{_when(r.finished_at)}{older}{retry}")


@results.command("show")
@click.argument("run_ref", metavar="RUN")
def show(run_ref: str) -> None:
    """One run's identity, status, summary figures, verdict counts and results files.

    RUN: a run id, a scenario key (either form), an experiment hash or prefix, `<hash>__<code version>`, or the
    results folder `churnbench run` printed."""
    paths = StatePaths.resolve()
    with _catalog(paths) as catalog:
        run, others = catalog.resolve(run_ref)
        repeats = catalog.repeats_of(run)
        experiments = catalog.experiments(run.experiment_hash, run.code_version)
    click.echo(_describe(run, others, _policy_name(paths, run)))
    for line in _experiment_part(run, repeats, experiments):
        click.echo(line)


def _experiment_part(run: CatalogRun, repeats: list[CatalogRun], experiments: list[CatalogExperiment]) -> list[str]:
    """The run's repeats (rows of the same experiment and code version) and the experiment's recorded summary
    over them (the one of the most repeats; issue 33)."""
    from churn_assets.commands.experiment_lines import experiment_lines

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


@click.command("verify-results")
@click.argument("run_refs", nargs=-1, metavar="RUN...")
@click.option("--all", "all_runs", is_flag=True, help="Every complete run in the catalog (of --world).")
@click.option("--world", "world_id", default=None, help="With --all: only the runs of this world.")
@click.option("--independent", is_flag=True,
              help="Also check every gold, verdict and exposure against a second gold, by SQL over the world's "
                   "truth schema (needs `churnbench project --world ID`), with verdicts from the data times the "
                   "traces observed.")
def verify_results(run_refs: tuple[str, ...], all_runs: bool, world_id: str | None, independent: bool) -> None:
    """Recompute gold from the ledger for every task of a run (correct rows too) and confirm each verdict.

    Plain: gold recomputed by the code that scored the run, so it proves the results files were not edited.
    --independent: also the SQL gold over the truth schema at T, at the served and the planned vintage, and the
    verdict re-derived from the observed data times, so it proves gold and verdicts under a second
    implementation. Prints "N rows confirmed" per run, or every disagreement (naming the task) and exits 1.
    """
    if not run_refs and not all_runs:
        raise click.UsageError("name a RUN (see `churnbench results list`), a results folder, or pass --all")
    if world_id is not None and not all_runs:
        raise click.UsageError("--world selects the runs of --all; with named RUNs leave it out")
    paths = StatePaths.resolve()
    folders: list[tuple[str, Path]] = []
    incomplete: list[str] = []  # repeats of a named experiment that are not complete
    refs = [r for r in run_refs if not _is_results_folder(r)]
    folders += [(r, Path(r)) for r in run_refs if _is_results_folder(r)]
    if refs or all_runs:
        with _catalog(paths) as catalog:
            for ref in refs:
                run, _ = catalog.resolve(ref)
                if run.status != "complete":
                    raise UserFacingError(f"run {run.run_id} ({run.scenario_key}) is {run.status}: only a complete "
                                          "run can be verified")
                # every repeat of the experiment it names (issue 33): one not complete is not confirmed
                for rep in catalog.repeats_of(run):
                    label = f"run {rep.run_id} {rep.scenario_key}" + (f" repeat {rep.repeat}" if rep.repeat else "")
                    if rep.status != "complete":
                        incomplete.append(f"{label} is {rep.status}")
                    else:
                        folders.append((label, Path(rep.results_dir)))
            if all_runs:
                _require_known_world(paths, catalog, world_id)
                folders += [(f"run {r.run_id} {r.scenario_key}", Path(r.results_dir))
                            for r in catalog.runs(world_id) if r.status == "complete"]
    if not folders and not incomplete:
        click.echo("no complete runs to verify")
        return
    golds = _Golds()
    failed = []
    with ExitStack() as stack:
        if independent:
            golds.conn = stack.enter_context(_truth_connection(paths))
        for label in incomplete:
            failed.append(label)
            click.echo(f"{label}: cannot be verified: a repeat of the experiment that is not complete")
        for label in _repeat_mismatches(folders):
            failed.append(label)
        for label, folder in folders:
            try:
                report = _verify_folder(paths, folder, golds)
            except (UserFacingError, OSError) as e:  # this run cannot be checked; the others still are
                failed.append(label)
                click.echo(f"{label}: cannot be verified: {e}")
                continue
            if report.ok:
                how = " (independent: stored, python and sql gold agree)" if independent else ""
                click.echo(f"{label}: {report.rows} rows confirmed{how}")
                continue
            failed.append(label)
            click.echo(f"{label}: {len(report.disagreements)} disagreement(s) in {report.rows} rows "
                       f"({len(report.tasks_disagreeing)} task(s)):")
            for d in report.disagreements:
                click.echo(f"  {d}")
    if failed:
        raise VerificationFailed(f"verify-results: {len(failed)} run(s) not confirmed by the ledger: "
                                 + ", ".join(failed))


@dataclass
class _Golds:
    """Gold per world, made once for all the runs verified: the Python resolver (ledger file) with the
    ledger's head, and with --independent the SQL gold over the truth schema on one connection."""

    conn: Any = None
    resolvers: dict[str, Any] = field(default_factory=dict)
    heads: dict[str, str | None] = field(default_factory=dict)
    sql: dict[str, Any] = field(default_factory=dict)


@contextmanager
def _truth_connection(paths: StatePaths) -> Iterator[Any]:
    from churn_assets.fabric.postgres import connection
    from churn_assets.services import ensure_services, service_errors

    urls = ensure_services(paths)
    with service_errors(paths), connection(urls.warehouse, autocommit=True) as conn:
        yield conn


def _sql_gold(golds: _Golds, world: str) -> Any:
    from churn_assets.evaluation.independent import SqlGold
    from churn_assets.fabric.postgres import schema_name
    from churn_assets.fabric.truth import truth_head

    if world not in golds.sql:
        head = truth_head(golds.conn, world)
        if head is None:
            raise UserFacingError(f"world {world} has no truth layer ({schema_name(world, 'truth')}) for the "
                                  f"independent gold: run `churnbench project --world {world}`")
        if head.head_hash != golds.heads[world]:  # else the two golds would read two different ledgers
            raise UserFacingError(f"the truth layer of world {world} holds ledger head {str(head.head_hash)[:12]}, "
                                  f"the ledger file {str(golds.heads[world])[:12]}: reload it with "
                                  f"`churnbench project --world {world}`")
        golds.sql[world] = SqlGold(golds.conn, world)
    return golds.sql[world]


def _repeat_mismatches(folders: list[tuple[str, Path]]) -> list[str]:
    """The deterministic agent's repeats among `folders` (siblings `<hash>__<code>[__rep<r>]`) must answer every
    task alike: one line per experiment whose repeats differ, naming the tasks (printed here)."""
    import json

    from churn_assets.evaluation.repeats import repeat_disagreements
    from churn_assets.evaluation.results import parse_folder_name
    from churn_assets.evaluation.verify import load_run
    from churn_assets.freshness.scenario import DETERMINISTIC_AGENT

    groups: dict[tuple[Path, str], list[tuple[int, str, Path]]] = {}
    for label, folder in folders:
        base, repeat, _retry = parse_folder_name(folder.name)
        groups.setdefault((folder.parent, base), []).append((repeat, label, folder))
    out = []
    for (_parent, base), members in groups.items():
        if len({m[0] for m in members}) < 2:
            continue
        members.sort()
        try:
            runs = [load_run(m[2]) for m in members]
        except (UserFacingError, OSError, json.JSONDecodeError):
            continue  # each folder's own check says what is wrong with it
        if runs[0].experiment.get("agent_id") != DETERMINISTIC_AGENT:
            continue
        try:
            differ = repeat_disagreements([r.rows for r in runs])
        except (ValueError, IndexError) as e:  # the repeats' rows are not the same tasks in the same order
            differ = [str(e) or "the repeats do not hold the same tasks"]
        if differ:
            label = f"experiment {base} (repeats {', '.join(str(m[0]) for m in members)})"
            click.echo(f"{label}: the deterministic agent's repeats differ in {len(differ)} task(s):")
            for line in differ:
                click.echo(f"  {line}")
            out.append(label)
    return out


def _is_results_folder(ref: str) -> bool:
    return (Path(ref) / "summary.json").is_file()


def _verify_folder(paths: StatePaths, folder: Path, golds: _Golds) -> VerifyReport:
    from churn_assets.evaluation.verify import load_run, verify_rows, verify_rows_independent
    from churn_assets.tasks.gold import GoldResolver
    from churn_assets.tasks.task_set import read_tasks, task_set_hash
    from churn_assets.world.ledger import load_ledger

    stored = load_run(folder)
    experiment = stored.experiment
    try:
        world, t, expected_hash = experiment["world_id"], experiment["t"], experiment["task_set_hash"]
    except KeyError as e:
        raise UserFacingError(f"{folder}/summary.json names no {e.args[0]} of its experiment") from None
    task_file = paths.task_set_file(world, t)
    tasks = read_tasks(task_file)
    if task_set_hash(tasks) != expected_hash:
        raise UserFacingError(f"the task set {task_file} is not the one run {folder.name} answered (task-set hash "
                              f"{task_set_hash(tasks)[:12]}, the run's {str(expected_hash)[:12]})")
    if world not in golds.resolvers:
        ledger_dir = paths.ledger_dir(world)
        if not ledger_dir.is_dir():
            raise UserFacingError(f"world {world} has no ledger in {ledger_dir.parent}: nothing to recompute gold "
                                  "from (`churnbench worlds materialize` rebuilds it)")
        loaded = load_ledger(ledger_dir)
        golds.resolvers[world] = GoldResolver(loaded.records, format_version=loaded.format_version)
        golds.heads[world] = loaded.head_hash
    if golds.conn is not None:
        return verify_rows_independent(golds.resolvers[world], _sql_gold(golds, world), tasks, stored.rows,
                                       stored.summary)
    return verify_rows(golds.resolvers[world], tasks, stored.rows, stored.summary)
