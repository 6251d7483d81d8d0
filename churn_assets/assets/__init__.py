"""Dagster asset modules: thin wrappers that call the core, pass resources and attach metadata."""

from churn_assets.assets.ledger import ledger
from churn_assets.assets.operational import operational_store
from churn_assets.assets.staging import STAGED_ASSETS, STAGED_CHECKS
from churn_assets.assets.tasks import task_set

# Staged caches (issue 9) with their checks: Definitions takes asset checks in `assets` too.
ALL_ASSETS = [ledger, task_set, operational_store, *STAGED_ASSETS, *STAGED_CHECKS]

__all__ = ["ALL_ASSETS", "ledger", "operational_store", "task_set"]
