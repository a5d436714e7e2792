"""Episode hooks (``rollout.EpisodeHooks``): a mechanism takes part in an episode without the episode naming it.

A hook of the test's own (no experience pool) runs before the run, transforms every policy prompt on each
path a graph can take (our agent, a ``create_agent`` agent with ``EvolverMiddleware``, a factory graph) and
replaces the finished trajectory; and the rollout core imports no mechanism, not even for annotations.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, SystemMessage

from env_tools.sandbox import seed_tasks
from graphs.agent import reference_agent
from langgraph_evolver.batch import run_rollouts
from langgraph_evolver.rollout import EpisodeHooks, current_rollout, guide_hooks

ROOT = Path(__file__).resolve().parent.parent
CORE = ["episode", "middleware", "environment_tools", "capture", "chat_model", "rollout", "transitions", "batch"]
MECHANISMS = ("experience", "questioning", "attribution")


class Stamp(EpisodeHooks):
    """Stamps every system prompt with the task's id; records what it saw."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def before_run(self, rollout):
        rollout.extras["stamp"] = f"STAMP-{rollout.task.id}"
        rollout.metadata["stamped"] = True
        return "stamp: a note for the trajectory"

    def message_transform(self, rollout):
        stamp = rollout.extras["stamp"]

        def transform(messages):
            out = list(messages)
            first = out[0] if out else None
            if isinstance(first, SystemMessage):
                return [SystemMessage(f"{first.content}\n{stamp}"), *out[1:]]
            return [SystemMessage(stamp), *out]

        return transform

    def after_run(self, rollout, trajectory):
        return replace(trajectory, metadata={**trajectory.metadata, "after_run": rollout.task.id})


@pytest.fixture()
def task():
    return next(t for t in seed_tasks("train") if t.metadata["template"] == "wallet_balance")


def _policy(seen: list[str]):
    from langgraph_evolver.testing import ScriptedChatModel

    class Recording(ScriptedChatModel):
        context_template: Any = None  # as PolicyChatModel's: what a factory graph's policy applies per prompt

        async def _agenerate(self, messages, *args, **kwargs):
            messages = self.context_template(messages) if self.context_template is not None else messages
            seen.append(str(messages[0].content))
            return await super()._agenerate(messages, *args, **kwargs)

    return Recording([AIMessage("I do not know.")] * 4)


def _agents():
    from langchain.agents import create_agent

    from langgraph_evolver import EvolverMiddleware
    from langgraph_evolver.testing import ScriptedChatModel

    def build(model, tools):
        return create_agent(model, tools, system_prompt="You help.")

    routed = create_agent(ScriptedChatModel([AIMessage("unused")]), [], system_prompt="You help.",
                          middleware=[EvolverMiddleware()])  # fmt: skip
    return {"reference": reference_agent(), "create_agent": routed, "factory": build}


@pytest.mark.parametrize("which", ["reference", "create_agent", "factory"])
def test_hooks_run_before_on_every_prompt_and_after(task, which):
    seen: list[str] = []
    (traj,) = run_rollouts(_agents()[which], [task], policy=_policy(seen), hooks=[Stamp()])
    assert seen and all(f"STAMP-{task.id}" in prompt for prompt in seen), seen
    assert "stamp: a note for the trajectory" in traj.errors
    assert traj.metadata["stamped"] is True and traj.metadata["after_run"] == task.id
    plain: list[str] = []
    run_rollouts(_agents()[which], [task], policy=_policy(plain))
    assert plain and not any("STAMP" in prompt for prompt in plain)
    assert current_rollout() is None  # the context variable is reset after the run


def test_a_navigator_without_a_registered_guide_says_what_to_do(monkeypatch):
    from langgraph_evolver import rollout
    from langgraph_evolver.errors import ConfigError

    monkeypatch.setattr(rollout, "_GUIDE", [])
    with pytest.raises(ConfigError, match="import langgraph_evolver.experience"):
        guide_hooks(object())


def _imports(path: Path) -> list[str]:
    """Every module an import of ``path`` names, annotation-only (TYPE_CHECKING) and lazy ones included."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names += [f"{'.' * node.level}{node.module or ''}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


@pytest.mark.parametrize("module", CORE)
def test_the_rollout_core_imports_no_mechanism(module):
    found = [n for n in _imports(ROOT / "langgraph_evolver" / f"{module}.py")
             if any(f".{m}." in f".{n.lstrip('.')}." or n.lstrip(".").startswith(m) for m in MECHANISMS)]  # fmt: skip
    assert not found, f"langgraph_evolver/{module}.py imports a mechanism: {found}"
