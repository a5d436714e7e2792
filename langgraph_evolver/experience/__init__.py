"""Self-navigating: distil experiences from rollouts, retrieve them to guide new rollouts, strip them
before training (``../shared/DESIGN.md`` "Self-navigating").

- ``extract_experiences`` (+ ``aextract_experiences``, ``create_extraction_node``): from the
  rollouts of one task, an extractor writes ``Experience`` objects (``make_extractor("rules")``
  offline, or any chat model).
- ``FaissExperiencePool`` / ``StoreExperiencePool``: embedded ``when_to_use`` keys, near-duplicate
  merge, use counts, crash-safe persistence; ``default_embeddings()`` is MiniLM, offline.
- ``Navigator``, ``inject_experience``, ``prepare_for_training``, ``epsilon_highs``: retrieval
  into guided rollouts, stripping the injected block before the loss, selective boosting.
"""

from __future__ import annotations

from .extract import (
    ExtractionResult,
    Extractor,
    LLMExtractor,
    RulesExtractor,
    aextract_experiences,
    create_extraction_node,
    extract_experiences,
    make_extractor,
)
from .navigate import (
    ExperienceBlock,
    Navigator,
    epsilon_highs,
    format_block,
    inject_experience,
    prepare_for_training,
    retrieval_query,
    strip_block,
)
from .pool import (
    ExperiencePool,
    FaissExperiencePool,
    StoreExperiencePool,
    default_embeddings,
    merge_experiences,
)
from .types import Experience

__all__ = [
    "Experience",
    "ExperienceBlock",
    "ExperiencePool",
    "ExtractionResult",
    "Extractor",
    "FaissExperiencePool",
    "LLMExtractor",
    "Navigator",
    "RulesExtractor",
    "StoreExperiencePool",
    "aextract_experiences",
    "create_extraction_node",
    "default_embeddings",
    "epsilon_highs",
    "extract_experiences",
    "format_block",
    "inject_experience",
    "make_extractor",
    "merge_experiences",
    "prepare_for_training",
    "retrieval_query",
    "strip_block",
]
