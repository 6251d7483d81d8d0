"""Alembic migrations of the results catalog (`churnbench.results_runs`), run by `catalog_schema.ensure_catalog`.

There is no alembic.ini: `catalog_schema.alembic_config()` points Alembic at this folder, and `env.py` migrates the
connection it is handed. Alembic's version table is `churnbench.churnbench_alembic_version` (Dagster's storage
owns `alembic_version`).

To change the catalog: change `catalog_schema.runs_table()`, write the next revision beside
`versions/0001_results_runs.py` (`alembic.command.revision(alembic_config(), message="...", rev_id="0002")` starts
one from `script.py.mako`), with its own frozen copy of what it adds (never import the live model), and move
`catalog_schema.HEAD_REVISION`.
`tests/test_catalog_migrations.py` and `tests/integration/test_catalog_schema.py` fail until the model, the scripts
and `HEAD_REVISION` agree.
"""
