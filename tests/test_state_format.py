"""The state folder's format gate (issue 20): a folder made before formats were recorded that holds data is
refused in one line naming `churnbench migrate`, before any service starts; new and empty folders pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from churn_assets.cli import main
from churn_assets.orchestration.resources import StateResource
from churn_assets.state import (
    STATE_DIR_ENV,
    STATE_FORMAT,
    StateFormatError,
    StatePaths,
    require_current_format,
    stored_state_format,
)


def _old_folder(root: Path, *, data: bool = True) -> StatePaths:
    """What a churnbench of before issue 20 leaves: an id (its services started there), no format file."""
    paths = StatePaths.resolve(root)
    paths.root.mkdir(parents=True)
    paths.state_id_file.write_text("0123456789abcdef\n")
    if data:
        (paths.worlds_dir / "default-s42-3f9a1c").mkdir(parents=True)
    return paths


def test_a_new_folder_is_of_todays_format(tmp_path: Path) -> None:
    paths = StatePaths.resolve(tmp_path / "new").ensure()
    assert paths.state_format_file.read_text() == f"{STATE_FORMAT}\n"
    require_current_format(paths)
    # A folder whose services never started holds nothing an older churnbench wrote (unit tests build these).
    bare = StatePaths.resolve(tmp_path / "bare")
    (bare.worlds_dir / "default-s42-3f9a1c").mkdir(parents=True)
    assert stored_state_format(bare) == STATE_FORMAT
    require_current_format(bare)


def test_an_old_folder_with_data_is_refused_naming_the_migration(tmp_path: Path) -> None:
    paths = _old_folder(tmp_path / "old")
    assert stored_state_format(paths) == 1
    with pytest.raises(StateFormatError) as err:
        require_current_format(paths)
    message = str(err.value)
    assert "\n" not in message and "run `churnbench migrate` first" in message and str(paths.root) in message
    with pytest.raises(StateFormatError, match="churnbench migrate"):
        StateResource(state_dir=str(paths.root)).paths  # noqa: B018 - a run launched from the UI is refused too
    paths.ensure()  # starting services does not make an old folder look migrated
    assert stored_state_format(paths) == 1


def test_an_old_folder_without_data_is_stamped(tmp_path: Path) -> None:
    paths = _old_folder(tmp_path / "empty", data=False)
    require_current_format(paths)
    assert stored_state_format(paths) == STATE_FORMAT


def test_a_newer_folder_is_refused(tmp_path: Path) -> None:
    paths = StatePaths.resolve(tmp_path / "newer").ensure()
    paths.state_format_file.write_text(f"{STATE_FORMAT + 1}\n")
    with pytest.raises(StateFormatError, match="newer than this churnbench"):
        require_current_format(paths)


@pytest.mark.parametrize("command", [["worlds", "list"], ["results", "list"], ["run", "--world", "w", "--arm",
                                     "naive", "--t-prime", "2024-01-02", "--t", "2024-01-03"], ["ui"]])
def test_commands_refuse_an_old_folder_in_one_line_before_starting_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    paths = _old_folder(tmp_path / "old")
    monkeypatch.setenv(STATE_DIR_ENV, str(paths.root))
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and "run `churnbench migrate` first" in result.output
    assert not paths.services_dir.exists()  # refused before any service started
