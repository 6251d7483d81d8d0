"""The dbt project (`dbt_project/`, beside the package) as Dagster sees it: one `DbtProject`, in its own
module so that the manifest is located once.

The manifest (`dbt_project/target/manifest.json`) is built by the install step (`scripts/install.sh`
runs `dbt parse`), not at import: `@dbt_assets` reads it when the code location loads. Under
`dagster dev`, the code server re-parses so that model edits show up without reinstalling.

`dbt_executable()` is the one place that says which `dbt` runs: the venv's, found beside the interpreter,
so that nothing depends on the venv being on PATH (`churnbench ui` run as `.venv/bin/churnbench ui`).
"""

from __future__ import annotations

import shutil
import sys
from functools import cache
from pathlib import Path

import dagster as dg
from dagster_dbt import DbtCliResource, DbtProject
from dagster_dbt.dbt_project import DagsterDbtProjectPreparer

from churn_assets.errors import UserFacingError
from churn_assets.files import temporary_name
from churn_assets.unique_keys import load_json

DBT_PROJECT_DIR = Path(__file__).resolve().parents[2] / "dbt_project"
# Every model is the asset `analytics/<model>` (group `analytics`), one partition per world.
ANALYTICS_KEY_PREFIX = "analytics"
ANALYTICS_GROUP = "analytics"
PARTIAL_PARSE_FILE = "partial_parse.msgpack"  # dbt's cache of the last parse, in the target folder


def analytics_key(model: str) -> dg.AssetKey:
    return dg.AssetKey([ANALYTICS_KEY_PREFIX, model])


def dbt_executable() -> str:
    """The `dbt` installed beside this interpreter (`.venv/bin/dbt`), else whatever `dbt` is on PATH."""
    # The venv's bin (sys.prefix) first: a code server may run with the venv's python resolved to the base
    # interpreter, whose folder has no dbt.
    for candidate in (Path(sys.prefix) / "bin" / "dbt", Path(sys.executable).parent / "dbt"):
        if candidate.exists():
            return str(candidate)
    return shutil.which("dbt") or "dbt"


class VenvDbtPreparer(DagsterDbtProjectPreparer):
    """dagster-dbt's dev-time preparer (`dbt deps`, `dbt parse` under `dagster dev`), running our `dbt`:
    the stock one builds a `DbtCliResource` with the default executable `dbt`, which fails to load the
    code location when the venv is not on PATH (found by a fresh-clone CI run of the UI test)."""

    def _prepare_packages(self, project: DbtProject) -> None:
        DbtCliResource(project_dir=project, dbt_executable=dbt_executable()).cli(
            ["deps", "--quiet"], target_path=project.target_path).wait()

    def _prepare_manifest(self, project: DbtProject) -> None:
        """`dbt parse` into a folder of its own, then each file it wrote renamed into `target/`: dbt writes
        `manifest.json` in place, and a process reading it meanwhile (a command, a run worker, another test
        worker) read half a file (CI: `JSONDecodeError` at char 138,250 while `churnbench ui` started beside it).
        A rename is atomic: a reader sees the old manifest or the new one. The partial-parse file is copied in
        first, so the parse stays partial (a few seconds)."""
        target = Path(project.project_dir) / project.target_path
        scratch = temporary_name(target / "parse")
        scratch.mkdir(parents=True)
        try:
            partial = target / PARTIAL_PARSE_FILE
            if partial.exists():
                shutil.copy2(partial, scratch / PARTIAL_PARSE_FILE)
            DbtCliResource(project_dir=project, dbt_executable=dbt_executable()).cli(
                self._prepare_project_cli_args, target_path=scratch).wait()
            for written in scratch.iterdir():
                if written.is_file():
                    written.replace(target / written.name)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self._invalidate_seeds_in_partial_parse(project)


dbt_project = DbtProject(project_dir=DBT_PROJECT_DIR, profiles_dir=DBT_PROJECT_DIR)
VenvDbtPreparer().prepare_if_dev(dbt_project)


def require_manifest() -> Path:
    """The manifest's path; a clear error naming the fix when the install step has not built it."""
    path = Path(dbt_project.manifest_path)
    if not path.exists():
        raise UserFacingError(
            f"the dbt manifest {path} is missing: run `bash scripts/install.sh` (or "
            f"`cd {DBT_PROJECT_DIR} && ../.venv/bin/dbt parse --profiles-dir .`) before loading the Dagster "
            "code location")
    return path


@cache
def dbt_model_names() -> tuple[str, ...]:
    """The models of the dbt project, from the manifest (what a world's dbt build makes), sorted."""
    manifest = load_json(require_manifest().read_text(), str(require_manifest()))
    return tuple(sorted(n["name"] for n in manifest["nodes"].values() if n.get("resource_type") == "model"))


def dbt_asset_keys() -> tuple[str, ...]:
    """The asset keys (user strings, `analytics/<model>`) of every model, sorted."""
    return tuple(analytics_key(name).to_user_string() for name in dbt_model_names())
