"""Arms that answer from the RAG corpus only: `grounding_no_source_routing` and `classic_rag`.

Both search the corpus (`rag_index`) built at T' (`grounding/rag_corpus.py`), hand the top-K fact records to
the deterministic agent, and let it answer by the extraction rule (`arms/extraction.py`); they never read a
warehouse table other than the corpus, Mongo, the documents or the SaaS API. What separates them is the
search: `grounding_no_source_routing` searches only the record kinds its template plans (`by_kind`),
`classic_rag` does one search over every kind (one vector store of everything).

Traces: one `rag_lookup` entry per search. The corpus is outside the registry; its data time (T', its build
day) is attributed to the classes whose facts the searched record kinds state (`RECORD_CLASSES`), one read
per class with the rows of the retrieved records that state it; the first read carries the search's cost.
Planned vintage: every class at T'.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from churn_assets.arms.agents.interface import Agent, AgentAnswer
from churn_assets.arms.base import Arm, ArmError
from churn_assets.arms.extraction import RECORD_CLASSES
from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.fabric.postgres import schema_name
from churn_assets.fabric.sources import Sources
from churn_assets.freshness.scenario import CONTRACT_DOCUMENTS, RAG_INDEX, VECTOR_INDEX, ArmReads, Scenario
from churn_assets.grounding.embeddings import default_encoder
from churn_assets.grounding.rag_corpus import search_corpus
from churn_assets.grounding.traces import RAG_LOOKUP, DataIntegrityError, Read, TraceEntry
from churn_assets.tasks.task_set import Task
from churn_assets.world.calendar import Day
from churn_assets.world.events import ENTITY_CLASSES

if TYPE_CHECKING:
    import psycopg


def corpus_vintage(t_prime: Day) -> dict[str, Day]:
    """The planned vintage of an arm that reads only the corpus built at T': every class at T'."""
    return dict.fromkeys(ENTITY_CLASSES, t_prime)


# The RAG corpus built at T', after the documents and the index of T' (whose chunks it states).
CORPUS_READS = ArmReads(((CONTRACT_DOCUMENTS, "t_prime"), (VECTOR_INDEX, "t_prime"), (RAG_INDEX, "t_prime")),
                        lambda t_prime, t: corpus_vintage(t_prime))


def corpus_trace(table: str, day: Day, kinds: Sequence[str] | None, hits: Sequence[Any], k: int,
                 latency_ms: float) -> TraceEntry:
    """The trace of one corpus search over `kinds` (None: every kind) that returned `hits`, planned at `day`.
    Its data time is the day the hits carry (each hit's text checked against its content hash by the
    search); a hit of another day stops the answer with a `DataIntegrityError`."""
    searched = list(kinds) if kinds is not None else list(RECORD_CLASSES)
    classes = list(dict.fromkeys(c for kind in searched for c in RECORD_CLASSES[kind]))
    days = {h.day for h in hits}
    if days - {day}:
        raise DataIntegrityError(f"{table}: a search planned at {day} returned records of "
                                 f"{', '.join(sorted(map(str, days)))}")
    digest = sha256_hex(canonical_json([getattr(h, "content_hash", "") for h in hits])) if hits else ""
    reads = tuple(Read("rag_index", table, c, day, sum(1 for h in hits if c in RECORD_CLASSES[h.kind]),
                       accesses=1 if i == 0 else 0, observed_hash=digest, planned_day=day)
                  for i, c in enumerate(classes))
    what = ", ".join(kinds) if kinds is not None else "every kind"
    return TraceEntry(RAG_LOOKUP, reads, latency_ms, note=f"top {k} of {what}: {len(hits)} records")


class CorpusArm(Arm):
    """Top-K records of the corpus built at T' per question, answered by the extraction rule."""

    by_kind: bool = True  # search only the record kinds the template plans (False: every kind)

    def __init__(self, scenario: Scenario, sources: Sources, encoder: Any = None, agent: Agent | None = None) -> None:
        super().__init__(scenario, agent)
        if sources.pg is None:
            raise ArmError(f"{self.name} reads the RAG corpus: it needs a warehouse connection")
        self.sources = sources
        self._pg: psycopg.Connection[Any] = sources.pg
        self._encoder = encoder
        self._question_vectors: dict[str, Any] = {}

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            self._encoder = default_encoder()
        return self._encoder

    @property
    def planned_vintage(self) -> dict[str, Day]:
        return corpus_vintage(self.scenario.t_prime)

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Encode every question of the run in one batched call: one question at a time, the model's fixed
        cost per call was two thirds of an answer. The batch is the task set in its order, so the vectors are
        the same on every run of it (a batch pads its texts to a common length: a vector can differ from
        the question's vector encoded alone in its last float bits, never between two runs)."""
        questions = list(dict.fromkeys(task.question_text for task in tasks))
        self._question_vectors = dict(zip(questions, self.encoder.encode(questions), strict=True))

    def _answer(self, question: str) -> tuple[AgentAnswer, list[TraceEntry]]:
        traces: list[TraceEntry] = []
        day = self.scenario.t_prime
        table = f"{schema_name(self.sources.world_id, 'staging')}.rag_corpus_records@{day.isoformat()}"

        def search(query: str, kinds: Sequence[str] | None, k: int) -> list[Any]:
            started = time.perf_counter()
            hits = search_corpus(self._pg, self.sources.world_id, day, query, self.encoder, k=k,
                                 kinds=None if kinds is None else list(kinds),
                                 vector=self._question_vectors.get(query))
            traces.append(corpus_trace(table, day, kinds, hits, k, (time.perf_counter() - started) * 1000.0))
            return hits

        answer = self.agent.answer_from_records(question, self.scenario.t, search, by_kind=self.by_kind)
        return answer, traces
