"""Sealed results and the checks `verify-results` runs beside gold (issue 35, item 2), at the results-file seam:
a run written by the real runner (`test_verify_results.py`'s scripted arm, a 30-day world), its seal, `stale.csv`
and the catalog's figures recomputed from `tasks.jsonl`, warehouse reads against the warehouse now, `--replay`
with an arm answering again, and a run whose store changed before it finished (its checkpoint dropped). The real
CLI against the real services: tests/reliability/test_integrity.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from scripted_answer import ScriptedAnswer
from test_verify_arm_rules import forge_stale_answer
from test_verify_results import T_PRIME, PlannedArm, T, written_run

from churn_assets.errors import DataIntegrityError
from churn_assets.evaluation.consistency import (
    catalog_disagreements,
    figures_of,
    seal_disagreements,
    stale_file_disagreements,
    warehouse_disagreements,
)
from churn_assets.evaluation.replay import replay_rows
from churn_assets.evaluation.results import PARTIAL_FILE, ResultsStore, stale_csv
from churn_assets.evaluation.runner import RunSpec, evaluate
from churn_assets.evaluation.seals import SEALED_FILES, broken_seal, plain_seal, seal_folder
from churn_assets.evaluation.signatures import check_signature, generate_keypair, sign_folder
from churn_assets.evaluation.verify import load_run
from churn_assets.freshness.scenario import Scenario
from churn_assets.seal_key import KeyChanged, seal_key
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task, task_set_hash

Run = tuple[GoldResolver, list[Task], Path]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return written_run(tmp_path_factory.mktemp("results"))


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / run_dir.name
    shutil.copytree(run_dir, out)
    return out


def test_a_seal_names_every_file_that_changed_appeared_or_went_missing(run: Run, tmp_path: Path) -> None:
    _, _, run_dir = run
    folder = _copy(run_dir, tmp_path)
    key = seal_key(tmp_path / "state")
    seal = seal_folder(folder, key)
    assert set(seal["files"]) == set(SEALED_FILES) and broken_seal(folder, seal, key) == []
    (folder / "tasks.jsonl").write_text((folder / "tasks.jsonl").read_text().replace('"correct"', '"CORRECT"', 1))
    (folder / "timings.json").unlink()
    assert [p.split(" ")[0] for p in broken_seal(folder, seal, key)] == ["tasks.jsonl", "timings.json"]
    assert "changed since the run sealed it" in broken_seal(folder, seal, key)[0]
    assert "is missing" in broken_seal(folder, seal, key)[1]
    assert broken_seal(folder, {})[0].endswith("was not in the folder when it was sealed")
    found = [str(d) for d in seal_disagreements(folder, {"catalog row": seal, "Dagster eval_run metadata": seal},
                                                key)]
    assert found[0].startswith("files (against the catalog row's seal): tasks.jsonl changed since the run sealed it")
    assert len(found) == 4 and found[2].startswith("files (against the Dagster eval_run metadata's seal)")


def test_two_state_folders_get_different_keys_and_a_foreign_seal_fails(run: Run, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, run_dir = run
    monkeypatch.delenv("CHURNBENCH_SEAL_KEY_FILE", raising=False)  # each folder's own key file
    mine, theirs = seal_key(tmp_path / "a"), seal_key(tmp_path / "b")
    assert mine.key_id != theirs.key_id and mine.secret != theirs.secret
    assert seal_key(tmp_path / "a") == mine  # made once, read back after
    assert (tmp_path / "a" / "seal-key").stat().st_mode & 0o777 == 0o600
    assert mine.key_id in repr(mine) and mine.secret.decode() not in repr(mine)
    with pytest.raises(KeyChanged, match="^key changed: sealed under key id " + theirs.key_id):
        broken_seal(run_dir, seal_folder(run_dir, theirs), mine)
    # a forger who knows the format but not the key: a seal claiming this key's id with MACs under another
    forged = {**seal_folder(run_dir, theirs), "key_id": mine.key_id}
    assert len(broken_seal(run_dir, forged, mine)) == len(forged["files"])
    # nor does a seal hold for another folder name (moved to another run's row)
    assert broken_seal(run_dir, seal_folder(run_dir, mine, "other__name"), mine) != []


def test_a_database_only_forger_cannot_remake_a_keyed_seal(run: Run, tmp_path: Path) -> None:
    """What one can write through a database connection alone: the forged files and their plain SHA-256, or the
    keyed seal of before, neither of which holds under the key for the forged files."""
    _, _, run_dir = run
    folder = _copy(run_dir, tmp_path)
    key = seal_key(tmp_path / "state")
    honest = seal_folder(folder, key)
    forge_stale_answer(folder, careful=False)
    assert broken_seal(folder, honest, key) != []
    assert not broken_seal(folder, plain_seal(folder))  # a plain seal is remade at will: it proves nothing


def test_a_signature_checks_with_the_public_key_alone(run: Run, tmp_path: Path) -> None:
    _, _, run_dir = run
    folder = _copy(run_dir, tmp_path)
    private = tmp_path / "keys" / "publisher"
    public = generate_keypair(private)
    assert private.stat().st_mode & 0o777 == 0o600
    sign_folder(folder, private)
    assert check_signature(folder, public) == ([], len(SEALED_FILES))
    other = generate_keypair(tmp_path / "keys" / "someone-else")
    [wrong_key] = check_signature(folder, other)[0]
    assert "not by the key given" in wrong_key
    forge_stale_answer(folder, careful=False)
    problems, _ = check_signature(folder, public)
    assert [p.split(" ")[0] for p in problems] == ["summary.json", "tasks.jsonl"]
    record = json.loads((folder / "signature.json").read_text())
    record["files"] = plain_seal(folder)  # the forger re-lists the files: the signature no longer holds
    (folder / "signature.json").write_text(json.dumps(record))
    [broken] = check_signature(folder, public)[0]
    assert "does not hold" in broken
    # a key given twice (the signed list, then the forger's): refused, never the last one taken
    text = (folder / "signature.json").read_text()
    (folder / "signature.json").write_text(text.replace('"files":', '"files": {}, "files":', 1))
    assert check_signature(folder, public)[0] == ["signature.json: not a signature record (DuplicateKeyError)"]


def test_the_cli_signs_and_checks_a_folder_with_the_public_key_alone(run: Run, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`seals keygen`, `seals sign`, `verify-results FOLDER --public-key`: the reader's check needs no state folder
    (one that does not exist) and no services."""
    from click.testing import CliRunner

    from churn_assets.cli import main

    _, _, run_dir = run
    folder = _copy(run_dir, tmp_path)
    monkeypatch.setenv("CHURNBENCH_STATE_DIR", str(tmp_path / "no-state-here"))
    cli = CliRunner()
    made = cli.invoke(main, ["seals", "keygen", str(tmp_path / "pub" / "signing.pem")])
    assert made.exit_code == 0 and "0600" in made.output, made.output
    signed = cli.invoke(main, ["seals", "sign", str(folder), "--key", str(tmp_path / "pub" / "signing.pem")])
    assert signed.exit_code == 0, signed.output
    public = str(tmp_path / "pub" / "signing.pem.pub")
    checked = cli.invoke(main, ["verify-results", str(folder), "--public-key", public])
    assert checked.exit_code == 0 and f"signature confirmed: {len(SEALED_FILES)} files" in checked.output
    assert not (tmp_path / "no-state-here").exists()
    forge_stale_answer(folder, careful=False)
    refused = cli.invoke(main, ["verify-results", str(folder), "--public-key", public])
    assert refused.exit_code == 1 and "signature not confirmed" in refused.output
    assert "tasks.jsonl changed since it was signed" in refused.output


def test_the_process_key_is_the_state_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`seal_key.current_key` resolves the state folder by `StatePaths.resolve`'s rule (it ranks below it)."""
    from churn_assets.seal_key import SEAL_KEY_FILE_ENV, current_key, seal_key_file
    from churn_assets.state import StatePaths

    monkeypatch.delenv(SEAL_KEY_FILE_ENV, raising=False)
    monkeypatch.setenv("CHURNBENCH_STATE_DIR", str(tmp_path / "s"))
    assert current_key() == seal_key(StatePaths.resolve().root)
    monkeypatch.delenv("CHURNBENCH_STATE_DIR")
    monkeypatch.chdir(tmp_path)
    assert seal_key_file(StatePaths.resolve().root) == tmp_path / ".churnbench" / "seal-key"
    assert current_key() == seal_key(tmp_path / ".churnbench")


def test_migration_keys_the_plain_seals_that_hold_and_names_the_others(run: Run, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """State format 3 -> 4: a plain seal whose files still match is re-sealed under the key, once; one whose files
    changed, or whose folder is gone, is kept and reported (a forgery must not gain a MAC)."""
    from churn_assets.orchestration import state_migration
    from churn_assets.seal_key import SEAL_KEY_FILE_ENV

    _, _, run_dir = run
    monkeypatch.delenv(SEAL_KEY_FILE_ENV, raising=False)
    good, bad = _copy(run_dir, tmp_path / "good"), _copy(run_dir, tmp_path / "bad")
    rows = {1: SimpleNamespace(run_id=1, results_dir=str(good), seal={good.name: plain_seal(good)}),
            2: SimpleNamespace(run_id=2, results_dir=str(bad), seal={bad.name: plain_seal(bad), "gone": {"x": "0"}})}
    forge_stale_answer(bad, careful=False)
    written: dict[int, dict[str, Any]] = {}

    class Catalog:
        def __init__(self, url: str) -> None:
            pass

        def runs(self) -> list[Any]:
            return list(rows.values())

        def set_seal(self, run_id: int, seal: dict[str, Any]) -> None:
            written[run_id] = seal
            rows[run_id].seal = seal

    monkeypatch.setattr(state_migration, "RunCatalog", Catalog)
    state = tmp_path / "state"
    session: Any = SimpleNamespace(urls=SimpleNamespace(warehouse="postgresql://unused"),
                                   paths=SimpleNamespace(root=state))
    report = state_migration.MigrationReport(state, 3)
    state_migration._key_plain_seals(session, report)
    key = seal_key(state)
    assert report.seals_keyed == 1 and list(written) == [1]
    assert written[1] == {good.name: seal_folder(good, key)} and broken_seal(good, written[1][good.name], key) == []
    assert [n.split(":")[0] for n in report.notes] == ["catalog row 2", "catalog row 2"]
    assert any("changed since the run sealed it" in n for n in report.notes)
    assert any("the folder is missing" in n for n in report.notes)
    again = state_migration.MigrationReport(state, 3)
    state_migration._key_plain_seals(session, again)  # once: a keyed seal is never touched again
    assert again.seals_keyed == 0 and list(written) == [1]


def test_stale_csv_and_the_catalog_figures_are_recomputed_from_the_tasks(run: Run, tmp_path: Path) -> None:
    _, _, run_dir = run
    stored = load_run(run_dir)
    assert stale_file_disagreements(run_dir, stored.rows) == []
    summary = stored.summary
    figures = figures_of(stored.rows)
    row = SimpleNamespace(run_id=7, tasks=summary["tasks"], accuracy=summary["accuracy"],
                          verdicts=dict(summary["verdicts"]), stale_answers=summary["stale_answers"],
                          exposure=summary["exposure"], mean_cost_units=summary["mean_cost_units"])
    assert figures["exposure"] == summary["exposure"] and catalog_disagreements(row, stored.rows) == []

    folder = _copy(run_dir, tmp_path)
    victim, _ = forge_stale_answer(folder, careful=False)
    forged = load_run(folder).rows
    [stale] = stale_file_disagreements(folder, forged)
    assert str(stale).startswith("stale.csv: is not the list tasks.jsonl makes") and victim in str(stale)
    found = {d.field for d in catalog_disagreements(row, forged)}
    assert found == {"accuracy", "verdicts.correct", "verdicts.freshness_error", "stale_answers"}
    (folder / "stale.csv").write_text(stale_csv([dict(r) for r in forged]))
    assert stale_file_disagreements(folder, forged) == []


def test_warehouse_reads_are_compared_with_the_warehouse_now() -> None:
    def row(task: str, hash_: str) -> dict[str, Any]:
        return {"task_id": task, "traces": [{"reads": [
            {"store": "warehouse", "table": "w_analytics.prices_history_as_of", "observed_hash": hash_},
            {"store": "staging", "table": "w_staging.x", "observed_hash": "s"}]}]}

    now = {"prices_history_as_of": "h1"}
    assert warehouse_disagreements([row("q1", "h1")], now) == []
    [d] = warehouse_disagreements([row("q1", "h1"), row("q2", "h0")], now)
    assert d.task_id == "q2" and "observed content h0, the warehouse holds h1 now" in str(d)
    [unhashed] = warehouse_disagreements([row("q3", "")], now)
    assert "observed content unhashed" in str(unhashed)


class ReplayArm(PlannedArm):
    """The scripted arm, answering again; `fail` raises the integrity error a changed store gives."""

    fail: str | None = None

    def answer(self, task: Task) -> ScriptedAnswer:
        if task.task_id == self.fail:
            raise DataIntegrityError("staged partition s.t @ 2024-01-10: its rows hash to a, written with b")
        return super().answer(task)


def test_replay_answers_again_and_names_the_forged_task(run: Run, tmp_path: Path) -> None:
    resolver, tasks, run_dir = run
    stored = load_run(run_dir)
    # the task `written_run` left without an answer (out of its read budget) is answered again the same way
    arm = ReplayArm(resolver, _planned(stored.rows[0]), out_of_budget=tasks[2].task_id)
    assert replay_rows(arm, tasks, stored.rows, resolver) == []
    folder = _copy(run_dir, tmp_path)
    victim, _ = forge_stale_answer(folder, careful=False)
    found = replay_rows(arm, tasks, load_run(folder).rows, resolver)
    assert {d.task_id for d in found} == {victim}
    assert {d.field for d in found} == {"answer (answered again)", "verdict (answered again)"}
    arm.fail = tasks[0].task_id
    [refused] = replay_rows(arm, tasks, stored.rows, resolver)
    assert refused.task_id == tasks[0].task_id and "cannot be answered again: staged partition" in str(refused)


def _planned(row: dict[str, Any]) -> dict[str, Any]:
    import datetime as dt

    return {c: dt.date.fromisoformat(d) for c, d in row["planned_vintage"].items()}


def test_a_store_changed_before_the_run_finished_fails_it_and_drops_its_checkpoint(run: Run, tmp_path: Path) -> None:
    resolver, tasks, run_dir = run
    stored = load_run(run_dir)
    arm = PlannedArm(resolver, _planned(stored.rows[0]))
    spec = RunSpec(Scenario("default-s42-2906f8", PlannedArm.name, "off", T_PRIME, T), "cafe", task_set_hash(tasks))
    store = ResultsStore(tmp_path)

    class Check:
        """A content check that finds the store changed after `after` answers (None: never)."""

        def __init__(self, after: int | None) -> None:
            self.after, self.polled = after, 0

        def poll(self) -> None:
            self.polled += 1
            if self.after is not None and self.polled > self.after:
                raise DataIntegrityError("world w: the warehouse was rebuilt while the arm answered")

        def finish(self) -> None:
            self.poll()

    for after in (3, len(tasks)):  # found while answering; found by the last check
        with pytest.raises(DataIntegrityError, match="rebuilt while the arm answered"):
            evaluate(arm, tasks, resolver, store, spec, code="git-recheck", content_check=Check(after))
        folder = store.run_dir(spec.key("git-recheck"))
        assert not (folder / "summary.json").exists() and not (folder / PARTIAL_FILE).exists()
    summary = evaluate(arm, tasks, resolver, store, spec, code="git-recheck", content_check=Check(None))
    assert summary["tasks"] == len(tasks)
    assert json.loads((folder / "timings.json").read_text())["resumed_tasks"] == 0  # every task answered again


def test_a_rotation_retires_the_old_key_by_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from churn_assets.seal_key import SEAL_KEY_FILE_ENV, next_key, promote_next_key, retired_key_ids

    monkeypatch.delenv(SEAL_KEY_FILE_ENV, raising=False)
    state = tmp_path / "state"
    old = seal_key(state)
    new = next_key(state, create=True)
    assert new is not None and next_key(state, create=True) == new  # a rotation cut short finds its next key
    promote_next_key(state)
    assert seal_key(state) == new and next_key(state, create=False) is None
    assert retired_key_ids(state) == {old.key_id}
    assert old.secret.decode() not in (state / "seal-key.retired").read_text()  # ids only, never a key
