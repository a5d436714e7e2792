"""``StoreExperiencePool``: experiences as values of any LangGraph ``BaseStore`` with a vector index."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from langgraph.store.base import BaseStore, PutOp, SearchItem

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.experience._base import (
    DEFAULT_MERGE_THRESHOLD,
    ExperiencePool,
    check_k,
    check_merge_threshold,
    merge_experiences,
)
from langgraph_evolver.experience.types import Experience

__all__ = ["StoreExperiencePool"]

_INDEXED = ["when_to_use"]  # passed on every put, whatever fields the store indexes by default
_PAGE = 1000
_META_KEY = "pool"


class StoreExperiencePool(ExperiencePool):
    """An experience pool over a LangGraph store (``InMemoryStore``, ``PostgresStore``, ...).

    Each experience is an item (key = its id, value = ``Experience.to_dict()``) in ``namespace``,
    indexed on ``when_to_use``; the store embeds and searches (its cosine similarity is the score).
    The pool owns ``namespace``. ``version`` lives in the store too (namespace
    ``(*namespace[:-1], namespace[-1] + "__pool")``), so processes sharing a store share it.
    Mutations are serialized within a process, not across processes.

    Args:
        store: A store created with a vector index, e.g.
            ``InMemoryStore(index={"dims": 384, "embed": default_embeddings(), "fields": ["when_to_use"]})``.
        namespace: Where the experiences live.
        merge_threshold: Cosine similarity at or above which an incoming experience is merged
            into a stored one.
    """

    def __init__(
        self,
        store: BaseStore,
        *,
        namespace: Sequence[str] = ("experiences",),
        merge_threshold: float = DEFAULT_MERGE_THRESHOLD,
    ) -> None:
        namespace = tuple(namespace)
        if not namespace or any(not isinstance(p, str) or not p or "." in p for p in namespace):
            raise ConfigError(
                f"namespace={namespace!r} must be a non-empty tuple of non-empty strings without '.', "
                "e.g. ('experiences',) or ('experiences', 'appworld')."
            )
        if getattr(store, "index_config", None) is None:
            raise ConfigError(
                f"{type(store).__name__} has no vector index, so experiences cannot be retrieved by similarity. "
                "Create the store with one, e.g. InMemoryStore(index={'dims': 384, 'embed': default_embeddings(), "
                "'fields': ['when_to_use']})."
            )
        self.store = store
        self.namespace = namespace
        self.merge_threshold = check_merge_threshold(merge_threshold)
        self._meta_namespace = (*namespace[:-1], f"{namespace[-1]}__pool")
        self._lock = threading.RLock()

    # -- reads -------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        item = self.store.get(self._meta_namespace, _META_KEY)
        return int(item.value["version"]) if item is not None else 0

    def __len__(self) -> int:
        return sum(1 for _ in self._items())

    def get(self, id: str) -> Experience | None:
        item = self.store.get(self.namespace, id)
        return Experience.from_dict(item.value) if item is not None else None

    def all(self) -> list[Experience]:
        return [Experience.from_dict(item.value) for item in self._items()]

    def retrieve(self, query: str, k: int = 5, min_score: float | None = None) -> list[tuple[Experience, float]]:
        if check_k(k) == 0:
            return []
        return self._scored(self.store.search(self.namespace, query=query, limit=k), min_score)

    async def aretrieve(self, query: str, k: int = 5, min_score: float | None = None) -> list[tuple[Experience, float]]:
        if check_k(k) == 0:
            return []
        return self._scored(await self.store.asearch(self.namespace, query=query, limit=k), min_score)

    # -- mutations -----------------------------------------------------------------------------

    def add(self, experiences: Iterable[Experience], *, merge: bool = True) -> list[Experience]:
        batch = list(experiences)
        if not batch:
            return []
        with self._lock:
            final: dict[str, Experience] = {}
            order: list[str] = []
            for experience in batch:
                target = final.get(experience.id) or self.get(experience.id)
                if target is None and merge:
                    hits = self._scored(self.store.search(self.namespace, query=experience.when_to_use, limit=1))
                    if hits and hits[0][1] >= self.merge_threshold:
                        target = final.get(hits[0][0].id, hits[0][0])
                stored = merge_experiences(target, experience) if target is not None else experience
                self._put([stored])  # one at a time: later experiences of the batch must see it
                final[stored.id] = stored
                order.append(stored.id)
            self._bump_version()
            return [final[id] for id in order]

    def record_use(self, ids: Iterable[str], succeeded: bool) -> list[Experience]:
        with self._lock:
            updated: dict[str, Experience] = {}
            for id in ids:
                current = updated.get(id) or self.get(id)
                if current is not None:
                    updated[id] = current.with_use(succeeded)
            if not updated:
                return []
            # The store re-embeds when_to_use on every put (unchanged here): index=False would
            # leave the old vector in some stores and drop it in others.
            self._put(list(updated.values()))
            self._bump_version()
            return list(updated.values())

    def remove(self, ids: Iterable[str]) -> int:
        with self._lock:
            doomed = [id for id in dict.fromkeys(ids) if self.store.get(self.namespace, id) is not None]
            if not doomed:
                return 0
            self.store.batch([PutOp(self.namespace, id, None) for id in doomed])
            self._bump_version()
            return len(doomed)

    # -- helpers -----------------------------------------------------------------------------

    def _put(self, experiences: list[Experience]) -> None:
        self.store.batch([PutOp(self.namespace, e.id, e.to_dict(), index=_INDEXED) for e in experiences])

    def _bump_version(self) -> None:
        self.store.put(self._meta_namespace, _META_KEY, {"version": self.version + 1}, index=False)

    def _items(self) -> Iterator[Any]:
        offset = 0
        while True:
            page = self.store.search(self.namespace, limit=_PAGE, offset=offset)
            yield from (item for item in page if tuple(item.namespace) == self.namespace)
            if len(page) < _PAGE:
                return
            offset += _PAGE

    def _scored(self, items: list[SearchItem], min_score: float | None = None) -> list[tuple[Experience, float]]:
        return [
            (Experience.from_dict(item.value), float(item.score))
            for item in items
            if item.score is not None
            and tuple(item.namespace) == self.namespace
            and (min_score is None or item.score >= min_score)
        ]
