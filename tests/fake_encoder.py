"""A deterministic stand-in for the embedding model, for unit tests of the `Encoder` seam only."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from churn_assets.grounding.embeddings import EncoderStats


class FakeEncoder:
    """Bag of words: each lower-cased word adds a pseudo-random unit vector seeded by its hash, so texts
    sharing words get similar vectors and ranking behaves sensibly. Counts calls and texts like the real
    encoder; `seen` keeps every text it encoded."""

    def __init__(self, dimension: int = 64, model_id: str = "fake-bow-64") -> None:
        self._dimension = dimension
        self._model_id = model_id
        self.stats = EncoderStats()
        self.seen: list[str] = []

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        return self._dimension

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9_]+", text.lower()):
                seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[i] += np.random.default_rng(seed).standard_normal(self._dimension).astype(np.float32)
            norm = float(np.linalg.norm(out[i]))
            if norm > 0:
                out[i] /= norm
            else:
                out[i, 0] = 1.0
        if len(texts):
            self.stats.calls += 1
            self.stats.texts += len(texts)
            self.seen.extend(texts)
        return out
