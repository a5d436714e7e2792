"""Self-navigating: distil experiences from rollouts, retrieve them to guide new rollouts, strip them
before training (``docs/self-navigating.md``).

- ``extract_experiences`` (+ ``aextract_experiences``, ``create_extraction_node``): from the
  rollouts of one task, an extractor writes ``Experience`` objects (``make_extractor("rules")``
  offline, or any chat model).
- ``FaissExperiencePool`` / ``StoreExperiencePool``: embedded ``when_to_use`` keys, near-duplicate
  merge, use counts, crash-safe persistence; ``default_embeddings()`` is MiniLM, offline.
- ``Navigator``, ``inject_experience``, ``prepare_for_training``, ``epsilon_highs``: retrieval
  into guided rollouts, stripping the injected block before the loss, selective boosting.
- Prompts are in ``prompts.py``; ``LLMExtractor`` takes ``settings=LLMSettings(...)``.

Example:
    >>> import asyncio
    >>> from langgraph_evolver.types import Action, Step, Task, ToolCall, ToolObservation, Trajectory
    >>> call = ToolCall(name="get_balance", id="1")
    >>> solved = Trajectory(id="r", task=Task(id="a", query="How much money do I have?"), reward=1.0, steps=(
    ...     Step(index=0, action=Action(tool_calls=(call,)),
    ...          observations=(ToolObservation(call_id="1", name="get_balance", content="230"),)),
    ...     Step(index=1, action=Action(content="230"))))
    >>> [e.content for e in extract_experiences([solved], "rules").experiences]
    ['Call `get_balance`, then answer from the `get_balance` result.']
    >>> node = create_extraction_node("rules")     # or a chat model: create_extraction_node("openai:gpt-4.1-mini")
    >>> [e["when_to_use"] for e in asyncio.run(node({"trajectories": [solved]}))["experiences"]]
    ['How much money do I have?']
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
    is_guided,
    prepare_for_training,
    retrieval_query,
    retrieved_ids,
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
    "is_guided",
    "make_extractor",
    "merge_experiences",
    "prepare_for_training",
    "retrieval_query",
    "retrieved_ids",
    "strip_block",
]
