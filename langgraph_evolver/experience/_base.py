"""The ``ExperiencePool`` interface, the near-duplicate merge rule and the embedding helpers every backend shares."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.experience.types import Experience

if TYPE_CHECKING:
    import numpy as np
    from langchain_core.embeddings import Embeddings

__all__ = ["DEFAULT_MERGE_THRESHOLD", "ExperiencePool", "merge_experiences"]

DEFAULT_MERGE_THRESHOLD = 0.9
"""Cosine similarity of two ``when_to_use`` embeddings at or above which they are one experience."""


class ExperiencePool(ABC):
    """A store of experiences, retrieved by the cosine similarity of a query to their ``when_to_use``.

    Every mutation (``add``, ``record_use``, ``remove``) that changes something increments
    ``version``, so trainer ranks can check that they retrieve from the same pool state.
    Implementations are safe to call from several threads.
    """

    merge_threshold: float

    @property
    @abstractmethod
    def version(self) -> int:
        """Incremented on every mutation that changed the pool."""

    @abstractmethod
    def add(self, experiences: Iterable[Experience], *, merge: bool = True) -> list[Experience]:
        """Store experiences, merging near-duplicates into the ones already there.

        An incoming experience whose ``when_to_use`` embedding has cosine similarity
        ``>= merge_threshold`` with a stored one (or an earlier one of the same call) is merged into
        it by ``merge_experiences``: the stored id stays. One with the id of a stored experience
        is always merged into it.

        Args:
            experiences: The experiences to store.
            merge: ``False`` skips the near-duplicate search (bulk loads of a pool already
                deduplicated); same-id experiences are still merged.

        Returns:
            One experience per incoming one, in order: what it was stored as (itself, or the
            experience it was merged into, in its state after the whole call).
        """

    @abstractmethod
    def retrieve(self, query: str, k: int = 5, min_score: float | None = None) -> list[tuple[Experience, float]]:
        """The ``k`` experiences whose ``when_to_use`` is most similar to ``query``, best first.

        Args:
            query: The situation to find experiences for (for rollouts: the task's system and user text).
            k: How many to return at most.
            min_score: Drop those with cosine similarity below it.

        Returns:
            ``(experience, cosine similarity)`` pairs, highest similarity first.
        """

    async def aretrieve(self, query: str, k: int = 5, min_score: float | None = None) -> list[tuple[Experience, float]]:
        """Async twin of ``retrieve`` (runs it in a worker thread unless a backend has a native one)."""
        return await asyncio.to_thread(self.retrieve, query, k, min_score)

    @abstractmethod
    def record_use(self, ids: Iterable[str], succeeded: bool) -> list[Experience]:
        """Count one more rollout guided by each of ``ids`` (``Experience.with_use``).

        Ids no longer in the pool (removed since they were retrieved) are skipped.

        Returns:
            The updated experiences.
        """

    @abstractmethod
    def get(self, id: str) -> Experience | None:
        """The stored experience with this id, or ``None``."""

    @abstractmethod
    def all(self) -> list[Experience]:
        """Every stored experience, oldest first."""

    @abstractmethod
    def remove(self, ids: Iterable[str]) -> int:
        """Remove these experiences (unknown ids are skipped); returns how many were removed."""

    @abstractmethod
    def __len__(self) -> int: ...

    def __contains__(self, id: object) -> bool:
        return isinstance(id, str) and self.get(id) is not None


def merge_experiences(existing: Experience, incoming: Experience) -> Experience:
    """``existing`` after absorbing ``incoming``, a near-duplicate of it.

    The stored id, ``when_to_use`` (its embedding is the retrieval key) and ``created_at`` stay.
    The content comes from the higher-scoring one (the longer one on a tie); provenance ids are
    unioned (order kept); ``score`` and ``step`` take the maximum; use counts add up, unless both
    are the same experience (same id), where the larger counts are kept; ``updated_at`` is now.
    """
    incoming_wins = (incoming.score, len(incoming.content)) > (existing.score, len(existing.content))
    same = incoming.id == existing.id
    steps = [s for s in (existing.step, incoming.step) if s is not None]
    winner, loser = (incoming, existing) if incoming_wins else (existing, incoming)
    metadata = {**loser.metadata, **winner.metadata}
    return replace(
        existing,
        content=incoming.content if incoming_wins else existing.content,
        source_trajectory_ids=_union(existing.source_trajectory_ids, incoming.source_trajectory_ids),
        source_task_ids=_union(existing.source_task_ids, incoming.source_task_ids),
        step=max(steps) if steps else None,
        score=max(existing.score, incoming.score),
        uses=max(existing.uses, incoming.uses) if same else existing.uses + incoming.uses,
        successes=max(existing.successes, incoming.successes) if same else existing.successes + incoming.successes,
        updated_at=max(time.time(), existing.updated_at, incoming.updated_at),
        metadata=metadata,
    )


def _union(first: Sequence[str], second: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*first, *second)))


def check_merge_threshold(value: float) -> float:
    if not 0.0 < float(value) <= 1.0:
        raise ConfigError(
            f"merge_threshold={value!r} is outside (0, 1]: it is a cosine similarity above which two experiences "
            f"are merged. Use {DEFAULT_MERGE_THRESHOLD} (the default), or add(..., merge=False) to skip merging."
        )
    return float(value)


def check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ConfigError(f"k={k!r} must be a non-negative int: the number of experiences to retrieve (default 5).")
    return k


def embeddings_name(embeddings: Any) -> str:
    """A readable name of an embedding model, recorded in snapshots (``model_name``, ``model`` or the class)."""
    for attr in ("model_name", "model", "model_id"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(embeddings).__qualname__


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), float32 and C-contiguous for faiss."""
    import numpy as np

    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.ascontiguousarray(matrix / np.where(norms > 0, norms, 1.0), dtype=np.float32)


def embed_texts(embeddings: Embeddings, texts: Sequence[str]) -> np.ndarray:
    """Unit-length float32 embeddings, one row per text (a fast path for ``SentenceTransformerEmbeddings``)."""
    import numpy as np

    from langgraph_evolver.embeddings import SentenceTransformerEmbeddings

    if isinstance(embeddings, SentenceTransformerEmbeddings):
        matrix = embeddings.encode(list(texts))
    else:
        matrix = np.asarray(embeddings.embed_documents(list(texts)), dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(texts):
        raise ConfigError(
            f"{embeddings_name(embeddings)} returned embeddings of shape {matrix.shape} for {len(texts)} texts; "
            "an Embeddings must return one vector per text."
        )
    return normalize_rows(matrix)


def embed_query(embeddings: Embeddings, text: str) -> np.ndarray:
    """The unit-length float32 embedding of a query, shape ``(dim,)``."""
    import numpy as np

    from langgraph_evolver.embeddings import SentenceTransformerEmbeddings

    if isinstance(embeddings, SentenceTransformerEmbeddings):
        vector = embeddings.encode([text])[0]
    else:
        vector = np.asarray(embeddings.embed_query(text), dtype=np.float32)
    return normalize_rows(np.asarray(vector, dtype=np.float32)[None, :])[0]
