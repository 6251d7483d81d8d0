"""`churnbench verify-results`: check a run's results files, in this order, and name everything not confirmed.

1. **The seal** (always, first): every results file against the MAC under the state folder's key that the catalog
   row recorded when the run completed, and against the seal in Dagster's `eval_run` metadata
   (`evaluation/seals.py`). Proves the files are what the run wrote, unless whoever edited them could read the key
   (the database holds no key: rewriting the row and the metadata through a database connection does not help).
   A seal under another key id is one line, "key changed", and the run is not confirmed; a plain SHA-256 seal in
   the catalog row (what anyone who can write the database can remake) is not confirmed either.
2. **Plain** (always): `stale.csv` made again from `tasks.jsonl`, the catalog's figures recomputed from it, gold
   recomputed from the ledger by the code that scored the run with every verdict and exposure, the summary's counts,
   every warehouse read's observed content against the warehouse as it is now, and, with the deterministic agent,
   the arm's per-row rule of docs/rules.md "Arm correctness" (`evaluation.verify.ARM_RULES`: naive's answers equal
   gold at T, grounding's and its off ablation's gold at the planned vintage). Proves the files agree with each
   other, with the catalog and with the ledger under this code, and that no row breaks its arm's rule; not that
   the answers were the arm's (docs/guarantees.md has the table of what each mode checks).
3. **--independent**: also a second gold, by SQL over the truth schema, with verdicts from the observed data
   times. Proves gold and verdicts under a second implementation that shares no code with the first.
4. **--replay**: every task answered again through the arm, on the stores as they are, each read re-checked against
   its store's recorded hash; every row compared with the stored one. Proves the stored answers are the arm's
   answers on those stores. An LLM run is played back from each row's transcript (`evaluation/replay.py`): every
   read and measure call made again, its result's hash compared with what the model was shown, the answer and
   verdict with what the final reply gives; `--ask-model` also asks the model again each turn under the repeat's
   seed and names a reply that differs (a local model repeats itself: docs/guarantees.md).

A catalog row with no seal is not confirmed (a seal removed through the database must not pass); a folder outside
the catalog says on its line that nothing recorded outside it vouches for its files. A RUN is named as `results
show` names one (`commands/results.py`), or by its folder.

`--public-key KEY.pub` checks instead the Ed25519 signature a publisher wrote into each named folder
(`evaluation/signatures.py`, `churnbench seals sign`): with the public key alone, no state folder or services.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from churn_assets.commands.results import catalog_of, require_known_world
from churn_assets.errors import UserFacingError
from churn_assets.seal_key import KeyChanged
from churn_assets.services import ensure_services, saas_api_key, service_errors
from churn_assets.state import StatePaths
from churn_assets.unique_keys import load_json
from churn_assets.world.ledger import load_ledger

if TYPE_CHECKING:
    from churn_assets.evaluation.catalog import CatalogRun, RunCatalog
    from churn_assets.evaluation.verify import Disagreement


class VerificationFailed(UserFacingError):
    """verify-results found something the run's records do not confirm."""


@click.command("verify-results")
@click.argument("run_refs", nargs=-1, metavar="RUN...")
@click.option("--all", "all_runs", is_flag=True, help="Every complete run in the catalog (of --world).")
@click.option("--world", "world_id", default=None, help="With --all: only the runs of this world.")
@click.option("--independent", is_flag=True,
              help="Also check every gold, verdict and exposure against a second gold, by SQL over the world's "
                   "truth schema (needs `churnbench project --world ID`), with verdicts from the data times the "
                   "traces observed.")
@click.option("--replay", is_flag=True,
              help="Also answer every task again through the arm, re-reading each read at its observed day with its "
                   "store's hash checked, and compare every row; an LLM run is played back from its transcripts.")
@click.option("--ask-model", is_flag=True,
              help="With --replay on an LLM run: also ask the model again each turn (the repeat's seed) and name "
                   "every reply that differs from the recorded one.")
@click.option("--public-key", "public_key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Check only the publisher's Ed25519 signature of each named results FOLDER with this public key "
                   "(PEM; `churnbench seals keygen`): no state folder or services needed.")
def verify_results(run_refs: tuple[str, ...], all_runs: bool, world_id: str | None, independent: bool,
                   replay: bool, ask_model: bool, public_key: Path | None) -> None:
    """Check runs' results files: the seal first, then the files against each other, the catalog and the ledger.

    The seal: each file against the SHA-256 recorded when the run completed (catalog row and Dagster metadata).
    Plain: stale.csv and the catalog's figures recomputed from tasks.jsonl; gold recomputed by the code that scored
    the run; every verdict; warehouse reads against the warehouse now; with the deterministic agent, each row
    against its arm's rule (docs/rules.md, "Arm correctness"). --independent: a second gold in SQL.
    --replay: the tasks answered again and compared. Prints "N rows confirmed" per run, or every disagreement
    (naming the file, the catalog row or the task) and exits 1.
    """
    if not run_refs and not all_runs:
        raise click.UsageError("name a RUN (see `churnbench results list`), a results folder, or pass --all")
    if world_id is not None and not all_runs:
        raise click.UsageError("--world selects the runs of --all; with named RUNs leave it out")
    if ask_model and not replay:
        raise click.UsageError("--ask-model asks the model again while replaying: use it with --replay")
    if public_key is not None:
        _verify_signatures(run_refs, all_runs, independent or replay, public_key)
        return
    paths = StatePaths.resolve()
    failed = []
    with catalog_of(paths) as catalog, _Verifier(paths, catalog, independent, replay, ask_model) as verifier:
        targets: list[tuple[str, Path, CatalogRun | None]] = []
        incomplete: list[str] = []  # repeats of a named experiment that are not complete
        for ref in run_refs:
            if _is_results_folder(ref):
                targets.append((ref, Path(ref), None))
                continue
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
                    targets.append((label, Path(rep.results_dir), rep))
        if all_runs:
            require_known_world(paths, catalog, world_id)
            targets += [(f"run {r.run_id} {r.scenario_key}" + (f" repeat {r.repeat}" if r.repeat else ""),
                         Path(r.results_dir), r) for r in catalog.runs(world_id) if r.status == "complete"]
        if not targets and not incomplete:
            click.echo("no complete runs to verify")
            return
        for label in incomplete:
            failed.append(label)
            click.echo(f"{label}: cannot be verified: a repeat of the experiment that is not complete")
        failed += _repeat_mismatches([(label, folder) for label, folder, _row in targets])
        for label, folder, row in targets:
            try:
                outcome = verifier.verify(folder, row)
            except KeyChanged as e:  # one line: not a forgery that can be shown, never confirmed
                failed.append(label)
                click.echo(f"{label}: {e}")
                continue
            except (UserFacingError, OSError) as e:  # this run cannot be checked; the others still are
                failed.append(label)
                click.echo(f"{label}: cannot be verified: {e}")
                continue
            if not outcome.disagreements:
                click.echo(f"{label}: {outcome.rows} rows confirmed ({'; '.join(outcome.checked)})")
                continue
            failed.append(label)
            tasks = sorted({d.task_id for d in outcome.disagreements if d.task_id is not None})
            click.echo(f"{label}: {len(outcome.disagreements)} disagreement(s) in {outcome.rows} rows "
                       f"({len(tasks)} task(s)):")
            for d in outcome.disagreements:
                click.echo(f"  {d}")
    if failed:
        raise VerificationFailed(f"verify-results: {len(failed)} run(s) not confirmed: " + ", ".join(failed))


@dataclass
class Outcome:
    rows: int
    disagreements: list[Disagreement]
    checked: list[str]  # what vouched for the run, in the order checked (printed when everything holds)


@dataclass
class _Golds:
    """Gold per world, made once for all the runs verified: the Python resolver (ledger file) with the
    ledger's head, and with --independent the SQL gold over the truth schema on one connection."""

    conn: Any = None
    resolvers: dict[str, Any] = field(default_factory=dict)
    heads: dict[str, str | None] = field(default_factory=dict)
    sql: dict[str, Any] = field(default_factory=dict)


class _Verifier:
    """The checks of one `verify-results`, with what they share across runs (golds, one warehouse connection,
    the Dagster instance opened on first use)."""

    def __init__(self, paths: StatePaths, catalog: RunCatalog, independent: bool, replay: bool,
                 ask_model: bool = False) -> None:
        self.paths, self.catalog, self.independent, self.replay = paths, catalog, independent, replay
        self.ask_model = ask_model
        self._asked: Any = None  # the last LLM run's transcript player when the model was asked again
        self.golds = _Golds()
        self._stack = ExitStack()
        self._views: dict[str, dict[str, str] | None] = {}

    def __enter__(self) -> _Verifier:
        from churn_assets.seal_key import seal_key

        self.key = seal_key(self.paths.root)
        self.urls = ensure_services(self.paths)
        self.golds.conn = self._stack.enter_context(_warehouse_connection(self.paths))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @functools.cached_property
    def _instance(self) -> Any:
        from churn_assets.orchestration.materialize import open_instance

        instance = open_instance(self.paths, self.urls)
        self._stack.callback(instance.dispose)
        return instance

    def verify(self, folder: Path, row: CatalogRun | None) -> Outcome:
        from churn_assets.evaluation.consistency import (
            catalog_disagreements,
            seal_disagreements,
            stale_file_disagreements,
            warehouse_disagreements,
            warehouse_reads,
        )
        from churn_assets.evaluation.seals import is_keyed
        from churn_assets.evaluation.verify import (
            Disagreement,
            arm_rule,
            arm_rule_disagreements,
            load_run,
            verify_rows,
            verify_rows_independent,
        )

        row = row or self._row_of(folder)
        folder_name = self._folder_name(folder, row)
        checked: list[str] = []
        # 1. The seal, before anything in the folder is parsed; under the state folder's key, which the database
        # does not hold (a seal under another key raises KeyChanged: one line, never confirmed).
        seals, retired = self._seals(row, folder_name)
        out = seal_disagreements(folder, seals, self.key, folder_name)
        catalog_seal = seals.get("catalog row")
        if catalog_seal is None and row is not None:
            out.append(Disagreement(None, "seal", None, None, where=f"catalog row {row.run_id}", message=(
                "records no seal of this folder: nothing outside the folder vouches for its files (a run made "
                "before seals, or a seal removed through the database)")))
        elif catalog_seal is None:
            checked.append("UNSEALED: nothing recorded outside the folder vouches for its files (a folder outside "
                           "the catalog)")
        elif not is_keyed(catalog_seal):
            out.append(Disagreement(None, "seal", None, None, where=f"catalog row {row.run_id if row else ''}",
                                    message="holds a plain SHA-256 seal, which anyone who can write the database can "
                                            "remake: only a MAC under this state folder's key vouches for the files "
                                            "(`churnbench migrate` re-seals a plain seal whose files still match)"))
        else:
            checked.append(f"seal: {len(catalog_seal['files'])} files match the {' and the '.join(seals)} "
                           f"(key {self.key.key_id})")
            if retired:
                checked.append(retired)
            elif len(seals) == 1:
                checked.append("Dagster records no seal for it (not evaluated by `eval_run`)")
        # 2. Plain.
        stored = load_run(folder)
        tasks, world = self._tasks(folder, stored.experiment)
        resolver = self._resolver(world)
        out += stale_file_disagreements(folder, stored.rows)
        if row is not None and Path(row.results_dir).name == folder_name:  # the row's figures are this folder's
            out += catalog_disagreements(row, stored.rows)
        if row is not None and seals and warehouse_reads(stored.rows):
            out += warehouse_disagreements(stored.rows, self._warehouse_now(world))
            checked.append("warehouse reads match the warehouse now")
        if self.independent:
            out += verify_rows_independent(resolver, self._sql_gold(world), tasks, stored.rows,
                                           stored.summary).disagreements
            checked.append("independent: stored, python and sql gold agree")
        else:
            out += verify_rows(resolver, tasks, stored.rows, stored.summary).disagreements
            checked.append("gold and verdicts recomputed from the ledger")
        rule = arm_rule(stored.experiment)  # every mode: the rule compares answers with golds the modes confirm
        if rule is not None:
            out += arm_rule_disagreements(rule, tasks, stored.rows)
            checked.append(f"arm correctness: {rule.text}")
        if self.replay:
            out += self._replayed(stored, tasks, resolver)
            checked.append("replay: every task answered again the same way")
            if self._asked is not None:
                checked.append(f"the model asked again: {self._asked.asked} replies, {self._asked.differed} differ")
        return Outcome(len(stored.rows), out, checked)

    # -- the run's records ---------------------------------------------------------------------------------

    def _row_of(self, folder: Path) -> CatalogRun | None:
        """The catalog row of a folder named by its path: by the experiment and the repeat its summary names (a
        repeat's folder has its own row and seal: repeat 0's would call every file of it changed)."""
        from churn_assets.evaluation.results import RunKey

        try:
            summary = load_json((folder / "summary.json").read_text(encoding="utf-8"), str(folder / "summary.json"))
            key = RunKey(str(summary["experiment"]["world_id"]), str(summary["scenario_key"]),
                         str(summary["experiment_hash"]), str(summary["code_version"]),
                         repeat=int(summary.get("repeat", 0)))
        except (OSError, ValueError, KeyError, TypeError):
            return None  # the plain check says what is wrong with the summary
        return self.catalog.get(key)

    @staticmethod
    def _folder_name(folder: Path, row: CatalogRun | None) -> str:
        """The folder's name as the run wrote it: its own, when the row's seal knows it (whatever kind of results
        folder it is); a copy elsewhere is found through its summary (the experiment's folder, or its retry)."""
        from churn_assets.evaluation.results import RETRY_SUFFIX

        if row is None or folder.name in (row.seal or {}) or Path(row.results_dir).name == folder.name:
            return folder.name
        try:
            summary_file = folder / "summary.json"
            retry = int(load_json(summary_file.read_text(encoding="utf-8"), str(summary_file)).get("retry", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            retry = 0
        return row.folder_name + (f"{RETRY_SUFFIX}{retry}" if retry else "")

    def _seals(self, row: CatalogRun | None, folder_name: str) -> tuple[dict[str, dict[str, str]], str | None]:
        """Every record of the folder's seal: the catalog row's and Dagster's (by what recorded it); and a note when
        Dagster's is left out because it was made under a key a rotation retired (Dagster's metadata is
        append-only: `seals rotate` seals the catalog row again, not it)."""
        from churn_assets.evaluation.seals import is_keyed
        from churn_assets.seal_key import retired_key_ids

        seals: dict[str, dict[str, str]] = {}
        sealed = (row.seal or {}).get(folder_name) if row is not None else None
        if sealed is None:
            return seals, None
        seals["catalog row"] = sealed
        dagster = self._dagster_seal(row.scenario_key, folder_name) if row is not None else None
        if dagster is not None and is_keyed(dagster) and dagster["key_id"] != self.key.key_id \
                and dagster["key_id"] in retired_key_ids(self.paths.root):
            return seals, (f"Dagster's seal is under key {dagster['key_id']}, which a rotation retired: not checked "
                           "(the catalog row's, under the current key, is)")
        if dagster is not None:
            seals["Dagster eval_run metadata"] = dagster
        return seals, None

    def _dagster_seal(self, scenario_key: str, folder_name: str) -> dict[str, str] | None:
        """The seal of `folder_name` in the newest `eval_run` materialization of the scenario that records one."""
        import dagster as dg

        from churn_assets.evaluation.seals import SEAL_METADATA

        records = self._instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("eval_run"), asset_partitions=[scenario_key]),
            limit=100, ascending=False).records
        for record in records:
            materialization = record.asset_materialization
            value = materialization.metadata.get(SEAL_METADATA) if materialization is not None else None
            sealed = (getattr(value, "value", None) or {}).get(folder_name) if value is not None else None
            if sealed is not None:
                return dict(sealed)
        return None

    def _tasks(self, folder: Path, experiment: dict[str, Any]) -> tuple[list[Any], str]:
        from churn_assets.tasks.task_set import read_tasks, task_set_hash

        try:
            world, t, expected_hash = experiment["world_id"], experiment["t"], experiment["task_set_hash"]
        except KeyError as e:
            raise UserFacingError(f"{folder}/summary.json names no {e.args[0]} of its experiment") from None
        task_file = self.paths.task_set_file(world, t)
        tasks = read_tasks(task_file)
        if task_set_hash(tasks) != expected_hash:
            raise UserFacingError(f"the task set {task_file} is not the one run {folder.name} answered (task-set "
                                  f"hash {task_set_hash(tasks)[:12]}, the run's {str(expected_hash)[:12]})")
        return tasks, world

    def _resolver(self, world: str) -> Any:
        from churn_assets.tasks.gold import GoldResolver

        golds = self.golds
        if world not in golds.resolvers:
            ledger_dir = self.paths.ledger_dir(world)
            if not ledger_dir.is_dir():
                raise UserFacingError(f"world {world} has no ledger in {ledger_dir.parent}: nothing to recompute "
                                      "gold from (`churnbench worlds materialize` rebuilds it)")
            loaded = load_ledger(ledger_dir)
            golds.resolvers[world] = GoldResolver(loaded.records, format_version=loaded.format_version)
            golds.heads[world] = loaded.head_hash
        return golds.resolvers[world]

    def _sql_gold(self, world: str) -> Any:
        return _sql_gold(self.golds, world)

    def _warehouse_now(self, world: str) -> dict[str, str]:
        """Per as-of view, the hash of what it reads now, checked against the dbt build's record (raises
        naming the relation that changed since the build)."""
        from churn_assets.fabric.warehouse_content import verify_content
        from churn_assets.grounding.registry import load_registry
        from churn_assets.grounding.routes import warehouse_views

        if world not in self._views:
            self._views[world] = verify_content(self.golds.conn, world, warehouse_views(load_registry()))
        return self._views[world] or {}

    # -- --replay -------------------------------------------------------------------------------------------

    def _replayed(self, stored: Any, tasks: list[Any], resolver: Any) -> list[Disagreement]:
        from churn_assets.arms.registry import arm_spec, make_arm
        from churn_assets.evaluation.replay import replay_llm_rows, replay_rows
        from churn_assets.fabric.roles import arm_secret, prepare_arm
        from churn_assets.fabric.sources import close_sources, connect_sources
        from churn_assets.fabric.warehouse_content import verified_views
        from churn_assets.freshness.scenario import DETERMINISTIC_AGENT
        from churn_assets.grounding.registry import load_registry
        from churn_assets.grounding.routes import warehouse_views
        from churn_assets.orchestration.scenarios import load_scenario, stored_plan

        key = str(stored.summary.get("scenario_key"))
        scenario = load_scenario(self.paths, key)
        agent, chat = (None, None) if scenario.agent_id == DETERMINISTIC_AGENT else self._playback(scenario, stored)
        plan = stored_plan(self.paths, key)
        if plan is None:
            raise UserFacingError(f"scenario {key} has no stored plan to answer it again with")
        world, urls = scenario.world_id, self.urls
        secret = arm_secret(self.paths.arm_secret_file)
        prepare_arm(urls.warehouse, world, secret)
        sources = connect_sources(world, warehouse_url=urls.warehouse, mongo_url=urls.mongodb, saas_url=urls.saas,
                                  saas_key=saas_api_key(self.paths, scenario.saas_profile, world_id=world)
                                  if urls.saas else None,
                                  documents_root=self.paths.contracts_root(world), warehouse_secret=secret)
        try:
            if not arm_spec(scenario.arm).searches_corpus:
                sources.warehouse_content = verified_views(urls.warehouse, world, warehouse_views(load_registry()))
            arm = make_arm(scenario, sources, served=plan.served_vintage, agent=agent)
            if chat is not None:
                return replay_llm_rows(arm, chat, tasks, stored.rows, resolver)
            return replay_rows(arm, tasks, stored.rows, resolver)
        finally:
            close_sources(sources)

    def _playback(self, scenario: Any, stored: Any) -> tuple[Any, Any]:
        """An LLM scenario's agent with the transcript player as its chat model; asking the model (`--ask-model`)
        with the repeat's sampling, on this state folder's model server for a local model."""
        import functools

        from churn_assets.arms.agents.llm import LlmAgent, agent_for_scenario
        from churn_assets.arms.agents.llm_settings import check_agent_settings
        from churn_assets.arms.agents.llm_transcript import TranscriptChat
        from churn_assets.orchestration.assets.evaluation import serve_local

        settings = check_agent_settings(scenario.agent_id, scenario.model_settings)
        live = None
        if self.ask_model:
            sampling = settings.sampling(str(stored.summary["experiment_hash"]), int(stored.summary.get("repeat", 0)))
            live = agent_for_scenario(scenario.agent_id, scenario.model_settings, sampling=sampling,
                                      serve_local=functools.partial(serve_local, self.paths)).chat_model
        chat = TranscriptChat(ask=live)
        self._asked = chat if live is not None else None
        return LlmAgent(settings, chat_model=chat), chat


@contextmanager
def _warehouse_connection(paths: StatePaths) -> Iterator[Any]:
    from churn_assets.fabric.postgres import connection

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


def _verify_signatures(refs: tuple[str, ...], all_runs: bool, with_modes: bool, public_key: Path) -> None:
    """`verify-results FOLDER... --public-key KEY`: each folder's Ed25519 signature with the public key alone."""
    from churn_assets.evaluation.signatures import check_signature

    if all_runs or with_modes:
        raise click.UsageError("--public-key checks signed results FOLDERs by their path, alone: leave out --all, "
                               "--independent and --replay")
    failed = []
    for ref in refs:
        folder = Path(ref)
        if not folder.is_dir():
            raise UserFacingError(f"{ref} is not a results folder: --public-key checks folders by their path")
        problems, files = check_signature(folder, public_key)
        if problems:
            failed.append(ref)
            click.echo(f"{ref}: signature not confirmed:")
            for p in problems:
                click.echo(f"  {p}")
        else:
            click.echo(f"{ref}: signature confirmed: {files} files signed by the key {public_key}")
    if failed:
        raise VerificationFailed(f"verify-results: {len(failed)} folder(s) not confirmed: " + ", ".join(failed))


def _is_results_folder(ref: str) -> bool:
    return (Path(ref) / "summary.json").is_file()


def _repeat_mismatches(folders: list[tuple[str, Path]]) -> list[str]:
    """The deterministic agent's repeats among `folders` (siblings `<hash>__<code>[__rep<r>]`) must answer every
    task alike: one line per experiment whose repeats differ, naming the tasks (printed here)."""
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
