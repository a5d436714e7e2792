"""The real path: agent graph → PolicyChatModel → CPU policy server (tiny policy) → sandbox.

Checks that each recorded transition holds exactly what the endpoint sampled: the prompt ids
are the tokenization of the chat template over the conversation so far, the completion ids
decode to the model's own output (never re-tokenized), one logprob per id. Also serves the
graph with ``langgraph dev`` and runs it over the LangGraph API.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from env_tools.sandbox import seed_tasks
from graphs.agent import create_agent_graph
from langgraph_evolver.batch import arun_rollouts, run_rollouts
from langgraph_evolver.chat_model import PolicyChatModel
from langgraph_evolver.scoring import well_formed_counts
from langgraph_evolver.tracing import JsonlTracer, build_run_tree, read_runs
from trainers.chat_format import EOS_TOKEN, parse_tool_calls

ROOT = Path(__file__).resolve().parent.parent
TINY_POLICY = ROOT / "checkpoints" / "tiny-policy"


def conversation_before(traj, step_index: int) -> list[dict]:
    """The OpenAI messages the agent sent for step ``step_index`` (rebuilt from the trajectory)."""
    from env_tools.sandbox import SandboxEnvironment

    obs = SandboxEnvironment().reset(traj.task)
    messages = list(obs.messages)
    for step in traj.steps[:step_index]:
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in step.action.tool_calls
        ]
        messages.append({"role": "assistant", "content": step.action.content or "", "tool_calls": calls})
        if calls:
            messages += [{"role": "tool", "tool_call_id": o.call_id, "content": o.content} for o in step.observations]
        else:  # an unparseable tool call: the agent's feedback went back as a user turn
            messages += [{"role": "user", "content": o.content} for o in step.observations]
    return messages, obs.tools


def test_transitions_hold_exact_token_ids_and_logprobs(tiny_policy_url, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TINY_POLICY)
    tasks = [t for t in seed_tasks("test") if t.metadata["level"] == 1][:6]
    policy = PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=96)
    graph = create_agent_graph(policy, max_turns=4)
    with JsonlTracer(tmp_path / "runs.jsonl") as tracer:
        trajs = run_rollouts(graph, tasks, n=2, callbacks=[tracer])
    assert len(trajs) == 12
    checked = 0
    for traj in trajs:
        assert traj.reward is not None and traj.errors == (), traj.errors
        for i, step in enumerate(traj.steps):
            tr = step.transition
            # the version that answered (system_fingerprint): the server's starting weights
            assert tr is not None and tr.model_version == "base"
            assert len(tr.logprobs) == len(tr.completion_ids) > 0
            assert all(-9999.0 <= lp <= 0.0 for lp in tr.logprobs)
            text = tokenizer.decode(list(tr.completion_ids), skip_special_tokens=False)
            if tr.finish_reason != "length":
                assert text.endswith(EOS_TOKEN) and tr.completion_ids[-1] == tokenizer.eos_token_id
            parsed = parse_tool_calls(text.removesuffix(EOS_TOKEN))
            assert [c["function"]["name"] for c in parsed.tool_calls] == [c.name for c in step.action.tool_calls]
            if step.error is None:
                messages, tools = conversation_before(traj, i)
                prompt = tokenizer.apply_chat_template(
                    messages, tools=tools, add_generation_prompt=True, tokenize=False
                )
                assert list(tr.prompt_ids) == tokenizer(prompt, add_special_tokens=False).input_ids
                checked += 1
    assert checked >= 12
    # the tracer saw one tree per rollout, with the LLM calls inside
    trees = build_run_tree(read_runs(tmp_path / "runs.jsonl"))
    assert len(trees) == 12
    assert {tree["extra"]["metadata"]["task_id"] for tree in trees} == {t.id for t in tasks}


def test_one_policy_model_serves_successive_event_loops(tiny_policy_url):
    """A trainer collects rollouts with asyncio.run every step: the second loop must work too."""
    tasks = [t for t in seed_tasks("test") if t.metadata["level"] == 1][:2]
    model = PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=96)
    graph = create_agent_graph(model)
    fds = []
    for _ in range(4):
        trajs = run_rollouts(graph, tasks)
        assert [t.errors for t in trajs] == [(), ()]
        assert all(t.steps[0].transition is not None for t in trajs)
        assert len(model._loop_clients) <= 1  # clients of finished loops are dropped
        gc.collect()
        fds.append(len(os.listdir("/proc/self/fd")))
    assert fds[-1] <= fds[1] + 2, fds  # no sockets pile up run after run


def test_closing_the_client_leaves_no_noise_for_the_next_loop(tiny_policy_url):
    """Clients closed with ``aclose`` before their loop ends are not closed again, on a later loop,
    by the garbage collector (which fails with "Event loop is closed")."""
    import asyncio

    tasks = [t for t in seed_tasks("test") if t.metadata["level"] == 1][:2]
    errors: list = []

    async def flush() -> None:  # let clients left behind by earlier tests fail here, not in our loops
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
        gc.collect()
        await asyncio.sleep(0.05)

    async def one_step() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        model = PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=96)
        try:
            await arun_rollouts(create_agent_graph(model), tasks)
        finally:
            await model.aclose()
        gc.collect()
        await asyncio.sleep(0.05)  # any close task scheduled by a collected client would run (and fail) here

    asyncio.run(flush())
    for _ in range(3):
        asyncio.run(one_step())
    assert errors == []


def test_tiny_policy_makes_well_formed_calls(tiny_policy_url):
    tasks = [t for t in seed_tasks("test") if t.metadata["level"] <= 2][:20]
    graph = create_agent_graph(PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=96))
    trajs = run_rollouts(graph, tasks, n=1, concurrency=20)
    ok, attempts = well_formed_counts(trajs)
    assert attempts >= 20
    assert ok / attempts >= 0.9
    assert any(t.reward == 1.0 for t in trajs)
