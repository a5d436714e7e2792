"""One episode: run *any* LangGraph agent on a task, against a fresh environment, and record it.

The seams (docs/dropin.md):

1. **The agent.** An ``AgentSpec``: a factory ``build(model, tools) -> compiled graph`` (most
   agents have one, or it is one line around their code), or an already compiled graph that
   routes its model with ``EvolverMiddleware`` (``create_agent``) or binds its own tools.
2. **The environment** gives per-rollout tools (``environment_tools``: LangChain tools that
   execute in this rollout's environment instance, so state is fresh per rollout) and the
   reward (``evaluate()``), unless a ``reward(task, final_state, trajectory)`` is given.
3. **The input.** ``to_input(task)`` or ``to_input(task, observation)`` builds the graph's
   input; the default is ``{"messages": [("user", task.query)]}``.
4. **The capture.** A ``TrajectoryRecorder`` (``capture.py``) in the run's callbacks.

What one episode does (``arun_episode``): reset a fresh environment for the task, build the
graph with the policy and the environment's tools, invoke it with the task's input (the live
rollout is reachable from inside the run through ``current_rollout()``, which is how the
middleware finds the policy and the tools), hand the graph's final AI text to the environment as
the answer, score it, and assemble the trajectory. Nothing raises: every failure is recorded
in the trajectory's ``errors`` with what to do about it.

Multi-turn environments answer a final answer with the next user message (``StepResult.messages``,
``done=False``, optionally new ``tools``): the graph is invoked again on its final state plus that
message (``AgentSpec.next_input``; rebuilt first when the tools changed), and ``max_turns`` counts
policy calls per user turn.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.language_models import BaseChatModel

from .agent_spec import AgentSpec
from .capture import TrajectoryRecorder, TurnLimitReached
from .context import ContextTemplate
from .environment import Environment, TaskEnvironmentFactory, load_environment
from .environment_tools import environment_tools
from .rollout import CURRENT, EpisodeHooks, Rollout, guide_hooks
from .tracing import trace_metadata
from .types import Action, Task, Trajectory

__all__ = ["arun_episode"]


def _finish_hint(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, KeyError | TypeError | ValueError) and "messages" in str(exc):
        text += (' (the graph\'s input is built by to_input, default {"messages": [("user", task.query)]}; '
                 "give to_input= / --agent_input for another input shape)")  # fmt: skip
    return text


async def arun_episode(
    agent: AgentSpec,
    task: Task,
    *,
    policy: BaseChatModel | None = None,
    env_factory: TaskEnvironmentFactory | None = None,
    group_id: str = "",
    rollout_index: int = 0,
    trajectory_id: str = "",
    callbacks: list | BaseCallbackManager | None = None,
    max_turns: int | None = None,
    context_template: ContextTemplate | None = None,
    recursion_limit: int = 100,
    require_policy: bool = False,
    train_tool_llm_calls: bool = False,
    capture: bool = True,
    navigator: Any = None,
    guided: bool = False,
    hooks: Sequence[EpisodeHooks] = (),
) -> Trajectory:
    """Run ``agent`` on ``task`` once, against a fresh environment; never raises (see module docstring).

    ``capture=False`` runs without the recorder (the trajectory then has no steps): only for measuring
    what the capture costs (``benchmarks/rollouts.py``). ``hooks`` (``rollout.EpisodeHooks``) take part in
    the run: before it, on every policy prompt, after it. ``guided=True`` with a ``navigator`` adds the
    navigator's hooks (``rollout.guide_hooks``; self-navigating: retrieve experiences for the task, inject
    them into every policy prompt).
    """
    if guided and navigator is not None:
        hooks = (*hooks, guide_hooks(navigator))
    trajectory_id = trajectory_id or f"{group_id or task.id}/{rollout_index}/{os.urandom(4).hex()}"
    recorder = TrajectoryRecorder(max_turns=max_turns, train_tool_llm_calls=train_tool_llm_calls)
    errors: list[str] = []
    started = time.perf_counter()
    state: Any = None
    env = None
    finish: Any = None
    reward: float | None = None
    try:
        env = env_factory(task) if env_factory is not None else load_environment(task.env)
        observation = await env.areset(task)
    except Exception as e:
        errors.append(f"environment reset failed: {type(e).__name__}: {e}")
        traj = recorder.trajectory(task, trajectory_id=trajectory_id, group_id=group_id, rollout_index=rollout_index,
                                   finish_reason="error", errors=errors)  # fmt: skip
        if env is not None:
            await _close(env)
        return traj
    rollout = Rollout(task=task, env=env, observation=observation, tools=[], policy=policy, recorder=recorder,
                      context_template=context_template, sample=rollout_index, hooks=tuple(hooks))  # fmt: skip
    rollout.tools = environment_tools(None, observation.tools)
    await _before_run(rollout, errors)
    config: dict[str, Any] = {
        "callbacks": _with_handler(callbacks, recorder) if capture else callbacks,
        "metadata": trace_metadata(
            task.id,
            group_id,
            rollout_index,
            trajectory_id=trajectory_id,
            **({"experience_ids": list(rollout.experience_ids)} if rollout.experience_ids else {}),
        ),
        "run_name": f"rollout {task.id} #{rollout_index}",
        "recursion_limit": recursion_limit,
        # a graph compiled with a checkpointer needs a thread: each rollout its own (ignored without one)
        "configurable": {"thread_id": trajectory_id},
    }
    token = CURRENT.set(rollout)
    answered = False
    try:
        model = _templated(policy, context_template, agent, rollout)
        graph = agent.graph_for(model, rollout.tools)
        payload = agent.input_for(task, observation)
        while True:
            state = await graph.ainvoke(payload, config)
            answer = recorder.final_text(state)
            if answer is None:
                break
            result = await env.astep(Action(content=answer))
            answered = True
            if result.done or not result.messages:
                break
            answered = False  # a multi-turn environment's next user turn: the rollout goes on
            if result.tools is not None:
                rollout.tools = environment_tools(None, list(result.tools))
                graph = agent.graph_for(model, rollout.tools)
            recorder.start_user_turn()
            payload = agent.next_input(state, result.messages)
    except TurnLimitReached:
        finish = "max_turns"
    except Exception as e:
        if type(e).__name__ == "GraphRecursionError":
            finish = "max_turns"
        else:
            errors.append(f"rollout crashed: {_finish_hint(e)}")
    finally:
        CURRENT.reset(token)
    try:
        if not answered and finish is None and not errors:
            # the graph stopped without answering: on a tool call that did not parse (never handed to the checker
            # as an answer; the step carries the malformed-call penalty), or at its own turn limit
            finish = "malformed_call" if recorder.malformed_ending(state) else "max_turns"
        if capture and not recorder.calls and not errors:
            errors.append("the graph made no LLM call: check that its model is the one the factory receives and "
                          "that to_input gives it a question")  # fmt: skip
        if require_policy and recorder.calls and not recorder.policy_calls and not errors:
            # (after a crash the missing policy call is the crash's doing: its error says what happened)
            models = ", ".join(recorder.summary()["other_models"])
            errors.append(f"this rollout made no call through the policy (its {len(recorder.calls)} LLM calls went "
                          f"to {models}), so it cannot be trained. If the graph routed away from the policy on "
                          "purpose, that is all; if it should have called it, build the graph with the model the "
                          "factory receives, or add EvolverMiddleware() to create_agent(middleware=[...])")  # fmt: skip
        if agent.reward is not None:
            draft = recorder.trajectory(task, final_state=state, trajectory_id=trajectory_id, group_id=group_id,
                                        rollout_index=rollout_index, finish_reason=finish, errors=errors)  # fmt: skip
            scored = agent.reward(task, state, draft)
            reward = float(await scored if inspect.isawaitable(scored) else scored)
        else:
            reward = float(await env.aevaluate())
    except Exception as e:
        errors.append(f"evaluation failed: {type(e).__name__}: {e}")
    finally:
        await _close(env)
    metadata = {"latency_s": round(time.perf_counter() - started, 4), "agent": agent.name,
                **_context_stats(state, rollout), **rollout.metadata}  # fmt: skip
    if recorder.user_turns > 1:
        metadata["user_turns"] = recorder.user_turns
    details = getattr(env, "last_evaluation", None)  # e.g. a benchmark checker's verdict and reason
    if isinstance(details, dict):
        metadata["evaluation"] = details
    trajectory = recorder.trajectory(task, reward=reward, final_state=state, trajectory_id=trajectory_id,
                                     group_id=group_id, rollout_index=rollout_index, finish_reason=finish,
                                     errors=errors, metadata=metadata,
                                     experience_ids=rollout.experience_ids)  # fmt: skip
    for hook in rollout.hooks:
        trajectory = hook.after_run(rollout, trajectory)
    return trajectory


async def _before_run(rollout: Rollout, errors: list[str]) -> None:
    """Each hook's ``before_run`` (its error recorded, the rollout runs on), then its prompt transform."""
    for hook in rollout.hooks:
        error = await hook.before_run(rollout)
        if error is not None:
            errors.append(error)
    rollout.message_transforms = [t for hook in rollout.hooks if (t := hook.message_transform(rollout)) is not None]


def _templated(policy: BaseChatModel | None, template: ContextTemplate | None, agent: AgentSpec,
               rollout: Rollout) -> Any:  # fmt: skip
    """The policy a ``build`` factory receives: one that applies the context template (then the hooks'
    prompt transforms, e.g. the rollout's experience block) on every prompt. Our agent does both itself."""
    transforms = rollout.message_transforms
    if policy is None or agent.applies_context or agent.build is None or (template is None and not transforms):
        return policy
    if not hasattr(policy, "context_template"):
        return policy  # not a PolicyChatModel: only EvolverMiddleware can apply templates to it
    return policy.model_copy(update={"context_template": _then_transforms(template, rollout) if transforms
                                     else template})  # fmt: skip


def _then_transforms(template: ContextTemplate | None, rollout: Rollout) -> ContextTemplate:
    """``template`` followed by the rollout's prompt transforms: what they add survives every template."""

    def transformed(messages: Any) -> list[Any]:
        return rollout.transform(template(messages) if template is not None else list(messages))

    return transformed


def _with_handler(callbacks: Any, recorder: TrajectoryRecorder) -> Any:
    """``callbacks`` (a list, or a node's callback manager: the episode nests in its trace) + the recorder."""
    guard = recorder.turn_limit_guard()  # raises the turn limit beside the other handlers (capture.TurnLimitGuard)
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(recorder, inherit=True)
        manager.add_handler(guard, inherit=True)
        return manager
    return [*(callbacks or []), recorder, guard]


def _context_stats(state: Any, rollout: Rollout) -> dict[str, Any]:
    """Context-management figures: our graph's (in its state) or the middleware's (on the rollout)."""
    stats = (state.get("context_stats") if isinstance(state, dict) else None) or rollout.context_stats
    if not stats:
        return {}
    return {"context": {"steps": len(stats), "invalid": sum(not s.get("valid") for s in stats),
                        "removed": sum(s.get("removed", 0) for s in stats),
                        "compressed": sum(s.get("compressed", 0) for s in stats)}}  # fmt: skip


async def _close(env: Environment) -> None:
    try:
        await env.aclose()
    except Exception:  # closing must not mask the rollout's own outcome
        pass
