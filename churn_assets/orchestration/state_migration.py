"""`churnbench migrate`: bring a state folder of an older format to `state.STATE_FORMAT`, in place.

Format 1 -> 2 (issue 20):

- **World-day partitions.** Every registered world gets one `world_day` partition per day of its own calendar
  (`world_registry.register_world_days`; what `worlds add` does now). Their keys are the string form of the
  multi-partition keys of before (`<day>|<world>`), so every materialization already recorded matches them.
- **Scenario keys, world last.** Every scenario stored under the form of before (`<world>__<arm>__...`) is renamed
  to today's (`<arm>__...__<world>`, `freshness/scenario.py`) wherever it names something:
  - results folders `<state>/results/<world>/<key>/` (moved; each run's `summary.json` gets the new
    `scenario_key`, the one field it holds of the key: nothing else in a run folder names it);
  - rows of the results catalog (`scenario_key`, `results_dir` and the file paths, one transaction);
  - definition files `<state>/scenarios/<key>.json` (renamed: the content holds no key);
  - sweep records `<state>/sweeps/<sweep id>.json` (their outcomes are keyed by scenario key, and each names its
    key and results folder; a sweep's report is made again from its record when `sweep_report` materializes);
  - `eval_run` partitions (the new key added, the latest materialization of the old one recorded again on it
    as a runless materialization with the same metadata, its `results` path moved and `migrated_from_scenario_key`
    added, then the old key deleted; Dagster's event log keeps the old key's history, append-only).

  The experiment hash and the code version do not change: the experiment (`runner.RunSpec.experiment`) holds
  the scenario's parts, never its key, so a migrated run is reused by the next run of its scenario.

Format 2 -> 3 (issue 35):

- **Ledgers checked for meaning.** Every registered world's ledger is read through the meaning check
  (`world.ledger.check_meaning`: every event possible in the world the events before it made), and the passed
  check recorded in its manifest, which every loader now requires. A ledger that fails is left as it is and named
  in the report with its line: loaders refuse it, and `churnbench worlds materialize <world>` makes it again from
  its config. The steps of format 2 run too; on a format-2 folder they find nothing to do.
- **Warehouse content recorded.** Every world whose dbt build is complete gets the content hashes evaluations
  check their warehouse reads against (`fabric/warehouse_content.record_content`), taken from the warehouse as it
  is: an older build recorded none, so there is nothing to compare it with; from now on it is checked. (Without
  this every such world's dbt build would count as missing and be built again by its next run.)

Format 3 -> 4 (issue 46):

- **Results seals keyed.** Every catalog row's plain SHA-256 seal of a results folder (`{file: sha256}`, what anyone
  who can write the database can remake) is checked against the folder's files and, if they still match, made again
  as a MAC under the state folder's key (`seal_key.py`, `evaluation/seals.reseal`; the key file is made on first
  use). A plain seal whose folder is missing or whose files no longer match is left as it is and named in the
  report: `verify-results` does not confirm it. A seal is re-sealed once: a keyed one is never touched again (a
  forgery must not gain a MAC). Dagster's `eval_run` metadata keeps its plain seal (append-only; checked by
  SHA-256 beside the catalog row's MAC).

Format 4 -> 5 (issue 46):

- **Meaning checks and warehouse records keyed.** A ledger manifest's meaning check (`world.ledger.meaning_record`)
  and each row of a warehouse's content record (`fabric.warehouse_content`) are MACs under the state folder's key
  from now on: an unkeyed one is plain data anyone could type. Each registered world's ledger is read through the
  meaning check again and the passed check recorded sealed (the step of format 3, which now trusts no unkeyed
  record); a warehouse record without seals is compared with the warehouse as it is and sealed when every hash
  still matches, else named in the report and left unsealed (evaluations refuse it: rebuild the world's dbt
  models).

Every step is idempotent and looks for its own leftovers, so a migration cut short is finished by running it
again; `state-format` is written last, and until then every other command refuses the folder
(`state.require_current_format`). One migration at a time (a lock file in the state folder).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from churn_assets.errors import UserFacingError
from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.results import SUMMARY_FILE
from churn_assets.fabric.postgres import connection
from churn_assets.fabric.warehouse_content import current_hashes, describe_change, record_content, stored_content
from churn_assets.files import LockTimeoutError
from churn_assets.freshness.scenario import ScenarioError, parse_scenario_key
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.routes import warehouse_views
from churn_assets.orchestration.materialize import Session
from churn_assets.orchestration.partitions import SCENARIO_PARTITIONS_NAME, WORLD_DAY_PARTITIONS_NAME, world_day_keys
from churn_assets.orchestration.scenario_inputs import dbt_models_built
from churn_assets.orchestration.scenarios import stored_scenario_keys
from churn_assets.orchestration.world_registry import load_world_config, register_world_days, registered_worlds
from churn_assets.seal_key import seal_key
from churn_assets.state import (
    MIGRATE_COMMAND,
    STATE_FORMAT,
    StateFormatError,
    StatePaths,
    atomic_write_text,
    stored_state_format,
    write_state_format,
)
from churn_assets.state_locks import state_locks
from churn_assets.unique_keys import load_json
from churn_assets.world.ledger import LEDGER_FILE, LedgerError, check_meaning

EVAL_RUN = dg.AssetKey("eval_run")
MIGRATED_FROM = "migrated_from_scenario_key"
MIGRATION_LOCK = "migrate"  # a state lock (`state_locks.py`)


class MigrationError(UserFacingError):
    """A state folder that cannot be migrated as it is; the message names what is in the way."""


@dataclass
class MigrationReport:
    """What one `migrate_state` did (all zero when the folder was current)."""

    root: Path
    from_format: int
    to_format: int = STATE_FORMAT
    world_days: dict[str, int] = field(default_factory=dict)  # world -> world-day partitions added
    results_folders: int = 0
    summaries: int = 0
    catalog_rows: int = 0
    scenario_files: int = 0
    sweep_records: int = 0
    scenario_partitions: int = 0
    materializations: int = 0
    ledgers_checked: int = 0
    warehouses_recorded: int = 0
    seals_keyed: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.from_format != self.to_format

    def lines(self) -> list[str]:
        if not self.changed:
            return [f"state folder {self.root} is of format {self.to_format} already: nothing to migrate"]
        days = sum(self.world_days.values())
        out = [f"state folder {self.root}: format {self.from_format} -> {self.to_format}",
               f"  world-day partitions: {days} added for {len(self.world_days)} world(s) (one per day of each "
               "world's calendar)"]
        out += [f"    {w}: {n}" for w, n in sorted(self.world_days.items())]
        out.append(f"  scenario keys now put the world last: {self.scenario_files} definition file(s), "
                   f"{self.scenario_partitions} eval_run partition(s) ({self.materializations} materialization(s) "
                   f"carried over), {self.results_folders} results folder(s) ({self.summaries} summary file(s)), "
                   f"{self.catalog_rows} catalog row(s), {self.sweep_records} sweep record(s) renamed")
        out.append(f"  ledgers: {self.ledgers_checked} checked for meaning and recorded in their manifest; "
                   f"warehouses: {self.warehouses_recorded} with their content hashes recorded")
        out.append(f"  results seals: {self.seals_keyed} plain seal(s) that still match their files re-sealed under "
                   "the state folder's key")
        out += [f"  note: {n}" for n in self.notes]
        return out


def renamed_key(key: str) -> str | None:
    """Today's form of a scenario key stored in the form of before; None for a key that needs no renaming
    (today's form, or no scenario key at all)."""
    try:
        parts = parse_scenario_key(key)
    except ScenarioError:
        return None
    return str(parts) if parts.old_form else None


@contextmanager
def _migration_lock(paths: StatePaths) -> Iterator[None]:
    try:
        with state_locks(paths).hold(MIGRATION_LOCK, timeout=0):
            yield
    except LockTimeoutError:
        raise MigrationError(f"another `{MIGRATE_COMMAND}` is running on {paths.root}") from None


def migrate_state(session: Session) -> MigrationReport:
    """Migrate the session's state folder to `STATE_FORMAT` (see the module doc); idempotent."""
    paths = session.paths
    found = stored_state_format(paths)
    report = MigrationReport(paths.root, found)
    if found > STATE_FORMAT:
        raise StateFormatError(f"state folder {paths.root} is of format {found}, newer than this churnbench's "
                               f"{STATE_FORMAT}: a newer churnbench wrote it; use that version")
    if found == STATE_FORMAT:
        return report
    with _migration_lock(paths):
        _register_world_days(session, report)
        _move_results(paths, report)
        _rewrite_summaries(paths, report)

        report.catalog_rows = RunCatalog(session.urls.warehouse).rename_scenario_keys(renamed_key)
        _rename_scenario_files(paths, report)
        _rename_in_sweep_records(paths, report)
        _rename_scenario_partitions(session, report)
        _check_ledger_meaning(session, report)
        _record_warehouse_content(session, report)
        _key_plain_seals(session, report)
        write_state_format(paths)
    return report


# ---------------------------------------------------------------------------------------------------
# Steps (each idempotent)
# ---------------------------------------------------------------------------------------------------


def _register_world_days(session: Session, report: MigrationReport) -> None:
    instance = session.instance
    have = set(instance.get_dynamic_partitions(WORLD_DAY_PARTITIONS_NAME))
    for world in registered_worlds(instance):
        try:
            config = load_world_config(session.paths, world)
        except UserFacingError as e:
            report.notes.append(f"world {world} keeps no day partitions: {e}")
            continue
        missing = [k for k in world_day_keys(config) if k not in have]
        register_world_days(instance, config)
        report.world_days[world] = len(missing)


def _check_ledger_meaning(session: Session, report: MigrationReport) -> None:
    """Each registered world's ledger through the meaning check, recorded sealed in its manifest (formats 3, 5)."""
    for world in sorted(registered_worlds(session.instance)):
        ledger_dir = session.paths.ledger_dir(world)
        if not (ledger_dir / LEDGER_FILE).exists():
            continue  # not materialized yet: the ledger asset writes it checked
        try:
            checked = check_meaning(ledger_dir, key=seal_key(session.paths.root))
        except LedgerError as e:
            report.notes.append(f"world {world}: its ledger fails the check and loaders will refuse it ({e}); "
                                f"make it again with `churnbench worlds materialize {world}`")
            continue
        if checked.recorded or checked.already:
            report.ledgers_checked += 1
        else:
            report.notes.append(f"world {world}: its ledger passed the meaning check but {ledger_dir} could not "
                                "be written to record it")


def _record_warehouse_content(session: Session, report: MigrationReport) -> None:
    """Each registered world's complete dbt build gets its content hashes recorded, sealed, if it has none (format
    3); a record without seals is sealed if the warehouse still matches it, else named (format 5)."""
    views, key = warehouse_views(load_registry()), seal_key(session.paths.root)
    with connection(session.urls.warehouse) as conn:
        for world in sorted(registered_worlds(session.instance)):
            stored = stored_content(conn, world)
            if not dbt_models_built(conn, world) or (stored and all(r.mac for r in stored.values())):
                conn.rollback()
                continue
            if stored:
                _, now = current_hashes(conn, world, views)
                changed = [describe_change(now[r], stored[r].hashed if r in stored else None) for r in sorted(now)
                           if r not in stored or stored[r].hashed != now[r]]
                if changed:
                    report.notes.append(f"world {world}: its warehouse record is left unsealed, the warehouse no "
                                        f"longer matches it ({'; '.join(changed)}); evaluations refuse it until "
                                        "its dbt models are built again")
                    conn.rollback()
                    continue
            record_content(conn, world, views, key)
            report.warehouses_recorded += 1


def _key_plain_seals(session: Session, report: MigrationReport) -> None:
    """Each catalog row's plain seals re-sealed under the state folder's key if their files still match them,
    else named in the report (format 4)."""
    from churn_assets.evaluation.seals import is_keyed, reseal

    catalog = RunCatalog(session.urls.warehouse)
    key = None
    for row in catalog.runs():
        if not row.seal or all(is_keyed(s) for s in row.seal.values()):
            continue
        key = key or seal_key(session.paths.root)
        new, changed = dict(row.seal), False
        for name, seal in sorted(row.seal.items()):
            if is_keyed(seal):
                continue
            folder = Path(row.results_dir).parent / name
            if not folder.is_dir():
                report.notes.append(f"catalog row {row.run_id}: its plain seal of {folder} is kept, not keyed: the "
                                    "folder is missing (verify-results will not confirm it)")
                continue
            keyed, problems = reseal(folder, seal, None, key)
            if keyed is None:
                report.notes.append(f"catalog row {row.run_id}: its plain seal of {folder} is kept, not keyed: "
                                    f"{'; '.join(problems)} (verify-results will not confirm it)")
                continue
            new[name], changed = keyed, True
            report.seals_keyed += 1
        if changed:
            catalog.set_seal(row.run_id, new)


def _move_results(paths: StatePaths, report: MigrationReport) -> None:
    """`results/<world>/<old key>/<run>/` -> `results/<world>/<new key>/<run>/` (a rename; run by run when the
    new folder exists already, refusing a run folder present under both names)."""
    base = paths.root / "results"
    for world_dir in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []:
        for key_dir in sorted(p for p in world_dir.iterdir() if p.is_dir()):
            new = renamed_key(key_dir.name)
            if new is None:
                continue
            target = world_dir / new
            if not target.exists():
                key_dir.rename(target)
            else:
                for run in sorted(key_dir.iterdir()):
                    if (target / run.name).exists():
                        raise MigrationError(f"results folder {run} exists under the new key too ({target / run.name}):"
                                             " keep one of them and run the migration again")
                    run.rename(target / run.name)
                key_dir.rmdir()
            report.results_folders += 1


def _rewrite_summaries(paths: StatePaths, report: MigrationReport) -> None:
    """Every completed run's `summary.json` names the key of the folder it is in (the folders moved above, and
    any moved by a migration that stopped before this step)."""
    base = paths.root / "results"
    for summary in sorted(base.glob(f"*/*/*/{SUMMARY_FILE}")) if base.is_dir() else []:
        key = summary.parent.parent.name
        data = load_json(summary.read_text(), str(summary))
        stored = data.get("scenario_key")
        if stored == key or renamed_key(str(stored)) != key:
            continue  # current, or not this folder's scenario (never guessed)
        data["scenario_key"] = key
        atomic_write_text(summary, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        report.summaries += 1


def _rename_scenario_files(paths: StatePaths, report: MigrationReport) -> None:
    for key in stored_scenario_keys(paths):
        new = renamed_key(key)
        if new is None:
            continue
        old_file, new_file = paths.scenario_file(key), paths.scenario_file(new)
        if new_file.exists():
            old_file.unlink()  # renamed by a migration cut short after the rename
        else:
            os.replace(old_file, new_file)
        report.scenario_files += 1


def _rename_in_sweep_records(paths: StatePaths, report: MigrationReport) -> None:
    """Outcome keys, and each outcome's `scenario_key` and `results` folder, of every sweep record."""
    for path in sorted((paths.root / "sweeps").glob("*.json")) if (paths.root / "sweeps").is_dir() else []:
        data = load_json(path.read_text(), str(path))
        outcomes = data.get("outcomes") or {}
        renamed: dict[str, object] = {}
        changed = False
        for key, outcome in outcomes.items():
            new = renamed_key(key)
            if new is not None and isinstance(outcome, dict):
                changed = True
                if outcome.get("scenario_key") == key:
                    outcome["scenario_key"] = new
                folder = outcome.get("results")
                if isinstance(folder, str) and Path(folder).parent.name == key:
                    outcome["results"] = str(Path(folder).parent.parent / new / Path(folder).name)
            renamed[new or key] = outcome
        if changed:
            data["outcomes"] = renamed
            atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
            report.sweep_records += 1


def _rename_scenario_partitions(session: Session, report: MigrationReport) -> None:
    instance = session.instance
    for key in list(instance.get_dynamic_partitions(SCENARIO_PARTITIONS_NAME)):
        new = renamed_key(key)
        if new is None:
            continue
        instance.add_dynamic_partitions(SCENARIO_PARTITIONS_NAME, [new])
        if _latest_materialization(instance, new) is None:
            latest = _latest_materialization(instance, key)
            if latest is not None:
                instance.report_runless_asset_event(dg.AssetMaterialization(
                    asset_key=EVAL_RUN, partition=new, metadata=_carried_metadata(latest, key, new),
                    description=f"carried over by `{MIGRATE_COMMAND}` from the partition {key}"))
                report.materializations += 1
        instance.delete_dynamic_partition(SCENARIO_PARTITIONS_NAME, key)
        report.scenario_partitions += 1


def _latest_materialization(instance: dg.DagsterInstance, partition: str) -> dg.AssetMaterialization | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=EVAL_RUN, asset_partitions=[partition]), limit=1).records
    return records[0].asset_materialization if records else None


def _carried_metadata(event: dg.AssetMaterialization, old: str, new: str) -> dict[str, dg.MetadataValue]:
    metadata = dict(event.metadata)
    folder = metadata.get("results")
    if folder is not None:
        path = Path(str(folder.value))
        if path.parent.name == old:
            metadata["results"] = dg.MetadataValue.path(str(path.parent.parent / new / path.name))
    metadata[MIGRATED_FROM] = dg.MetadataValue.text(old)
    return metadata
