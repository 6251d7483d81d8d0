"""Dagster asset modules: thin wrappers that call the core, pass resources and attach metadata.

Each module holds its assets and their checks; `orchestration/definitions.py` collects both from every module
of this package (nothing is listed by hand, so nothing can be registered twice or forgotten).
"""
