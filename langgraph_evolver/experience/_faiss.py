"""``FaissExperiencePool``: exact cosine search in a faiss ``IndexFlatIP``, with crash-safe snapshots."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import threading
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.experience._base import (
    DEFAULT_MERGE_THRESHOLD,
    ExperiencePool,
    check_k,
    check_merge_threshold,
    embed_query,
    embed_texts,
    embeddings_name,
    merge_experiences,
    normalize_rows,
)
from langgraph_evolver.experience.types import Experience

if TYPE_CHECKING:
    import numpy as np
    from langchain_core.embeddings import Embeddings

__all__ = ["MANIFEST_NAME", "FaissExperiencePool"]

MANIFEST_NAME = "manifest.json"
_FORMAT = "langgraph-evolver/experience-pool"
_FORMAT_VERSION = 1
_CHUNK = 1024  # incoming experiences searched against the index at once while merging
_DATA_PREFIXES = ("experiences-", "vectors-", "index-")
VectorDtype = Literal["float32", "float16"]
IndexKind = Literal["flat", "hnsw"]
HNSW_M = 32
"""Graph degree of the HNSW index (faiss's default is 32)."""
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 64
"""Candidates explored per query: recall@5 >= 0.99 against the exact search in ``benchmarks/experience.py``."""


class FaissExperiencePool(ExperiencePool):
    """An experience pool in memory: unit-length ``when_to_use`` embeddings in a faiss ``IndexFlatIP``.

    Inner product of unit vectors is cosine similarity; the flat index is exact. One query reads
    every vector, so its latency is bound by memory bandwidth: ~6 ms over 100k 384-dimensional
    float32 vectors on one core of the 2-core build machine (``benchmarks/experience.py``);
    ``vector_dtype="float16"`` halves both memory and latency, scores within ~1e-4 of exact.
    ``save`` writes a snapshot directory that ``load`` (or the constructor, given ``path``) reads
    back with identical retrieval results.

    Args:
        embeddings: Any LangChain ``Embeddings`` (see ``default_embeddings``); vectors are normalized here.
        merge_threshold: Cosine similarity at or above which an incoming experience is merged
            into a stored one.
        path: The snapshot directory ``save()`` writes by default; if it already holds a
            snapshot, the pool starts from it.
        vector_dtype: How vectors are held: ``"float32"`` (exact, ``IndexFlatIP``) or
            ``"float16"`` (``IndexScalarQuantizer`` fp16: half the memory and search time). A
            snapshot keeps the dtype it was saved with.
        index: ``"flat"`` (exact; default) or ``"hnsw"`` (``IndexHNSWFlat``: an approximate graph
            search whose latency grows with log n instead of n — for pools of 100k+ experiences;
            float32 only; ``remove`` rebuilds the graph; a snapshot stores the graph itself, so a
            reload searches the very same graph). A snapshot keeps its index kind.

    Example:
        >>> pool = FaissExperiencePool(default_embeddings(), path="runs/exp/pool")     # doctest: +SKIP
        >>> pool.add([Experience(when_to_use="booking a flight", content="Check the date first.")])  # doctest: +SKIP
        >>> pool.retrieve("book me a plane ticket", k=3)                                # doctest: +SKIP
        >>> pool.save()                                                                 # doctest: +SKIP
    """

    def __init__(
        self,
        embeddings: Embeddings,
        *,
        merge_threshold: float = DEFAULT_MERGE_THRESHOLD,
        path: str | os.PathLike[str] | None = None,
        vector_dtype: VectorDtype = "float32",
        index: IndexKind = "flat",
    ) -> None:
        if vector_dtype not in ("float32", "float16"):
            raise ConfigError(
                f"vector_dtype={vector_dtype!r} is not one of 'float32' (exact) or 'float16' (half the memory)."
            )
        if index not in ("flat", "hnsw"):
            raise ConfigError(f"index={index!r} is not one of 'flat' (exact) or 'hnsw' (approximate, for 100k+).")
        if index == "hnsw" and vector_dtype != "float32":
            raise ConfigError("index='hnsw' holds float32 vectors; use vector_dtype='float32' with it.")
        self.embeddings = embeddings
        self.vector_dtype: VectorDtype = vector_dtype
        self.index_kind: IndexKind = index
        self.merge_threshold = check_merge_threshold(merge_threshold)
        self.path = Path(path) if path is not None else None
        self._lock = threading.RLock()
        self._index: Any = None  # a faiss IndexFlatCodes, created once the dimension is known
        self._dim: int | None = None
        self._row_ids: list[str] = []  # index row -> experience id
        self._rows: dict[str, int] = {}
        self._experiences: dict[str, Experience] = {}
        self._version = 0
        if self.path is not None and (self.path / MANIFEST_NAME).exists():
            self._restore(self.path)

    # -- reads -------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    @property
    def dim(self) -> int | None:
        """The embedding dimension (``None`` until the first experience is added)."""
        return self._dim

    def __len__(self) -> int:
        return len(self._row_ids)

    def get(self, id: str) -> Experience | None:
        return self._experiences.get(id)

    def all(self) -> list[Experience]:
        with self._lock:
            return [self._experiences[i] for i in self._row_ids]

    def retrieve(self, query: str, k: int = 5, min_score: float | None = None) -> list[tuple[Experience, float]]:
        if check_k(k) == 0 or len(self) == 0:
            return []
        return self.retrieve_by_vector(embed_query(self.embeddings, query), k, min_score)

    def retrieve_by_vector(
        self, vector: np.ndarray, k: int = 5, min_score: float | None = None
    ) -> list[tuple[Experience, float]]:
        """``retrieve`` for a query embedded already (normalized here); what the benchmark times."""
        import numpy as np

        check_k(k)
        query = normalize_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1))
        with self._lock:
            if k == 0 or self._index is None or self._index.ntotal == 0:
                return []
            self._check_dim(query.shape[1], "the query embedding")
            with _one_omp_thread():
                scores, rows = self._index.search(query, min(k, self._index.ntotal))
            return [
                (self._experiences[self._row_ids[row]], float(score))
                for score, row in zip(scores[0], rows[0], strict=True)
                if row >= 0 and (min_score is None or score >= min_score)
            ]

    # -- mutations -----------------------------------------------------------------------------

    def add(
        self, experiences: Iterable[Experience], *, merge: bool = True, vectors: np.ndarray | None = None
    ) -> list[Experience]:
        """See ``ExperiencePool.add``.

        Args:
            experiences: The experiences to store.
            merge: ``False`` skips the near-duplicate search (same-id experiences still merge).
            vectors: Precomputed ``when_to_use`` embeddings, one row per experience, for bulk
                loads and benchmarks; they must come from the pool's embedding model.
        """
        import numpy as np

        batch = list(experiences)
        if not batch:
            return []
        if vectors is None:
            matrix = embed_texts(self.embeddings, [e.when_to_use for e in batch])
        else:
            matrix = np.asarray(vectors, dtype=np.float32)
            if matrix.ndim != 2 or matrix.shape[0] != len(batch):
                raise ConfigError(
                    f"add(..., vectors=) got shape {matrix.shape} for {len(batch)} experiences; "
                    "pass one embedding row per experience, shape (n, dim)."
                )
            matrix = normalize_rows(matrix)
        with self._lock:
            self._ensure_index(matrix.shape[1])
            stored_ids: list[str] = []
            for start in range(0, len(batch), _CHUNK):
                stored_ids += self._add_chunk(batch[start : start + _CHUNK], matrix[start : start + _CHUNK], merge)
            self._version += 1
            return [self._experiences[i] for i in stored_ids]

    def _add_chunk(self, chunk: list[Experience], matrix: np.ndarray, merge: bool) -> list[str]:
        import numpy as np

        best_existing: list[tuple[float, str | None]] = [(-2.0, None)] * len(chunk)
        if merge and self._index.ntotal:
            scores, rows = self._index.search(matrix, 1)
            best_existing = [
                (float(s), self._row_ids[r] if r >= 0 else None) for s, r in zip(scores[:, 0], rows[:, 0], strict=True)
            ]
        new_rows: list[int] = []  # positions in this chunk that became new experiences
        stored_ids: list[str] = []
        for pos, experience in enumerate(chunk):
            target: str | None = experience.id if experience.id in self._experiences else None
            if target is None and merge:
                score, target = best_existing[pos]
                if new_rows:  # earlier experiences of this same chunk are not in the search above
                    sims = matrix[new_rows] @ matrix[pos]
                    best = int(np.argmax(sims))
                    if sims[best] > score:
                        score, target = float(sims[best]), chunk[new_rows[best]].id
                if score < self.merge_threshold:
                    target = None
            if target is not None:
                self._experiences[target] = merge_experiences(self._experiences[target], experience)
                stored_ids.append(target)
                continue
            self._rows[experience.id] = len(self._row_ids)
            self._row_ids.append(experience.id)
            self._experiences[experience.id] = experience
            new_rows.append(pos)
            stored_ids.append(experience.id)
        if new_rows:  # one add per chunk, rows in the order of _row_ids
            self._index.add(np.ascontiguousarray(matrix[new_rows]))
        return stored_ids

    def record_use(self, ids: Iterable[str], succeeded: bool) -> list[Experience]:
        with self._lock:
            updated = []
            for id in ids:
                if id in self._experiences:
                    self._experiences[id] = self._experiences[id].with_use(succeeded)
                    updated.append(self._experiences[id])
            if updated:
                self._version += 1
            return updated

    def remove(self, ids: Iterable[str]) -> int:
        import numpy as np

        with self._lock:
            doomed = {id for id in ids if id in self._rows}
            if not doomed:
                return 0
            if self.index_kind == "hnsw":  # a graph index cannot drop nodes: rebuild it from the rows that stay
                kept = [self._rows[i] for i in self._row_ids if i not in doomed]
                vectors = self._index.reconstruct_n(0, self._index.ntotal)[kept]
                self._index = None
                self._ensure_index(self._dim or vectors.shape[1])
                if len(kept):
                    self._index.add(np.ascontiguousarray(vectors))
            else:  # IndexFlatCodes.remove_ids compacts the rows that stay, keeping their order.
                self._index.remove_ids(np.array(sorted(self._rows[i] for i in doomed), dtype=np.int64))
            self._row_ids = [i for i in self._row_ids if i not in doomed]
            self._rows = {id: row for row, id in enumerate(self._row_ids)}
            for id in doomed:
                del self._experiences[id]
            self._version += 1
            return len(doomed)

    # -- persistence -------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write a snapshot to the directory ``path`` (default: the pool's ``path``); returns it.

        Crash-safe: the data files get names of their own per snapshot and each is written to a
        temporary file in the same directory, fsynced and renamed into place; the manifest naming
        them is replaced last. Until then the previous manifest and its files stay untouched, so
        a crash at any point leaves the previous snapshot loadable. Files of older snapshots (and
        temporary files a crash left) are deleted after the new manifest is in place. One writer
        per directory.
        """
        import numpy as np

        target = Path(path) if path is not None else self.path
        if target is None:
            raise ConfigError("save() needs a directory: pass save(path) or create the pool with path=...")
        target.mkdir(parents=True, exist_ok=True)
        with self._lock:
            n = len(self._row_ids)
            vectors = self._index.reconstruct_n(0, n) if n else np.zeros((0, self._dim or 0), dtype=np.float32)
            records = [self._experiences[i].to_dict() for i in self._row_ids]
            version, dim = self._version, self._dim
        tag = f"v{version}-{uuid.uuid4().hex[:8]}"
        files = {"experiences": f"experiences-{tag}.jsonl", "vectors": f"vectors-{tag}.npy"}
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
        payloads = {
            "experiences": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode(),
            "vectors": buffer.getvalue(),
        }
        if self.index_kind == "hnsw" and n:  # the graph itself: a reload searches exactly the same graph, fast
            import faiss

            with self._lock:
                files["index"] = f"index-{tag}.faiss"
                payloads["index"] = faiss.serialize_index(self._index).tobytes()
        for key, data in payloads.items():
            _atomic_write(target / files[key], data)
        _fsync_dir(target)  # the data files' renames are durable before the manifest names them
        manifest = {
            "format": _FORMAT,
            "format_version": _FORMAT_VERSION,
            "version": version,
            "count": n,
            "dim": dim,
            "embedding_model": embeddings_name(self.embeddings),
            "merge_threshold": self.merge_threshold,
            "vector_dtype": self.vector_dtype,
            "index": self.index_kind,
            "files": files,
            "sha256": {key: hashlib.sha256(data).hexdigest() for key, data in payloads.items()},
            "saved_at": time.time(),
        }
        _atomic_write(target / MANIFEST_NAME, (json.dumps(manifest, indent=2) + "\n").encode())
        _fsync_dir(target)
        keep = set(files.values())
        for stale in target.iterdir():
            old_data = stale.name.startswith(_DATA_PREFIXES) and stale.name not in keep
            if old_data or stale.name.endswith(".tmp"):
                stale.unlink(missing_ok=True)
        if self.path is None:
            self.path = target
        return target

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], embeddings: Embeddings, *, merge_threshold: float | None = None
    ) -> FaissExperiencePool:
        """The pool saved in the directory ``path``, embedding new text with ``embeddings``.

        Raises:
            ConfigError: No snapshot there, a damaged one, or ``embeddings`` of another dimension
                than the snapshot's.
        """
        if not (Path(path) / MANIFEST_NAME).exists():
            raise ConfigError(
                f"No experience pool snapshot in {path} ({MANIFEST_NAME} missing). "
                f"Save one with pool.save({str(path)!r}), "
                f"or start an empty pool there with FaissExperiencePool(embeddings, path={str(path)!r})."
            )
        pool = cls(embeddings, merge_threshold=merge_threshold or DEFAULT_MERGE_THRESHOLD)
        pool._restore(Path(path), keep_threshold=merge_threshold is not None)
        pool.path = Path(path)
        return pool

    def _restore(self, path: Path, keep_threshold: bool = False) -> None:
        import numpy as np

        manifest = json.loads((path / MANIFEST_NAME).read_text())
        if manifest.get("format") != _FORMAT or manifest.get("format_version") != _FORMAT_VERSION:
            raise ConfigError(
                f"{path / MANIFEST_NAME} is not a version-{_FORMAT_VERSION} experience pool snapshot "
                f"(format {manifest.get('format')!r} v{manifest.get('format_version')!r}); "
                "point at a directory written by FaissExperiencePool.save()."
            )
        payloads = {}
        for key, name in manifest["files"].items():
            file = path / name
            data = file.read_bytes() if file.exists() else b""
            if hashlib.sha256(data).hexdigest() != manifest["sha256"][key]:
                raise ConfigError(
                    f"Experience pool snapshot {path} is damaged: {name} is missing or does not match its "
                    "checksum in the manifest. Restore the directory from a backup or rebuild the pool."
                )
            payloads[key] = data
        dim = manifest["dim"]
        model = manifest.get("embedding_model")
        if dim is not None:
            probe = embed_query(self.embeddings, "dimension probe")
            if probe.shape[0] != dim:
                raise ConfigError(
                    f"The experience pool in {path} was built with {model!r} embeddings of dimension {dim}, but "
                    f"{embeddings_name(self.embeddings)!r} gives dimension {probe.shape[0]}. Load it with the same "
                    "embedding model, or rebuild the pool (add its experiences to a new pool) with the new one."
                )
            if model != embeddings_name(self.embeddings):
                warnings.warn(
                    f"The experience pool in {path} was built with {model!r}; loading it with "
                    f"{embeddings_name(self.embeddings)!r} (same dimension {dim}). Similarities are only meaningful "
                    "if both are the same model.",
                    stacklevel=3,
                )
        vectors = np.load(io.BytesIO(payloads["vectors"]), allow_pickle=False)
        records = [json.loads(line) for line in payloads["experiences"].decode().splitlines() if line]
        if len(records) != vectors.shape[0] or len(records) != manifest["count"]:
            raise ConfigError(
                f"Experience pool snapshot {path} is inconsistent: {len(records)} experiences, "
                f"{vectors.shape[0]} vectors, manifest says {manifest['count']}. Rebuild the pool."
            )
        with self._lock:
            self._index, self._dim = None, None
            self.vector_dtype = manifest.get("vector_dtype", "float32")
            self.index_kind = manifest.get("index", "flat")
            if dim is not None and "index" in payloads:
                import faiss

                self._index, self._dim = faiss.deserialize_index(np.frombuffer(payloads["index"], dtype=np.uint8)), dim
                self._index.hnsw.efSearch = HNSW_EF_SEARCH
            elif dim is not None:
                self._ensure_index(dim)
                if len(records):
                    self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))
            experiences = [Experience.from_dict(r) for r in records]
            self._row_ids = [e.id for e in experiences]
            self._rows = {id: row for row, id in enumerate(self._row_ids)}
            self._experiences = {e.id: e for e in experiences}
            self._version = int(manifest["version"])
            if not keep_threshold and manifest.get("merge_threshold") is not None:
                self.merge_threshold = check_merge_threshold(manifest["merge_threshold"])

    # -- helpers -----------------------------------------------------------------------------

    def _ensure_index(self, dim: int) -> None:
        if self._index is None:
            import faiss

            if self.index_kind == "hnsw":
                self._index = faiss.IndexHNSWFlat(int(dim), HNSW_M, faiss.METRIC_INNER_PRODUCT)
                self._index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
                self._index.hnsw.efSearch = HNSW_EF_SEARCH
            elif self.vector_dtype == "float16":
                fp16 = faiss.ScalarQuantizer.QT_fp16
                self._index = faiss.IndexScalarQuantizer(int(dim), fp16, faiss.METRIC_INNER_PRODUCT)
            else:
                self._index = faiss.IndexFlatIP(int(dim))
            self._dim = int(dim)
        self._check_dim(dim, "these embeddings")

    def _check_dim(self, dim: int, what: str) -> None:
        if dim != self._dim:
            raise ConfigError(
                f"{what} have dimension {dim} but the pool holds {self._dim}-dimensional embeddings "
                f"({embeddings_name(self.embeddings)}); embed with the model the pool was built with."
            )


@contextlib.contextmanager
def _one_omp_thread() -> Iterator[None]:
    """One OpenMP thread for one-query searches (the calling thread only; restored after).

    A single query gains nothing from more threads, and on a busy machine faiss's OpenMP
    barriers made a 100k search ~6x slower with two threads than with one (measured).
    """
    import faiss

    previous = faiss.omp_get_max_threads()
    if previous == 1:
        yield
        return
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


def _atomic_write(target: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``target``, fsync it, then rename it over ``target``."""
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_dir(path: Path) -> None:
    """Make the renames in ``path`` durable (a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
