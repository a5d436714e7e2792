"""Context-management templates: golden prompts on a recorded 10-turn history, the self-managing
step (valid, invalid, trainable when the manager is the policy), the drop-in paths, and one GRPO
step per template against the tiny policy server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.graph.message import add_messages

from env_tools.sandbox import seed_tasks
from graphs.agent import create_agent_graph
from langgraph_evolver.batch import run_rollouts
from langgraph_evolver.context import (
    SelfManagingTemplate,
    SlidingWindowTemplate,
    amanage_context,
    get_context_template,
    parse_context_action,
    pin,
)
from langgraph_evolver.testing import ScriptedChatModel

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "context_templates.json"
NAMES = ["Ava", "Ben", "Cleo", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivy"]
TEMPLATES = {
    "causal": {},
    "reasoning": {},
    "sliding": {"window": 2},
    "managing": {"manager": "rules", "trigger_tokens": 150, "protect_last": 2},
}


class Recording(ScriptedChatModel):
    """A scripted policy that records every prompt it is sent."""

    prompts: list = []

    def _generate(self, messages, *args, **kwargs):
        self.prompts.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def ten_turn_script() -> list[AIMessage]:
    """Nine lookups (thinking first, one of them malformed) and a final answer: a 10-call episode."""
    script = []
    for i, name in enumerate(NAMES):
        if i == 4:
            script.append(AIMessage('<think>try again</think><tool_call>{"name": "search_contacts", oops'))
            continue
        call = {"name": "search_contacts", "args": {"query": name}, "id": f"call{i}"}
        script.append(AIMessage(f"<think>look up {name}</think>", tool_calls=[call]))
    return [*script, AIMessage("<think>done</think>Found them all.")]


def render(messages: list[BaseMessage]) -> list[str]:
    out = []
    for m in messages:
        text = m.content if isinstance(m.content, str) else m.text
        calls = " ".join(f"{c['name']}({json.dumps(c['args'], sort_keys=True)})" for c in getattr(m, "tool_calls", []))
        out.append(f"{m.type}: {text}" + (f" -> {calls}" if calls else ""))
    return out


def prompts_of(template: str) -> list[list[str]]:
    task = seed_tasks("train")[0]
    model = Recording(ten_turn_script())
    model.prompts = []
    graph = create_agent_graph(model, context_template=template, context_options=TEMPLATES[template], max_turns=12)
    (traj,) = run_rollouts(graph, [task])
    assert len([s for s in traj.steps if s.kind == "action"]) == 10, traj.errors
    return [render(p) for p in model.prompts]


def test_golden_prompts_of_every_template():
    got = {name: prompts_of(name) for name in TEMPLATES}
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    assert got == json.loads(GOLDEN.read_text())


def test_golden_prompts_say_what_each_template_promises():
    golden = json.loads(GOLDEN.read_text())
    causal, reasoning, sliding, managing = (golden[k] for k in ("causal", "reasoning", "sliding", "managing"))
    assert len(causal) == len(reasoning) == len(sliding) == 10
    for i in range(1, 10):  # causal: each prompt extends the previous one
        assert causal[i][: len(causal[i - 1])] == causal[i - 1]
    assert "<think>look up Ava</think>" in causal[-1][2]
    assert all("<think>" not in line for prompt in reasoning for line in prompt[1:])  # thoughts dropped
    assert all(prompt[0].endswith("then act.") for prompt in reasoning)  # the hint
    assert sliding[9][:3] == causal[9][:2] + ["human: [7 earlier turns left out of this prompt]"]
    assert len([line for line in sliding[9] if line.startswith("ai:")]) == 2
    assert sliding[2] == causal[2]  # nothing left out while the window holds
    # managing: the rules manager removed the feedback turn and the dead ends (lookups that found
    # nothing) once they were offered; the protected last turns and the useful results are kept
    feedback = [line for line in causal[9] if line.startswith("human: Error")]
    assert feedback and not any(line in managing[9] for line in feedback)
    assert causal[9].count("tool: []") == 5 and managing[9].count("tool: []") == 1  # only the protected one
    assert [line for line in managing[9] if '"phone"' in line] == [line for line in causal[9] if '"phone"' in line]
    assert len(managing[9]) == len(causal[9]) - 9
    assert managing[2] == causal[2]  # under the trigger nothing changes


def test_managing_edits_as_asked_and_a_malformed_action_edits_nothing():
    history = add_messages([], [
        SystemMessage("sys"), HumanMessage("task"),
        AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "a"}]),
        ToolMessage("long result " * 20, tool_call_id="a"),
        AIMessage("", tool_calls=[{"name": "g", "args": {}, "id": "b"}]), ToolMessage("other", tool_call_id="b"),
        AIMessage("", tool_calls=[{"name": "h", "args": {}, "id": "c"}]), ToolMessage("last", tool_call_id="c"),
    ])  # fmt: skip
    template = SelfManagingTemplate(manager="unused", trigger_tokens=0, protect_last=1)

    async def manage(answer: str):
        return await amanage_context(history, ScriptedChatModel([AIMessage(answer)]), template)

    import asyncio

    edit = asyncio.run(manage('{"m1": "remove", "m4": {"compress": "g said other"}}'))
    assert edit.valid and edit.removed == 1 and edit.compressed == 1 and edit.offered == 4
    after = add_messages(history, edit.updates)
    assert render(after) == ["system: sys", "human: task", 'ai:  -> g({})', "tool: g said other", 'ai:  -> h({})',
                             "tool: last"]  # fmt: skip
    for bad in ("no json", '{"m9": "remove"}', '{"m1": "shrink"}', '["m1"]'):
        edit = asyncio.run(manage(bad))
        assert not edit.valid and edit.updates == [] and edit.error
    with pytest.raises(ValueError, match="unknown message ids"):
        parse_context_action('{"m7": "keep"}', ["m1"])


def test_pinned_messages_survive_every_template():
    experience = pin(SystemMessage("EXPERIENCE: look up the id first"))
    msgs = [SystemMessage("sys"), experience, HumanMessage("task")]
    for i in range(6):
        call = {"name": "f", "args": {}, "id": f"c{i}"}
        msgs += [AIMessage("", tool_calls=[call]), ToolMessage("r", tool_call_id=f"c{i}")]
    msgs = add_messages([], msgs)
    for name, options in (("reasoning", {}), ("sliding", {"window": 1})):
        assert experience.content in [m.content for m in get_context_template(name, **options)(msgs)]
    template = SelfManagingTemplate(trigger_tokens=0, protect_last=0)
    import asyncio

    edit = asyncio.run(amanage_context(msgs, ScriptedChatModel([AIMessage("{}")]), template))
    assert edit.valid and edit.offered == 12  # the pinned block, the system prompt and the task are never offered


def test_invalid_management_is_counted_in_the_trajectory():
    task = seed_tasks("train")[0]
    script = [AIMessage("", tool_calls=[{"name": "get_balance", "args": {}, "id": "g"}])] * 3 + [AIMessage("ok")]
    model = ScriptedChatModel(script)
    manager = ScriptedChatModel([AIMessage("I will keep everything")])
    graph = create_agent_graph(model, context_template="managing",
                               context_options={"manager": manager, "trigger_tokens": 0, "protect_last": 0},
                               max_turns=6)  # fmt: skip
    (traj,) = run_rollouts(graph, [task])
    assert traj.metadata["context"]["steps"] == 3 and traj.metadata["context"]["invalid"] == 3
    kinds = [s.kind for s in traj.steps]
    assert kinds.count("context") == 3 and kinds.count("action") == 4
    assert [s.node for s in traj.steps if s.kind == "context"] == ["manage_context"] * 3


def test_manager_calls_are_trainable_transitions_when_the_manager_is_the_policy(tiny_policy_url):
    from langgraph_evolver import PolicyChatModel
    from langgraph_evolver.scoring import transition_advantages

    policy = PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=48)
    task = next(t for t in seed_tasks("train") if t.metadata["level"] == 3)
    graph = create_agent_graph(policy, context_template="managing",
                               context_options={"manager": "policy", "trigger_tokens": 1}, max_turns=4)  # fmt: skip
    (traj,) = run_rollouts(graph, [task])
    context = [s for s in traj.steps if s.kind == "context"]
    assert context, "the trigger fires after the first tool turn"
    assert all(s.policy and s.transition is not None and s.node == "manage_context" for s in context)
    assert traj.metadata["context"]["steps"] == len(context)
    # under ADCA a management step takes the advantage of the step after it
    advantages = [float(i) for i in range(len(traj.steps))]
    per_call = transition_advantages(traj, advantages)
    for i, step in enumerate(traj.steps):
        if step.kind == "context" and i + 1 < len(traj.steps):
            assert per_call[[s for s in traj.steps if s.transition is not None].index(step)] == advantages[i + 1]


def test_templates_reach_a_create_agent_graph_and_a_factory_graph(tiny_policy_url):
    from langchain.agents import create_agent
    from transformers import AutoTokenizer

    from langgraph_evolver import EvolverMiddleware, PolicyChatModel

    task = seed_tasks("train")[0]
    scripted = Recording([AIMessage("", tool_calls=[{"name": "get_balance", "args": {}, "id": "g"}])] * 4
                         + [AIMessage("done")], metadata={"evolver_policy": True})  # fmt: skip
    scripted.prompts = []
    agent = create_agent(ScriptedChatModel([AIMessage("unused")]), [], middleware=[EvolverMiddleware()])
    run_rollouts(agent, [task], policy=scripted, context_template=SlidingWindowTemplate(window=1))
    assert render(scripted.prompts[-1])[1] == "human: [3 earlier turns left out of this prompt]"

    # a factory graph gets a policy model that applies the template itself
    policy = PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=32)

    def build(model, tools):
        return create_agent(model, tools)

    (traj,) = run_rollouts(build, [task], policy=policy, context_template=get_context_template("reasoning"))
    tokenizer = AutoTokenizer.from_pretrained(ROOT / "checkpoints" / "tiny-policy")
    assert "think briefly" in tokenizer.decode(traj.steps[0].transition.prompt_ids)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("template", ["causal", "reasoning", "sliding", "managing"])
def test_each_template_trains_one_grpo_step(template, tmp_path):
    from langgraph_evolver.types import Trajectory
    from trainers.grpo import cli
    from trainers.samples import trajectory_samples

    options = {"sliding": '{"window": 1}', "managing": '{"manager": "rules", "trigger_tokens": 200}'}.get(template, "")
    out = tmp_path / "run"
    figures = cli(["--config", str(ROOT / "examples" / "quickstart.yaml"), "--output_dir", str(out),
                   "--max_steps", "1", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
                   "--num_generations", "4", "--max_turns", "6", "--level_weights", "1:0,2:0,3:1",
                   "--eval_before", "false", "--eval_after", "false", "--save_strategy", "no", "--report_to", "none",
                   "--context_template", template, *(["--context_options", options] if options else [])])  # fmt: skip
    assert figures["steps"] == 1
    (row,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    trajectories = [Trajectory.from_dict(json.loads(x))
                    for x in (out / "trajectories" / "step_00000.jsonl").read_text().splitlines()]  # fmt: skip
    calls = rows = 0
    for traj in trajectories:
        samples = trajectory_samples(traj, 1.0)
        calls += len(traj.transitions)
        rows += len(samples)
        for sample in samples:  # sampled tokens trained, context tokens (observations, template) masked
            assert len(sample.train_mask) == len(sample.completion_ids) == len(sample.old_logps)
            assert 0 < sample.trained_tokens <= len(sample.completion_ids)
        trained = sum(s.trained_tokens for s in samples)
        assert trained == sum(len(t.completion_ids) for t in traj.transitions)
    assert calls > 0 and row["samples/transitions"] >= row["samples/rows"] >= 0
    if template == "causal":
        assert rows < calls  # prefixes hold: calls merge
    if template == "sliding":
        assert rows > len(trajectories)  # prefixes break once the window slides: more than one row per rollout
    if template == "reasoning":  # the tiny policy writes no thoughts, so its prompts still extend (rows merge)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(ROOT / "checkpoints" / "tiny-policy")
        assert "think briefly" in tokenizer.decode(trajectories[0].transitions[0].prompt_ids)
    if template == "managing":
        assert any(s.kind == "context" for t in trajectories for s in t.steps)
