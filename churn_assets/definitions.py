"""The Dagster code location (`workspace.yaml` points here): assets, checks and resources."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import dagster as dg

from churn_assets.assets import ALL_ASSETS
from churn_assets.assets.dbt import analytics_dbt
from churn_assets.assets.documents import contract_documents, contract_documents_parity
from churn_assets.assets.evaluation import eval_run
from churn_assets.assets.index import rag_index, vector_index
from churn_assets.assets.warehouse import warehouse_raw, warehouse_truth
from churn_assets.assets.warehouse_checks import WAREHOUSE_CHECKS
from churn_assets.checks import ALL_CHECKS
from churn_assets.resources import StateResource


def build_defs(state_dir: str | Path | None = None) -> dg.Definitions:
    """Definitions bound to a state folder (None: resolved from the environment when a run starts)."""
    return dg.Definitions(
        assets=[*ALL_ASSETS, contract_documents, warehouse_truth, warehouse_raw, analytics_dbt, vector_index,
                rag_index, eval_run],
        asset_checks=[*ALL_CHECKS, contract_documents_parity, *WAREHOUSE_CHECKS],
        resources={"state": StateResource(state_dir=str(state_dir or ""))},
    )


@cache
def defs_for(state_dir: str) -> dg.Definitions:
    """One Definitions (and so one resolved job) per state folder per process: in-process runs reuse it."""
    return build_defs(state_dir)


defs = build_defs()
