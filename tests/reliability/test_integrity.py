"""Integrity without exceptions (issue 35), against the real services and the real CLI, on the session's 30-day
world (seed 42) with 20 tasks: T' = 2024-01-05, T = 2024-01-24 (days no other test evaluates), naive and
grounding_no_freshness_tiers (policy off: freshness errors to forge).

- Every warehouse table an arm's as-of views read, with one row edited, is refused by the check every evaluation
  runs at its start and end; so is a view whose definition was replaced. A `churnbench run` on an edited
  `fct_price` exits 1 in one line naming the table, with its trace in a file; `verify-results` repeats the check on
  a finished run. With the row put back, the run completes and verifies.
- The forged answer of the probe (one stale task's answer set to gold, its verdict to correct, the summary's counts
  to match): the seal names the files that changed; with the seal forged too by the state folder's owner (who can
  read the key), the plain mode names stale.csv and the catalog row. With those forged too by a forger who can write
  the database but not read the state folder (files, catalog row and Dagster's metadata rewritten consistently,
  issue 46), the keyed seal catches it in plain verification whatever seal the forger writes: a plain SHA-256 seal,
  MACs under another key with this key's id, or a seal under another key ("key changed", one line). Re-sealed by
  the owner, every file agrees with the others, the catalog and the ledger, and the deterministic arm's rule
  (docs/rules.md, "Arm correctness": its answers are gold at its planned vintage) is what names the task,
  in the plain and the independent modes (issue 46: stale answers one short of the exposure); `--replay` names it
  too.
- The warehouse's content record is sealed too (issue 46): a table edited and its recorded hash rewritten to match,
  through the database only, is refused by the check every evaluation runs (the record's seal does not verify); a
  record sealed under another key says "key changed"; an older, unsealed record is refused until `churnbench
  migrate` seals it, which it does only while the warehouse still matches it.
- `churnbench seals rotate` seals results, ledger meaning checks and warehouse records again under a new key: after
  it a results folder verifies under the new key (Dagster's seal, under the retired key, named as such) and says
  "key changed" under the old; a rotation given a `.next` key (one cut short) uses it, which is how the test
  rotates back to the session's key.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from churn_assets.errors import DataIntegrityError
from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.results import STALE_FILE, SUMMARY_FILE, TASKS_FILE, canonical, stale_csv
from churn_assets.evaluation.seals import SEAL_METADATA, plain_seal, seal_folder
from churn_assets.fabric.postgres import connection, schema_name
from churn_assets.fabric.warehouse_content import (
    CONTENT_TABLE,
    TABLE,
    VIEW,
    WarehouseContentError,
    closure,
    hash_relation,
    record_content,
    stored_content,
    verify_content,
)
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.routes import warehouse_views
from churn_assets.orchestration.materialize import Session
from churn_assets.seal_key import KeyChanged, SealKey, seal_key
from churn_assets.state import StatePaths
from churn_assets.world.ledger import load_ledger

from .conftest import Cli


def paths_of(state_dir: Path) -> StatePaths:
    return StatePaths.resolve(state_dir)

pytestmark = pytest.mark.integration

T_PRIME, T = "2024-01-05", "2024-01-24"
FORGED_ARM = "grounding_no_freshness_tiers"


def key_of(world: str, arm: str, policy: str = "tiered") -> str:
    return f"{arm}__{policy}__tp{T_PRIME.replace('-', '')}__t{T.replace('-', '')}__det__default__{world}"


def run(cli: Cli, world: str, arm: str) -> Any:
    # The first run may build the world's warehouse and dbt build (minutes under load, when no earlier test did).
    return cli("run", "--world", world, "--arm", arm, "--t-prime", T_PRIME, "--t", T, timeout=1200)


def verify(*args: str) -> Any:
    """`churnbench verify-results` in this process (what it checks needs no subprocess; each one costs seconds)."""
    from types import SimpleNamespace

    from click.testing import CliRunner

    from churn_assets.cli import main

    got = CliRunner().invoke(main, ["verify-results", *args])
    return SimpleNamespace(returncode=got.exit_code, stdout=got.stdout, stderr=got.stderr)


def one_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if "is gone; recorded" not in x]  # the dead-run reaper's lines
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _edit_one_row(conn: Any, relation: str) -> str:
    """Change one value of one row of `relation` (a column with a non-null value, by its type); the column."""
    schema, table = relation.split(".")
    columns = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (f'"{schema}"."{table}"',)).fetchall()
    change = {"text": "{c} || 'x'", "boolean": "NOT {c}", "date": "{c} + 1"}
    for column, sql_type in columns:
        expression = change.get(sql_type) or ("{c} + 1" if sql_type.split("(")[0] in (
            "integer", "bigint", "numeric", "double precision", "smallint") else None)
        if expression is None:
            continue
        updated = conn.execute(
            f'UPDATE "{schema}"."{table}" SET "{column}" = {expression.format(c=chr(34) + column + chr(34))} '
            f'WHERE ctid = (SELECT ctid FROM "{schema}"."{table}" WHERE "{column}" IS NOT NULL LIMIT 1)').rowcount
        if updated == 1:
            return str(column)
    raise AssertionError(f"no column of {relation} could be edited")


def test_warehouse_reads_are_checked_and_an_edited_table_refused(session: Session, small_world: str, cli: Cli,
                                                                 state_dir: Path) -> None:
    world, views = small_world, warehouse_views(load_registry())
    first = run(cli, world, "naive")
    assert first.returncode == 0, first.stderr[-3000:]
    folder = Path(first.stdout.strip().splitlines()[-1].removeprefix("results: "))
    rows = [json.loads(x) for x in (folder / TASKS_FILE).read_text().splitlines()]
    reads = [r for row in rows for e in row["traces"] for r in e["reads"] if r["store"] == "warehouse"]
    assert reads and all(r["observed_hash"] for r in reads)  # every warehouse read carries its content's hash

    # Every table the arms' views read, one row edited (in a transaction, rolled back), and a view's definition.
    with connection(session.urls.warehouse) as conn:
        found = closure(conn, world, views)
        tables = [r for r in found.relations if found.kinds[r] == TABLE]
        names = {r.split(".")[1] for r in tables}
        assert names == {"fct_price", "fct_consumption", "fct_license_assignment", "fct_license_purchase",
                         "fct_cost_center_membership", "dim_vendor", "dim_product", "dim_cost_center", "dim_user",
                         "dim_date"}, names
        verify_content(conn, world, views)
        for relation in tables:
            column = _edit_one_row(conn, relation)
            with pytest.raises(DataIntegrityError, match=rf"table {relation}: its \d+ rows hash to"):
                verify_content(conn, world, views)
            conn.rollback()
            assert column
        view = next(r for r in found.relations if found.kinds[r] == VIEW)
        definition = conn.execute("SELECT pg_get_viewdef(to_regclass(%s), true)", (view,)).fetchone()[0]
        conn.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM ({definition.rstrip(';')}) AS v WHERE true")
        with pytest.raises(DataIntegrityError, match=rf"view {view}: its definition hashes to"):
            verify_content(conn, world, views)
        conn.rollback()
        verify_content(conn, world, views)

    ok = verify(str(folder))
    assert ok.returncode == 0 and "warehouse reads match the warehouse now" in ok.stdout, ok.stdout + ok.stderr

    # One row of fct_price edited for real: the run (results removed, as in the probe) refuses in one line, and
    # verify-results of the finished run no longer confirms it.
    price = f"{schema_name(world, 'analytics')}.fct_price"
    with connection(session.urls.warehouse) as conn:
        key, old = conn.execute(f"SELECT price_key, list_price_usd FROM {price} LIMIT 1").fetchone()
        conn.execute(f"UPDATE {price} SET list_price_usd = list_price_usd + 1 WHERE price_key = %s", (key,))
        conn.commit()
    try:
        stale = verify(str(folder))
        assert stale.returncode == 1 and "cannot be verified" in stale.stdout and price in stale.stdout
        shutil.rmtree(folder)
        refused = run(cli, world, "naive")
        assert refused.returncode == 1
        line = one_line(refused.stderr)
        assert f"table {price}: its" in line and "the warehouse is not what its dbt build left" in line, line
        assert f"eval_run {key_of(world, 'naive')}" in line and "(trace: " in line
        trace = Path(line.rsplit("(trace: ", 1)[1].rstrip(")"))
        assert trace.is_file() and "Traceback" in trace.read_text() and trace.is_relative_to(state_dir)
        assert not folder.exists() or not (folder / SUMMARY_FILE).exists()  # nothing scored, nothing complete
    finally:
        with connection(session.urls.warehouse) as conn:
            conn.execute(f"UPDATE {price} SET list_price_usd = %s WHERE price_key = %s", (old, key))
            conn.commit()
    again = run(cli, world, "naive")
    assert again.returncode == 0, again.stderr[-3000:]
    assert verify(str(folder)).returncode == 0


def test_a_rewritten_warehouse_record_is_refused_and_an_unsealed_one_migrated(session: Session, small_world: str,
                                                                            cli: Cli, state_dir: Path) -> None:
    from churn_assets.orchestration.state_migration import MigrationReport, _record_warehouse_content

    world, views = small_world, warehouse_views(load_registry())
    done = run(cli, world, "naive")  # the world's dbt build and its sealed record
    assert done.returncode == 0, done.stderr[-3000:]
    analytics = schema_name(world, "analytics")
    price, record = f"{analytics}.fct_price", f'"{analytics}".{CONTENT_TABLE}'
    with connection(session.urls.warehouse) as conn:
        assert stored_content(conn, world) and all(r.key_id == seal_key(state_dir).key_id
                                                   for r in stored_content(conn, world).values())
        # The forger of the probe, through a database connection only: a price edited, its recorded hash remade.
        conn.execute(f"UPDATE {price} SET list_price_usd = list_price_usd + 1 WHERE price_key = "
                     f"(SELECT min(price_key) FROM {price})")
        edited = hash_relation(conn, price, TABLE)
        conn.execute(f"UPDATE {record} SET row_count = %s, content_hash = %s WHERE relation = %s",
                     (edited.rows, edited.content_hash, price))
        with pytest.raises(DataIntegrityError, match=rf"record of {price} in .* does not verify under this state "
                                                     "folder's seal key"):
            verify_content(conn, world, views)
        conn.rollback()
        # A record sealed under another folder's key: "key changed", not a confirmation.
        record_content(conn, world, views, seal_key(state_dir / "another-folder"))
        with pytest.raises(KeyChanged, match="key changed"):
            verify_content(conn, world, views)
        # An older churnbench's record (no seals): refused until migrated; migrated only while it still matches.
        conn.execute(f"ALTER TABLE {record} DROP COLUMN mac, DROP COLUMN key_id")
        conn.commit()
        with pytest.raises(WarehouseContentError, match=r"not sealed .* `churnbench migrate`"):
            verify_content(conn, world, views)
        conn.rollback()
        conn.execute(f"UPDATE {record} SET content_hash = 'f' || substr(content_hash, 2) WHERE relation = %s",
                     (price,))
        conn.commit()
    try:
        edited_report = MigrationReport(state_dir, 4)
        _record_warehouse_content(session, edited_report)
        assert edited_report.warehouses_recorded == 0
        [note] = [n for n in edited_report.notes if world in n]
        assert "left unsealed" in note and f"table {price}" in note
        with connection(session.urls.warehouse) as conn:
            conn.execute(f"UPDATE {record} SET content_hash = %s WHERE relation = %s",
                         (hash_relation(conn, price, TABLE).content_hash, price))
            conn.commit()
        report = MigrationReport(state_dir, 4)
        _record_warehouse_content(session, report)
        assert report.warehouses_recorded >= 1 and not [n for n in report.notes if world in n]
    finally:
        with connection(session.urls.warehouse) as conn:
            record_content(conn, world, views, seal_key(state_dir))
    with connection(session.urls.warehouse) as conn:
        verify_content(conn, world, views)
        conn.rollback()


def test_rotating_the_seal_key_seals_everything_again(small_world: str, cli: Cli, state_dir: Path,
                                                      tmp_path: Path) -> None:
    done = run(cli, small_world, "naive")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = Path(done.stdout.strip().splitlines()[-1].removeprefix("results: "))
    # The rotation works on a copy of the key file (CHURNBENCH_SEAL_KEY_FILE, as a remote worker's copy would be),
    # so the session's `seal-key` stays the old key: what the test rotates back to at the end.
    old_text = (state_dir / "seal-key").read_text()
    copy = tmp_path / "seal-key"
    copy.write_text(old_text)
    copy.chmod(0o600)
    old = SealKey.from_text(old_text)

    rotated = cli("seals", "rotate", CHURNBENCH_SEAL_KEY_FILE=str(copy))
    assert rotated.returncode == 0, rotated.stderr[-3000:]
    new = SealKey.from_text(copy.read_text())
    assert new.key_id != old.key_id and f"seal key rotated: {old.key_id} -> {new.key_id}" in rotated.stdout
    counts = re.search(r"(\d+) results seal\(s\), (\d+) ledger meaning check\(s\), (\d+) warehouse record",
                       rotated.stdout)
    assert counts and all(int(n) >= 1 for n in counts.groups()), rotated.stdout
    assert not (tmp_path / "seal-key.next").exists()  # promoted: the old key is gone from the key file
    try:
        under_old = verify(str(folder))
        assert under_old.returncode == 1 and "key changed" in under_old.stdout + under_old.stderr
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CHURNBENCH_SEAL_KEY_FILE", str(copy))
            under_new = verify(str(folder))
            assert under_new.returncode == 0, under_new.stdout + under_new.stderr
            # Dagster's metadata (append-only) keeps the seal made under the retired key: named, not "key changed"
            assert f"Dagster's seal is under key {old.key_id}, which a rotation retired" in under_new.stdout
            assert load_ledger(paths_of(state_dir).ledger_dir(small_world), key=new).verified
    finally:  # back to the session's key: a rotation cut short resumes with the `.next` key it finds
        (tmp_path / "seal-key.next").write_text(old_text)
        (tmp_path / "seal-key.next").chmod(0o600)
        back = cli("seals", "rotate", CHURNBENCH_SEAL_KEY_FILE=str(copy))
        assert back.returncode == 0 and f"-> {old.key_id}" in back.stdout, back.stdout + back.stderr
    assert verify(str(folder)).returncode == 0


def _forge(folder: Path) -> str:
    """The probe's forgery: one stale answer set to gold, its verdict to correct, the summary's counts to match."""
    rows = [json.loads(x) for x in (folder / TASKS_FILE).read_text().splitlines()]
    victim = next(r for r in rows if r["verdict"] == "freshness_error")
    old = victim["verdict"]
    victim.update(answer=victim["gold_at_t"], answer_text=str(victim["gold_at_t"]), verdict="correct")
    (folder / TASKS_FILE).write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n"
                                             for r in rows))
    summary = json.loads((folder / SUMMARY_FILE).read_text())
    summary["verdicts"][old] -= 1
    summary["verdicts"]["correct"] += 1
    summary["stale_answers"] -= 1
    summary["accuracy"] = round(summary["verdicts"]["correct"] / summary["tasks"], 4)
    if "staleness_awareness" in summary:  # a careful forger recomputes what the rows imply (issue 33's block)
        from churn_assets.evaluation.awareness import staleness_awareness

        summary["staleness_awareness"] = staleness_awareness(rows, summary["experiment"]["t"])
    (folder / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return str(victim["task_id"])


def test_a_forged_answer_against_each_mode_of_verify_results(session: Session, small_world: str, cli: Cli,
                                                             tmp_path: Path, state_dir: Path) -> None:
    done = run(cli, small_world, FORGED_ARM)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = Path(done.stdout.strip().splitlines()[-1].removeprefix("results: "))
    key = key_of(small_world, FORGED_ARM, "off")
    catalog = RunCatalog(session.urls.warehouse)
    [row] = [r for r in catalog.find(key) if Path(r.results_dir) == folder]
    owner_key = seal_key(state_dir)  # the state folder's key: only its owner (and root) can read it
    assert row.seal is not None and set(row.seal[folder.name]["files"]) == {
        "tasks.jsonl", "summary.json", "stale.csv", "identity.json", "timings.json"}
    assert row.seal[folder.name] == seal_folder(folder, owner_key)
    assert owner_key.secret.decode() not in json.dumps(row.seal)  # the database never holds the key
    materialization = session.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("eval_run"), asset_partitions=[key]), limit=1).records[0]
    assert materialization.asset_materialization.metadata[SEAL_METADATA].value == row.seal  # the same seal

    honest = verify("--replay", key)
    assert honest.returncode == 0, honest.stdout + honest.stderr
    assert "seal: 5 files match the catalog row and the Dagster eval_run metadata" in honest.stdout
    assert "replay: every task answered again the same way" in honest.stdout
    assert f"arm correctness: {FORGED_ARM} answers every task equal to gold at its planned vintage" in honest.stdout

    kept = tmp_path / "kept"
    shutil.copytree(folder, kept)
    try:
        victim = _forge(folder)
        [victim_row] = [r for r in map(json.loads, (kept / TASKS_FILE).read_text().splitlines())
                        if r["task_id"] == victim]
        # 1. The seal: the two files that changed are named; the catalog row and stale.csv disagree too.
        sealed = verify(key)
        assert sealed.returncode == 1
        for name in ("tasks.jsonl", "summary.json"):
            assert f"{name} changed since the run sealed it" in sealed.stdout, sealed.stdout
        assert "stale.csv: is not the list tasks.jsonl makes" in sealed.stdout
        assert f"catalog row {row.run_id}: accuracy stored" in sealed.stdout

        # 2. The seal forged too by the state folder's owner, who can read the key (catalog row and Dagster's
        #    metadata): the plain mode still names stale.csv and the catalog's figures, which were not.
        forged_seal = {**row.seal, folder.name: seal_folder(folder, owner_key)}
        _set_catalog(session, row.run_id, seal=json.dumps(forged_seal))
        session.instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key="eval_run", partition=key, metadata={SEAL_METADATA: dg.MetadataValue.json(forged_seal)}))
        plain = verify(key)
        assert plain.returncode == 1 and "changed since the run sealed it" not in plain.stdout, plain.stdout
        assert "stale.csv: is not the list tasks.jsonl makes" in plain.stdout and victim in plain.stdout
        assert f"catalog row {row.run_id}: accuracy stored" in plain.stdout

        # 3. stale.csv and the catalog's figures forged too.
        forged_rows = [json.loads(x) for x in (folder / TASKS_FILE).read_text().splitlines()]
        (folder / STALE_FILE).write_text(stale_csv(forged_rows))
        assert victim not in [r["task_id"] for r in csv.DictReader(io.StringIO((folder / STALE_FILE).read_text()))]
        summary = json.loads((folder / SUMMARY_FILE).read_text())
        figures = {"accuracy": summary["accuracy"], "correct": summary["verdicts"]["correct"],
                   "freshness_error": summary["verdicts"]["freshness_error"], "stale_answers": summary["stale_answers"]}

        # 3a. A forger with a database connection only (shared Postgres: the catalog row and Dagster's event log)
        #     and the files, who cannot read the state folder: every file, the catalog row and Dagster's metadata
        #     rewritten consistently, with the best seal one can make without the key. Plain verification catches
        #     each (exit 1, never "confirmed").
        own_key = SealKey.from_text("a database writer's own key")
        attempts = {
            # the seal of before issue 46: SHA-256 of each file, remade at will
            "plain": ({folder.name: plain_seal(folder)}, "holds a plain SHA-256 seal"),
            # this key's id with MACs under another key
            "wrong MAC": ({folder.name: {**seal_folder(folder, own_key), "key_id": owner_key.key_id}},
                          "tasks.jsonl changed since the run sealed it (its MAC under key"),
            # a keyed seal under another key: one line, "key changed"
            "key changed": ({folder.name: seal_folder(folder, own_key)}, "key changed: sealed under key id "
                            f"{own_key.key_id}, this state folder's key is {owner_key.key_id}"),
        }
        for what, (forged_seal, caught_by) in attempts.items():
            _forge_through_the_database(session, key, row.run_id, {**row.seal, **forged_seal}, figures)
            caught = verify(key)
            assert caught.returncode == 1 and caught_by in caught.stdout, (what, caught.stdout)
            assert "rows confirmed" not in caught.stdout, (what, caught.stdout)
            if what == "key changed":
                [line] = caught.stdout.strip().splitlines()
                assert line.startswith(f"run {row.run_id} {key}: key changed: "), line

        # 3b. The owner re-seals everything with the key (the owner and root can re-seal anything): the files
        #     agree with each other, the catalog and the ledger; the arm's rule names the task (its answer is not
        #     gold at the planned vintage), in the plain and the independent modes, and the replay names it too.
        _forge_through_the_database(session, key, row.run_id, {**row.seal, folder.name: seal_folder(folder, owner_key)},
                                    figures)
        broken = f'task {victim}: template {victim_row["template"]}: breaks docs/rules.md "Arm correctness"'
        plain = verify(key)
        assert plain.returncode == 1 and "1 disagreement(s)" in plain.stdout, plain.stdout
        assert broken in plain.stdout and f"gold_planned {canonical(victim_row['gold_planned'])}" in plain.stdout
        independent = verify("--independent", key)
        assert independent.returncode == 1 and "1 disagreement(s)" in independent.stdout, independent.stdout
        assert broken in independent.stdout
        replayed = verify("--replay", key)
        assert replayed.returncode == 1
        assert f"task {victim}: answer (answered again) stored" in replayed.stdout, replayed.stdout
        assert f"task {victim}: verdict (answered again) stored \"correct\"" in replayed.stdout
    finally:
        shutil.rmtree(folder)
        shutil.copytree(kept, folder)
        _set_catalog(session, row.run_id, seal=json.dumps(row.seal), accuracy=row.accuracy,
                     correct=row.verdicts["correct"], freshness_error=row.verdicts["freshness_error"],
                     stale_answers=row.stale_answers)
        session.instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key="eval_run", partition=key, metadata={SEAL_METADATA: dg.MetadataValue.json(row.seal)}))
    assert verify(key).returncode == 0


def _forge_through_the_database(session: Session, key: str, run_id: int, seal: dict[str, Any],
                                figures: dict[str, Any]) -> None:
    """The catalog row's seal and figures and Dagster's `eval_run` metadata, rewritten through database
    connections alone (Dagster's event log is in the same Postgres)."""
    _set_catalog(session, run_id, seal=json.dumps(seal), **figures)
    session.instance.report_runless_asset_event(dg.AssetMaterialization(
        asset_key="eval_run", partition=key, metadata={SEAL_METADATA: dg.MetadataValue.json(seal)}))


def _set_catalog(session: Session, run_id: int, **values: Any) -> None:
    """Edit a catalog row the way a forger with the database's password would."""
    assignments = ", ".join(f"{k} = %({k})s" + ("::jsonb" if k == "seal" else "") for k in values)
    with connection(session.urls.warehouse) as conn:
        conn.execute(f"UPDATE churnbench.results_runs SET {assignments} WHERE run_id = %(run_id)s",
                     {**values, "run_id": run_id})
        conn.commit()


def test_a_policy_free_arm_refuses_a_policy_in_one_line(small_world: str, cli: Cli, state_dir: Path) -> None:
    scenarios = sorted((state_dir / "scenarios").glob("*.json")) if (state_dir / "scenarios").is_dir() else []
    refused = cli("run", "--world", small_world, "--arm", "naive", "--policy", "off", "--t-prime", T_PRIME, "--t", T)
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert "arm naive serves no refresh policy" in line and "leave --policy out" in line and "trace" not in line
    fixed = cli("run", "--world", small_world, "--arm", FORGED_ARM, "--policy", "ttl:prices=3", "--t-prime", T_PRIME,
                "--t", T)
    assert fixed.returncode == 1 and f"arm {FORGED_ARM} always serves policy off" in one_line(fixed.stderr)
    after = sorted((state_dir / "scenarios").glob("*.json")) if (state_dir / "scenarios").is_dir() else []
    assert after == scenarios  # nothing stored
