"""The catalog's Alembic scripts without a database: one head, named by `HEAD_REVISION` (which spares every call
the import of Alembic); the scripts ship inside the package; importing the catalog imports neither SQLAlchemy
nor Alembic. The database side is in tests/integration/test_catalog_schema.py."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path

from churn_assets.evaluation.catalog_schema import HEAD_REVISION, MIGRATIONS_DIR, alembic_config

ROOT = Path(__file__).resolve().parents[1]


def test_head_revision_names_the_one_head_of_the_scripts() -> None:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_heads() == [HEAD_REVISION], "move catalog_schema.HEAD_REVISION to the newest revision"
    assert [s.revision for s in script.walk_revisions()][-1] == "0001"  # the baseline: the table of issue 13


def test_the_scripts_ship_inside_the_package() -> None:
    assert MIGRATIONS_DIR == ROOT / "churn_assets" / "evaluation" / "migrations"
    assert (MIGRATIONS_DIR / "env.py").is_file() and (MIGRATIONS_DIR / "script.py.mako").is_file()
    # setuptools takes the .py files of packages, and other files only through package-data
    for folder in {p.parent for p in MIGRATIONS_DIR.rglob("*.py")}:
        assert (folder / "__init__.py").is_file(), f"{folder} needs an __init__.py to be packaged"
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for path in MIGRATIONS_DIR.rglob("*"):
        if path.is_file() and path.suffix not in (".py", ".pyc"):
            rel = path.relative_to(ROOT / "churn_assets").as_posix()
            assert any(fnmatch.fnmatch(rel, p) for p in patterns["churn_assets"]), f"{rel} is not package data"


def test_importing_the_catalog_imports_neither_sqlalchemy_nor_alembic() -> None:
    code = ("import sys, churn_assets.evaluation.catalog, churn_assets.evaluation.catalog_schema, "
            "churn_assets.evaluation.catalog_removal, churn_assets.evaluation.runner; "
            "print(sorted(m for m in ('sqlalchemy', 'alembic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
