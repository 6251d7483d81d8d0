"""The independent path: gold by SQL over the truth schema, sharing no code with the fold or `tasks/gold.py`.

Used by `churnbench verify-results --independent`, `bench/differential_gold.py` and the store-parity asset
checks. Importable without Dagster (evaluation layer).
"""

from churn_assets.evaluation.independent.gold import SqlGold, SqlGoldError, served_days, sql_gold

__all__ = ["SqlGold", "SqlGoldError", "served_days", "sql_gold"]
