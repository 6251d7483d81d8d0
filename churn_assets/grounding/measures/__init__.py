"""The grounding layer's semantic model: the registry's measures, one implementation each.

A measure is a named function with typed arguments (ids, days, windows, thresholds, words: the question
placeholders of the same name), declared in `registry.yaml` under `measures:` with the classes it reads, and
computed here only from the rows the arm's router returns (`context.Served`). The deterministic agent answers
every question with one call of its template's measure; the LLM agent may call the same measures as tools. No
module here imports gold, the fold or evaluation (tests/test_measures.py checks it).
"""

from churn_assets.grounding.measures import contracts, counts, spend  # noqa: F401  (registers the measures)
from churn_assets.grounding.measures.model import (
    MeasureArgumentError,
    MeasureCall,
    MeasureResult,
    SemanticModel,
)

__all__ = ["MeasureArgumentError", "MeasureCall", "MeasureResult", "SemanticModel"]
