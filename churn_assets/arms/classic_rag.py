"""The `classic_rag` arm: one vector store of everything, built at T'.

Per question, one top-K similarity search by the question's embedding over the whole RAG corpus
(`rag_index` built at T', `grounding/rag_corpus.py`): no record-kind filter, no routing, no live source. The
deterministic agent answers from the K fact records returned by the extraction rule (`arms/extraction.py`,
the same rule as `grounding_no_source_routing`, which differs only in searching the record kinds its
template plans). It never reads a warehouse table other than the corpus, nor Mongo, the documents or the
SaaS API.

Planned vintage: every class at T' (the corpus's build day). Traces: one `rag_lookup` entry per question,
the corpus's data time attributed to every class its records state (`arms/corpus.py`). So point lookups
come out right when their record is among the K retrieved, aggregates over more than K records come out
wrong, and every answer is as of T' (docs/rules.md, "Arm correctness").
"""

from __future__ import annotations

from churn_assets.arms.corpus import CorpusArm


class ClassicRagArm(CorpusArm):
    name = "classic_rag"
    by_kind = False  # one search over every record kind
