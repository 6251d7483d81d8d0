"""Arms: architectures that answer tasks (docs/arms.md).

An arm declares the vintage map it will serve before answering (`Arm.planned_vintage`), answers one task
at a time through an agent, and returns the answer with its retrieval traces, cost units and timings.
Arms read stores only through the read-only role, the operational store, the SaaS API, documents and
indexes: they never import the fold, the ledger or gold (tests/test_layering.py enforces it).
"""
