"""The drop-in example trained for 2 GRPO steps on CPU: a ``create_agent`` agent written the LangChain
way (``examples/dropin/agent.py``, two added lines), its own environment, the tiny policy server,
LoRA published after each step, exact token ids, trained rows with nonzero advantages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "examples" / "dropin" / "train.yaml")
AGENT = ROOT / "examples" / "dropin" / "agent.py"


def plumbing_reward(task, final_state, trajectory) -> float:
    """The tiny policy knows only the sandbox, so the library's own checker gives it 0 everywhere; this
    reward (well-formed turns, and answering at all) varies within groups, so advantages are nonzero."""
    steps = trajectory.steps
    if not steps:
        return 0.0
    well_formed = sum(s.error is None for s in steps) / len(steps)
    answered = steps[-1].action.content is not None and not steps[-1].action.tool_calls
    return 0.5 * well_formed + 0.5 * answered


def test_the_agent_module_imports_nothing_of_ours_but_the_dropin_lines():
    ours = ("langgraph_evolver", "trainers", "graphs", "env_tools")
    imports = [line for line in AGENT.read_text().splitlines() if line.startswith(("import ", "from "))]
    lines = [line for line in imports if any(name in line for name in ours)]
    marked = [line for line in AGENT.read_text().splitlines() if "EvolverMiddleware" in line]
    assert len(lines) == 1 and len(marked) == 2, (lines, marked)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_dropin_agent_trains_for_two_steps(tmp_path, capsys):
    from transformers import AutoTokenizer

    from examples.dropin.agent import SYSTEM_PROMPT
    from trainers.grpo import cli

    out = tmp_path / "run"
    figures = cli(["--config", CONFIG, "--output_dir", str(out), "--max_steps", "2", "--eval_limit", "2",
                   "--reward_fn", "tests.test_dropin_train:plumbing_reward", "--save_trajectories", "16"])  # fmt: skip
    assert figures["steps"] == 2 and figures["final_model"] == "tiny-policy-lora-step2"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r["samples/rows"] for r in rows) >= 1, "at least one trained row with a nonzero advantage"
    assert all(r["rollout/failed"] == 0 for r in rows)
    assert rows[1]["policy/sync_s"] > 0  # the step-1 adapter was published and served step 2's rollouts
    gaps = [r["policy/logp_gap_mean"] for r in rows if "policy/logp_gap_mean" in r]
    assert gaps and max(gaps) < 1e-3, gaps  # trainer and endpoint agree on the served weights

    trajectories = [json.loads(x) for x in (out / "trajectories" / "step_00001.jsonl").read_text().splitlines()]
    tokenizer = AutoTokenizer.from_pretrained(ROOT / "checkpoints" / "tiny-policy")
    checked = 0
    for traj in trajectories:
        for step in traj["steps"]:
            assert step["node"] == "model" and step["policy"]  # create_agent's model node, routed to the policy
            assert step["model"] == "tiny-policy-lora-step1"
            prompt = tokenizer.decode(step["transition"]["prompt_ids"])
            assert SYSTEM_PROMPT in prompt and traj["task"]["query"] in prompt and "lend_book" in prompt
            checked += 1
    assert checked >= 4
