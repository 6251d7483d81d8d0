"""The fabric: projections of a world's ledger into the stores arms read (docs/architecture.md, "Module map").

Warehouse (issue 5): `postgres` (per-world schema names, transactional COPY loads), `truth` (the ledger in
`<world>_truth`), `warehouse_raw` (the raw projection with validity intervals), `roles` (the read-only arm
role), `quality` (Great Expectations on the raw layer, parity of the as-of views with the fold). The dbt
star schema built on the raw layer lives in `dbt_project/` beside the package.
"""
