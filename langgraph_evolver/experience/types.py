"""The ``Experience`` value object shared by extraction, the pool and retrieval."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["Experience", "new_experience_id"]


def new_experience_id() -> str:
    return f"exp-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Experience:
    """One distilled lesson: when it applies (embedded for retrieval) and what to do (injected)."""

    id: str = field(default_factory=new_experience_id)
    when_to_use: str
    """The situation it applies to; its embedding is the retrieval key."""
    content: str
    """The advice injected into the prompt."""
    source_trajectory_ids: tuple[str, ...] = ()
    source_task_ids: tuple[str, ...] = ()
    step: int | None = None
    """The training step whose rollouts it was distilled from."""
    score: float = 0.0
    """Validation score at extraction, then updated by use."""
    uses: int = 0
    """Rollouts it was retrieved into."""
    successes: int = 0
    """Of those, rollouts that succeeded (reward 1.0)."""
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    metadata: dict[str, Any] = field(default_factory=dict)

    def with_use(self, succeeded: bool) -> Experience:
        """This experience after one more rollout it guided."""
        return replace(self, uses=self.uses + 1, successes=self.successes + int(succeeded), updated_at=time.time())

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "when_to_use": self.when_to_use,
            "content": self.content,
            "source_trajectory_ids": list(self.source_trajectory_ids),
            "source_task_ids": list(self.source_task_ids),
            "step": self.step,
            "score": self.score,
            "uses": self.uses,
            "successes": self.successes,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Experience:
        return cls(
            id=str(data["id"]),
            when_to_use=data["when_to_use"],
            content=data["content"],
            source_trajectory_ids=tuple(data.get("source_trajectory_ids") or ()),
            source_task_ids=tuple(data.get("source_task_ids") or ()),
            step=data.get("step"),
            score=float(data.get("score", 0.0)),
            uses=int(data.get("uses", 0)),
            successes=int(data.get("successes", 0)),
            created_at=float(data.get("created_at", 0.0)),
            updated_at=float(data.get("updated_at", 0.0)),
            metadata=dict(data.get("metadata") or {}),
        )
