"""The dbt project (`dbt_project/`, beside the package) as Dagster sees it: one `DbtProject`, in its own
module so that the manifest is located once.

The manifest (`dbt_project/target/manifest.json`) is built by the install step (`scripts/install.sh`
runs `dbt parse`), not at import: `@dbt_assets` reads it when the code location loads. Under
`dagster dev`, `prepare_if_dev()` re-parses so that model edits show up without reinstalling.
"""

from __future__ import annotations

from pathlib import Path

from dagster_dbt import DbtProject

from churn_assets.errors import UserFacingError

DBT_PROJECT_DIR = Path(__file__).resolve().parent.parent / "dbt_project"

dbt_project = DbtProject(project_dir=DBT_PROJECT_DIR, profiles_dir=DBT_PROJECT_DIR)
dbt_project.prepare_if_dev()


def require_manifest() -> Path:
    """The manifest's path; a clear error naming the fix when the install step has not built it."""
    path = Path(dbt_project.manifest_path)
    if not path.exists():
        raise UserFacingError(
            f"the dbt manifest {path} is missing: run `bash scripts/install.sh` (or "
            f"`cd {DBT_PROJECT_DIR} && ../.venv/bin/dbt parse --profiles-dir .`) before loading the Dagster "
            "code location")
    return path
