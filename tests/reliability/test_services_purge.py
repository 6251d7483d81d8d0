"""`churnbench services purge` and `churnbench services gc` (issue 22, item 6) against real embedded services.

The clusters go under a Postgres root of this test's own (`CHURNBENCH_PG_ROOT`, world-traversable as the embedded
server needs when run as root), so `gc` sees only what the test made and never another checkout's clusters."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from churn_assets.services import purge_embedded_data, services_status
from churn_assets.state import PG_ROOT_ENV, StatePaths

pytestmark = pytest.mark.integration


@pytest.fixture
def pg_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path("/var/tmp") / f"churnbench-test-pgroot-{uuid.uuid4().hex[:8]}"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    monkeypatch.setenv(PG_ROOT_ENV, str(root))
    try:
        yield root
    finally:
        for cluster in root.glob("churnbench-pg-*"):  # whatever a failed test left: stop it first
            from churn_assets.services import POSTGRES

            POSTGRES.stop_cluster(cluster / "data")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def services_cli(churnbench_exe: str, cli_env: Callable[..., dict[str, str]], pg_root: Path
                 ) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(state: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        env = cli_env(state, **{PG_ROOT_ENV: str(pg_root)})
        return subprocess.run([churnbench_exe, "services", *args], env=env, input=stdin, capture_output=True,
                              text=True, timeout=180)
    return run


def _pids(paths: StatePaths) -> list[int]:
    return [s.pid for s in services_status(paths, check_health=False) if s.pid]


def test_purge_asks_then_removes_the_state_folder_its_cluster_and_its_processes(
        services_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path, pg_root: Path) -> None:
    paths = StatePaths.resolve(tmp_path / "state")
    try:
        assert services_cli(paths.root, "up").returncode == 0
        assert paths.pg_home.parent == pg_root and paths.pg_home.is_dir()
        pids = _pids(paths)
        assert len(pids) == 3
        declined = services_cli(paths.root, "purge", stdin="n\n")
        assert declined.returncode == 1 and "aborted" in declined.stderr.lower()
        assert paths.root.is_dir() and paths.pg_home.is_dir()
        assert all(psutil.pid_exists(p) for p in pids)
        purged = services_cli(paths.root, "purge", "--yes")
        assert purged.returncode == 0, purged.stderr
        assert "embedded Postgres cluster" in purged.stdout and str(paths.pg_home) in purged.stdout
        assert not paths.root.exists() and not paths.pg_home.exists()
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
        again = services_cli(paths.root, "purge", "--yes")
        assert again.returncode == 0 and "nothing to purge" in again.stdout
    finally:
        purge_embedded_data(paths)


def test_purge_refuses_a_folder_that_is_not_a_state_folder(
        services_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine\n")
    refused = services_cli(home, "purge", "--yes")
    assert refused.returncode == 1
    assert refused.stderr.strip() == f"churnbench: error: {home} is not a churnbench state folder (no .state-id): " \
                                     "nothing removed"
    assert (home / "notes.txt").read_text() == "mine\n"


def test_gc_lists_the_cluster_of_a_deleted_state_folder_and_removes_it_with_yes(
        services_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    gone, kept = StatePaths.resolve(tmp_path / "gone"), StatePaths.resolve(tmp_path / "kept")
    try:
        for paths in (gone, kept):
            assert services_cli(paths.root, "up").returncode == 0
        orphan_pids = _pids(gone)
        shutil.rmtree(gone.root)  # deleted by hand, services still running
        listed = services_cli(kept.root, "gc")
        assert listed.returncode == 0, listed.stderr
        [orphan] = [ln for ln in listed.stdout.splitlines() if ln.startswith("orphan")]
        assert str(gone.pg_home) in orphan and f"its state folder {gone.root} is gone" in orphan and " MB " in orphan
        assert any(ln.startswith("kept") and str(kept.pg_home) in ln for ln in listed.stdout.splitlines())
        assert "1 orphaned cluster(s)" in listed.stdout and "--yes" in listed.stdout
        assert gone.pg_home.is_dir()  # a dry run removes nothing
        removed = services_cli(kept.root, "gc", "--yes")
        assert removed.returncode == 0, removed.stderr
        assert not gone.pg_home.exists() and kept.pg_home.is_dir()
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                       for p in orphan_pids)
        assert all(s.state == "running" for s in services_status(kept, check_health=True))
        assert "no orphaned clusters" in services_cli(kept.root, "gc").stdout
    finally:
        purge_embedded_data(kept)
        purge_embedded_data(gone)
