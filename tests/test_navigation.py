"""Self-navigating through rollouts and training: retrieval, injection, stripping, keep mode,
selective boosting, hybrid groups, the trainer's pool (training rollouts only), and the paths of
the drop-in (create_agent middleware, factory graphs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from env_tools.sandbox import seed_tasks
from graphs.agent import reference_agent
from langgraph_evolver.advantages import group_advantages
from langgraph_evolver.batch import run_rollouts
from langgraph_evolver.experience import (
    Experience,
    FaissExperiencePool,
    Navigator,
    epsilon_highs,
    inject_experience,
    prepare_for_training,
)
from langgraph_evolver.experience.navigate import is_guided, retrieved_ids
from tests.test_experience_pool import HashEmbeddings

ROOT = Path(__file__).resolve().parent.parent
ADVICE = "call get_balance before you answer"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ROOT / "checkpoints" / "tiny-policy")


@pytest.fixture()
def task():
    return next(t for t in seed_tasks("train") if t.metadata["template"] == "wallet_balance")


@pytest.fixture()
def navigator(task):
    pool = FaissExperiencePool(HashEmbeddings())
    pool.add([Experience(id="exp-balance", when_to_use=task.query, content=ADVICE)])
    return Navigator(pool, top_k=3)


def follower(tokenizer, task):
    """A policy that follows the retrieved advice (calls get_balance, then answers) and otherwise guesses."""
    from trainers.scripted import TokenizedScriptedModel

    def respond(messages):
        guided = ADVICE in str(messages[0].content)
        if guided and not any(isinstance(m, AIMessage) for m in messages):
            return AIMessage("", tool_calls=[{"name": "get_balance", "args": {}, "id": "g"}])
        return AIMessage(str(task.metadata["answer"]) if guided else "I do not know.")

    return TokenizedScriptedModel(tokenizer=tokenizer, respond=respond, metadata={"evolver_policy": True})


def test_inject_appends_to_the_system_prompt_and_pins_it():
    from langgraph_evolver.context import get_context_template, is_pinned
    from langgraph_evolver.experience import ExperienceBlock

    block = ExperienceBlock(ids=("e1",), text="Experience: do X")
    out = inject_experience([SystemMessage("sys"), HumanMessage("task")], block)
    assert out[0].content == "sys\n\nExperience: do X" and is_pinned(out[0])
    assert [m.content for m in inject_experience([HumanMessage("task")], block)] == ["Experience: do X", "task"]
    assert inject_experience([HumanMessage("task")], None)[0].content == "task"
    assert get_context_template("sliding", window=1)(out)[0].content == out[0].content


def test_guided_rollouts_beat_unguided_ones_and_training_strips_and_boosts(tokenizer, task, navigator):
    """Retrieval → injection → rewards → GRPO advantages → stripping → boosting, on one group."""
    policy = follower(tokenizer, task)
    trajs = run_rollouts(reference_agent(), [task], n=4, policy=policy, navigator=navigator,
                         guided=[True, True, False, False])  # fmt: skip
    guided, unguided = trajs[:2], trajs[2:]
    assert all(t.experience_ids == ("exp-balance",) for t in guided) and all(not t.experience_ids for t in unguided)
    for t in trajs:  # the one reading, on a trajectory and on its JSON form alike
        assert is_guided(t) == is_guided(t.to_dict()) == (t in guided)
        assert retrieved_ids(t) == retrieved_ids(t.to_dict()) == t.experience_ids
    assert min(t.reward for t in guided) > max(t.reward for t in unguided)
    assert all(ADVICE in tokenizer.decode(t.transitions[0].prompt_ids) for t in guided)

    adv = group_advantages([t.reward for t in trajs], [t.group_id for t in trajs]).advantages
    prepared = prepare_for_training(trajs, tokenizer, mode="strip")
    assert prepared.guided == 2 and prepared.stripped == 4 and prepared.strip_failed == 0
    for before, after in zip(guided, prepared.trajectories[:2], strict=True):
        for old, new in zip(before.transitions, after.transitions, strict=True):
            assert ADVICE not in tokenizer.decode(new.prompt_ids)
            assert new.completion_ids == old.completion_ids and new.logprobs == old.logprobs  # untouched
            start, end = new.experience_span
            assert ADVICE in tokenizer.decode(old.prompt_ids[start:end])
        # the stripped first prompt is exactly the prompt an unguided rollout of the task was sent
        assert after.transitions[0].prompt_ids == unguided[0].transitions[0].prompt_ids
    for traj, a in zip(prepared.trajectories, adv, strict=True):
        eps = epsilon_highs(traj, a, epsilon_high=0.28, boost=0.6)
        assert eps == [0.6 if traj.experience_ids and a > 0 else 0.28] * len(traj.transitions)
    assert prepare_for_training(trajs, tokenizer, mode="keep").trajectories == trajs  # keep keeps


def test_boosting_needs_a_nonempty_retrieval(tokenizer, task):
    empty = Navigator(FaissExperiencePool(HashEmbeddings()), top_k=3)
    (traj,) = run_rollouts(reference_agent(), [task], policy=follower(tokenizer, task), navigator=empty, guided=[True])
    assert traj.metadata["experience"] == {"guided": True, "ids": [], "text": ""} and not traj.experience_ids
    assert is_guided(traj) and retrieved_ids(traj) == ()  # guided, nothing retrieved
    assert epsilon_highs(traj, 1.0, epsilon_high=0.28, boost=0.6) == [0.28] * len(traj.transitions)
    assert prepare_for_training([traj], tokenizer).trajectories == [traj]


def test_a_failed_retrieval_is_recorded_and_the_rollout_runs_unguided(tokenizer, task):
    class Broken:
        async def ablock_for(self, task, observation=None):
            raise RuntimeError("pool offline")

    (traj,) = run_rollouts(reference_agent(), [task], policy=follower(tokenizer, task), navigator=Broken(),
                           guided=[True])  # fmt: skip
    assert "experience retrieval failed (rollout unguided): RuntimeError: pool offline" in traj.errors
    assert is_guided(traj) and retrieved_ids(traj) == ()
    assert all(ADVICE not in tokenizer.decode(t.prompt_ids) for t in traj.transitions)
    assert epsilon_highs(traj, 1.0, epsilon_high=0.28, boost=0.6) == [0.28] * len(traj.transitions)


def test_the_block_reaches_create_agent_and_factory_graphs(tokenizer, task, navigator):
    from langchain.agents import create_agent

    from env_tools.sandbox.apps import tool_schema
    from langgraph_evolver import EvolverMiddleware, environment_tools
    from langgraph_evolver.testing import ScriptedChatModel

    tools = environment_tools(None, [tool_schema("get_balance")])  # routed to each rollout's sandbox
    agent = create_agent(ScriptedChatModel([AIMessage("unused")]), tools, system_prompt="You help.",
                         middleware=[EvolverMiddleware()])  # fmt: skip
    (traj,) = run_rollouts(agent, [task], policy=follower(tokenizer, task), navigator=navigator, guided=[True])
    assert traj.reward == 1.0 and "You help." in tokenizer.decode(traj.transitions[0].prompt_ids)

    def build(model, tools):  # a factory graph: the policy it receives injects the block itself
        return create_agent(model, tools, system_prompt="You help.")

    (traj,) = run_rollouts(build, [task], policy=follower(tokenizer, task), navigator=navigator, guided=[True])
    assert traj.reward == 1.0 and ADVICE in tokenizer.decode(traj.transitions[0].prompt_ids)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_trainer_builds_its_pool_from_training_rollouts_only(tmp_path):
    from langgraph_evolver.experience import FaissExperiencePool, default_embeddings
    from trainers.grpo import cli

    out = tmp_path / "run"
    nav = json.dumps({"eta": 0.5, "update_every": 1})
    figures = cli(["--config", str(ROOT / "examples" / "quickstart.yaml"), "--output_dir", str(out),
                   "--max_steps", "2", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
                   "--num_generations", "4", "--max_turns", "5", "--level_weights", "1:0,2:1,3:1",
                   "--eval_limit", "4", "--eval_k", "1", "--save_strategy", "no", "--report_to", "none",
                   "--navigation", nav])  # fmt: skip
    assert figures["steps"] == 2
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    assert [r["navigation/guided_share"] for r in rows] == [0.5, 0.5]
    assert rows[1]["navigation/pool_size"] >= 1 and rows[1]["navigation/strip_failed"] == 0
    pool = FaissExperiencePool.load(out / "experience_pool", default_embeddings())
    train_ids = {t.id for t in seed_tasks("train")}
    test_ids = {t.id for t in seed_tasks("test")}
    sources = {task_id for e in pool.all() for task_id in e.source_task_ids}
    assert sources and sources <= train_ids and not sources & test_ids  # no held-out leakage
    step1 = [json.loads(x) for x in (out / "trajectories" / "step_00001.jsonl").read_text().splitlines()]
    assert any(t["experience_ids"] for t in step1), "step 2's guided rollouts retrieved from step 1's pool"


# -- optional LLM rerank and rewrite ----------------------------------------------------------------


def _two_hit_navigator(task, rewriter):
    pool = FaissExperiencePool(HashEmbeddings())
    other = Experience(id="exp-other", when_to_use=task.query + " today", content="say hello first")
    pool.add([Experience(id="exp-balance", when_to_use=task.query, content=ADVICE), other], merge=False)
    return Navigator(pool, top_k=2, rewriter=rewriter, rewrite_retries=1)


async def test_the_rewriter_reranks_drops_and_rewrites_into_one_block(task, tokenizer):
    from langgraph_evolver.experience.navigate import BLOCK_HEADER, parse_rewrite
    from tests.test_attribution import ScriptedJudgeModel

    assert parse_rewrite("KEEP: 2, 1, 9\nADVICE:\n- do x", 2) == ([1, 0], "- do x")
    assert parse_rewrite("**KEEP**: none", 2) == ([], "")
    assert parse_rewrite("I would keep the first one", 2) is None

    model = ScriptedJudgeModel(["KEEP: 1\nADVICE:\n- Call get_balance before answering."])
    nav = _two_hit_navigator(task, model)
    block = await nav.ablock_for(task)
    plain = await Navigator(nav.pool, top_k=2).ablock_for(task)
    kept = plain.ids[0]  # the experience listed first in the rewriter's prompt
    assert block.ids == (kept,) and block.text == f"{BLOCK_HEADER}\n- Call get_balance before answering."
    prompt = model.log.calls[0][0].content
    assert task.query in prompt and "1. When" in prompt and "2. When" in prompt
    assert await nav.ablock_for(task) is block and len(model.log.calls) == 1  # cached per query and pool version
    # the rewritten block is what is injected, so stripping removes exactly it
    from langgraph_evolver.experience import strip_block
    from langgraph_evolver.types import Transition

    text = tokenizer.apply_chat_template([{"role": "system", "content": "sys\n\n" + block.text}], tokenize=False)
    ids = tokenizer(text, add_special_tokens=False).input_ids
    stripped = strip_block(Transition(prompt_ids=tuple(ids), completion_ids=(1,), logprobs=(0.0,)), block, tokenizer)
    assert stripped is not None and "get_balance" not in tokenizer.decode(list(stripped.prompt_ids))


async def test_a_failed_rewrite_falls_back_to_the_plain_block_and_none_kept_is_unguided(task):
    from tests.test_attribution import ScriptedJudgeModel

    broken = _two_hit_navigator(task, ScriptedJudgeModel([RuntimeError("down")]))
    block = await broken.ablock_for(task)
    assert block is not None and len(block.ids) == 2 and broken.stats.rewrite_fallbacks == 1

    picky = _two_hit_navigator(task, ScriptedJudgeModel(["KEEP: none"]))
    assert await picky.ablock_for(task) is None and picky.stats.dropped_by_rewrite == 1
