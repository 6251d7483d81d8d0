"""Dagster asset modules: thin wrappers that call the core, pass resources and attach metadata."""

from churn_assets.assets.ledger import ledger
from churn_assets.assets.operational import operational_store
from churn_assets.assets.tasks import task_set

ALL_ASSETS = [ledger, task_set, operational_store]

__all__ = ["ALL_ASSETS", "ledger", "operational_store", "task_set"]
