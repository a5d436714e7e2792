"""The environment service's HTTP boundary: its request and response models (the OpenAPI schema's).

Apart from ``server.py`` (the app, which imports them) so each stays under 600 lines.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

try:  # langsmith's dependency, so normally present
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]


# -- request / response models (the HTTP boundary) -------------------------------------------
class ToolCallModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str = ""


class ActionModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool_calls: list[ToolCallModel] = Field(default_factory=list)
    content: str | None = None


class TaskModel(BaseModel):
    model_config = ConfigDict(extra="ignore")  # tolerate fields added by newer Task versions
    id: str
    query: str
    env: str = "sandbox"
    env_params: dict[str, Any] = Field(default_factory=dict)
    reference_solution: list[ToolCallModel] | None = None
    source: Literal["seed", "synthetic", "trace"] = "seed"
    metadata: dict[str, Any] = Field(default_factory=dict)


def _valid_unicode(data: Any) -> Any:
    """Refuse text that JSON can escape but UTF-8 cannot carry (a lone surrogate such as ``"\\ud800"``).

    The answers quote such text (a reset's observation holds the task's query) and could not be encoded.
    """
    if orjson is not None:
        try:
            orjson.dumps(data)  # the quick check; it also refuses what is fine (integers over 64 bits)
            return data
        except TypeError:
            pass
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError as e:
        bad = e.object[e.start : e.end]
        raise ValueError(f"text must be valid Unicode; the body holds the lone surrogate {bad!a}") from None
    except (TypeError, ValueError):
        pass  # not JSON-shaped: the field validation says what is wrong
    return data


class CreateInstanceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: TaskModel | None = None
    task_id: str | None = None
    split: str = "train"

    _unicode = model_validator(mode="before")(_valid_unicode)

    @model_validator(mode="after")
    def _one_task(self) -> CreateInstanceRequest:
        if (self.task is None) == (self.task_id is None):
            raise ValueError("send exactly one of 'task' (a full task object) or 'task_id' (with optional 'split')")
        return self


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: ActionModel

    _unicode = model_validator(mode="before")(_valid_unicode)


class ObservationModel(BaseModel):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


class CreateInstanceResponse(BaseModel):
    instance_id: str
    observation: ObservationModel


class ToolObservationModel(BaseModel):
    call_id: str
    name: str
    content: str
    is_error: bool = False


class StepResultModel(BaseModel):
    observations: list[ToolObservationModel]
    done: bool
    messages: list[dict[str, Any]] | None = None  # a multi-turn environment's next user turn
    tools: list[dict[str, Any]] | None = None  # the tools from then on, when they change
    score: float | None = None  # with ?evaluate_if_done=true, on the step that ends the episode


class EvaluateResponse(BaseModel):
    score: float


class ReleaseResponse(BaseModel):
    released: str


class HealthResponse(BaseModel):
    status: str
    env: str
    instances: int
    max_instances: int


class TasksResponse(BaseModel):
    tasks: list[dict[str, Any]]
