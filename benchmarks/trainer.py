"""Training-path speed of ``EvolverGRPOTrainer`` against a plain TRL ``GRPOTrainer``, and what merging saves.

    python benchmarks/trainer.py            # ~4 min on 2 cores
    python benchmarks/trainer.py --quick    # ~1 min

1. Records real rollouts once: the committed tiny policy (``checkpoints/tiny-policy``) behind the
   local policy server, ``k`` samples of sandbox train tasks of the hardest level (3).
2. Times optimizer steps of three trainers replaying those recordings (generation excluded),
   LoRA (the quickstart's adapter) on the same tiny model, same config (beta=0, dapo, fp32, no
   gradient checkpointing, ``num_generations``, ``gradient_accumulation_steps``), one torch thread
   (on 2 shared cores, two threads spin-wait on each other whenever another process runs):

   - ``trl``: ``GRPOTrainer`` with a ``rollout_func`` returning every LLM call of the chosen groups
     as one single-turn row (prompt ids, completion ids, behaviour logprobs) and a reward function
     returning the recorded reward of its rollout;
   - ``ours``: ``EvolverGRPOTrainer`` whose ``_run_rollouts`` returns the recorded trajectories,
     ``merge_prefix_transitions=False``: one row per call, exactly the rows TRL trains on;
   - ``ours_merged``: the same with merging (the default): fewer rows, fewer tokens.

   Every optimizer step consumes all chosen groups, so each variant trains on the same tokens
   every step. ``per_device_train_batch_size`` counts rollouts for ours and rows for TRL; both
   are set so that a micro-batch holds the same rows. Groups are chosen so that every rollout has
   a non-zero advantage (ours drops no row); TRL's rows are dealt into groups of ``k`` whose
   rewards differ. The last call(s) of the longest rollout may be left out so that the calls
   divide into TRL's batches. Time per step: median of the intervals between optimizer steps
   after one warm-up step, over interleaved rounds (wall and CPU time).
3. ``merged_token_ratio``: tokens (prompt + completion, summed over rows) of the longest recorded
   causal trajectories (10 calls when any reached ``max_turns``) with merging over without.

Ends with one JSON line: ``step_time_ratio_vs_trl`` (ours unmerged / trl, same tokens; target
<= 1.15), ``step_time_ratio_vs_trl_merged``, ``merged_token_ratio``, per-variant ``*_step_ms``,
``*_row_tokens_per_step`` (real tokens), ``*_padded_tokens_per_step`` (what the model computes:
ours groups rows of similar length into a micro-batch, TRL shuffles them), ``*_prepare_cpu_ms``
(per step outside the model: replay, rows, padding), ``*_zero_variance_share``, ``same_tokens``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from langgraph_evolver.types import Trajectory  # noqa: E402

LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PENALTY = 0.1  # malformed_call_penalty (the default)


def record(model_path: str, n_tasks: int, k: int) -> list[Trajectory]:
    from langgraph_evolver.environment import load_environment
    from trainers.evaluate import evaluate_endpoint
    from trainers.serving import PolicyServerProcess

    env = load_environment("sandbox")
    tasks = env.list_tasks("train")
    env.close()
    top = max(t.metadata.get("level", 1) for t in tasks)  # the hardest level: rollouts differ most and run longest
    hardest = [t for t in tasks if t.metadata.get("level", 1) == top]
    picked = hardest[:: max(1, len(hardest) // n_tasks)][:n_tasks]
    with PolicyServerProcess(model_path) as server:
        return asyncio.run(evaluate_endpoint(picked, base_url=server.base_url, model=server.model_name, k=k,
                                             progress=False))  # fmt: skip


def choose_groups(trajs: list[Trajectory], max_tokens: int, mult: int, penalty: float) -> dict[str, list[Trajectory]]:
    """The smallest groups (tasks) whose every rollout has a non-zero advantage, as many as fit in ``max_tokens``
    (unmerged; at least one); calls trimmed to a multiple of ``mult``."""
    from langgraph_evolver.advantages import group_advantages
    from langgraph_evolver.scoring import shaped_reward

    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_task[t.task.id].append(t)
    valid = []
    for task_id, group in by_task.items():
        adv = group_advantages([shaped_reward(t, penalty) for t in group], [task_id] * len(group))
        if all(a is not None and a != 0.0 for a in adv.advantages):
            valid.append((sum(len(tr.prompt_ids) + len(tr.completion_ids) for t in group for tr in t.transitions),
                          task_id))  # fmt: skip
    if not valid:
        raise SystemExit(f"none of the {len(by_task)} recorded groups has a non-zero advantage for every rollout: "
                         "record more tasks (--tasks).")  # fmt: skip
    chosen, total = {}, 0
    for tokens, task_id in sorted(valid):  # step time grows faster than tokens (padding to the longest row)
        if chosen and total + tokens > max_tokens:
            break
        chosen[task_id], total = list(by_task[task_id]), total + tokens
    extra = sum(len(t.transitions) for g in chosen.values() for t in g) % mult
    if extra:  # drop the last calls' transitions, not the steps: the shaped reward keeps its malformed calls
        task_id, i = max(((tid, i) for tid, g in chosen.items() for i in range(len(g))),
                         key=lambda ti: len(chosen[ti[0]][ti[1]].transitions))  # fmt: skip
        traj = chosen[task_id][i]
        with_ids = [j for j, s in enumerate(traj.steps) if s.transition is not None][-extra:]
        steps = tuple(dataclasses.replace(s, transition=None) if j in with_ids else s for j, s in enumerate(traj.steps))
        chosen[task_id][i] = dataclasses.replace(traj, steps=steps)
    return chosen


def step_timer():  # noqa: ANN201
    """A callback noting wall and CPU time at the end of every optimizer step (and at the start of training),
    and the share of zero-variance groups each step logs."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[tuple[float, float]] = []
            self.zero_std: list[float] = []

        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            self.marks = [(time.perf_counter(), time.process_time())]

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            self.marks.append((time.perf_counter(), time.process_time()))

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201
            if logs and "frac_reward_zero_std" in logs:
                self.zero_std.append(logs["frac_reward_zero_std"])

        def steps_s(self) -> list[tuple[float, float]]:
            """(wall, CPU) seconds per optimizer step, the first (warm-up) left out."""
            return [(b[0] - a[0], b[1] - a[1]) for a, b in zip(self.marks[1:], self.marks[2:], strict=False)]

    return StepTimer()


def run_variant(variant: str, groups: dict[str, list[Trajectory]], *, model_path: str, ga: int, k: int,
                steps: int, out: str) -> tuple[list[tuple[float, float]], dict[str, float]]:  # fmt: skip
    """Train ``steps`` + 1 optimizer steps of one variant; returns (wall, CPU) seconds per step after the warm-up
    step, and what one step trained on."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from langgraph_evolver.scoring import shaped_reward
    from trainers.config import EvolverGRPOConfig
    from trainers.grpo_trainer import EvolverGRPOTrainer
    from trainers.training_tasks import task_dataset

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    lora = LoraConfig(r=32, lora_alpha=64, lora_dropout=0.0, target_modules=LORA_MODULES, task_type="CAUSAL_LM")
    trajs = [t for g in groups.values() for t in g]
    calls = sum(len(t.transitions) for t in trajs)
    common = dict(output_dir=out, num_generations=k, gradient_accumulation_steps=ga, max_steps=steps + 1,
                  learning_rate=2e-3, lr_scheduler_type="constant", beta=0.0, loss_type="dapo", epsilon=0.2,
                  epsilon_high=0.28, temperature=1.0, max_completion_length=128, activation_checkpointing=False,
                  bf16=False, report_to="none", logging_steps=1, save_strategy="no", disable_tqdm=True, seed=0,
                  remove_unused_columns=False)  # fmt: skip
    timer = step_timer()
    counted: Counter = Counter()

    if variant == "trl":
        # Every call one row; rows dealt by reward into groups of k so that each group's rewards differ.
        rows = sorted(((tr, shaped_reward(t, PENALTY)) for t in trajs for tr in t.transitions), key=lambda x: x[1])
        n = len(rows) // k
        pseudo = {f"row{c}": rows[c::n] for c in range(n)}

        def replay(prompts: list, trainer: object) -> dict:
            seen: Counter = Counter()
            picked = []
            for p in prompts:
                picked.append(pseudo[p][seen[p]])
                seen[p] += 1
            return {"prompt_ids": [list(tr.prompt_ids) for tr, _ in picked],
                    "completion_ids": [list(tr.completion_ids) for tr, _ in picked],
                    "logprobs": [list(tr.logprobs) for tr, _ in picked],
                    "recorded_reward": [r for _, r in picked]}  # fmt: skip

        def recorded_reward(prompts: list, completions: list, recorded_reward: list, **kwargs: object) -> list:
            return recorded_reward

        cfg = GRPOConfig(per_device_train_batch_size=calls // ga, **common)
        trainer = GRPOTrainer(model=model, reward_funcs=[recorded_reward], args=cfg, processing_class=tokenizer,
                              train_dataset=Dataset.from_list([{"prompt": key} for key in pseudo]),
                              peft_config=lora, rollout_func=replay, callbacks=[timer])  # fmt: skip
    else:

        class Replayed(EvolverGRPOTrainer):
            def _run_rollouts(self, items: list) -> list[Trajectory]:
                return [dataclasses.replace(groups[task.id][i], group_id=gid) for task, gid, i in items]

        cfg = EvolverGRPOConfig(per_device_train_batch_size=len(trajs) // ga, merge_prefix_transitions=variant ==
                                "ours_merged", malformed_call_penalty=PENALTY, **common)  # fmt: skip
        trainer = Replayed(model, cfg, task_dataset([g[0].task for g in groups.values()]), processing_class=tokenizer,
                           peft_config=lora, policy=None, policy_base_url="", callbacks=[timer])  # fmt: skip
    for cb in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(cb)
    loss = trainer._compute_loss

    def counting_loss(model: object, inputs: dict) -> object:
        mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        real = int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
        counted.update(rows=int((mask.sum(1) > 0).sum()), trained_tokens=int(mask.sum()), row_tokens=real,
                       padded_tokens=inputs["prompt_ids"].numel() + inputs["completion_ids"].numel(),
                       micro_batches=1)  # fmt: skip
        return loss(model, inputs)

    prepare, prep_s = trainer._generate_and_score_completions, []

    def timed_prepare(inputs: list) -> object:  # replay + building the padded micro-batches: no model call
        t0 = time.process_time()
        out = prepare(inputs)
        prep_s.append(time.process_time() - t0)
        return out

    trainer._compute_loss, trainer._generate_and_score_completions = counting_loss, timed_prepare
    trainer.train()
    per_step: dict[str, float] = {f"{key}_per_step": value // (steps + 1) for key, value in counted.items()}
    per_step["prepare_cpu_ms"] = round(1000 * statistics.median(prep_s[1:] or prep_s), 1)
    per_step["zero_variance_share"] = round(statistics.fmean(timer.zero_std), 3) if timer.zero_std else -1.0
    return timer.steps_s(), per_step


def merged_token_ratio(trajs: list[Trajectory]) -> dict[str, float]:
    from trainers.samples import trajectory_samples

    turns = max(len(t.transitions) for t in trajs)
    longest = [t for t in trajs if len(t.transitions) == turns]
    merged = sum(len(s) for t in longest for s in trajectory_samples(t, 1.0, merge=True))
    unmerged = sum(len(s) for t in longest for s in trajectory_samples(t, 1.0, merge=False))
    rows = sum(len(trajectory_samples(t, 1.0, merge=True)) for t in longest)
    return {"merged_token_ratio": round(merged / unmerged, 4), "merged_ratio_turns": turns,
            "merged_ratio_trajectories": len(longest), "merged_ratio_rows_merged": rows,
            "merged_ratio_tokens": [merged, unmerged]}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--model", default=str(ROOT / "checkpoints" / "tiny-policy"))
    p.add_argument("--tasks", type=int, default=None, help="train tasks to record (default 24, quick 12)")
    p.add_argument("--k", type=int, default=4, help="num_generations = rollouts recorded per task")
    p.add_argument("--max-tokens", type=int, default=None, help="unmerged tokens per step (default 16000, quick 8000)")
    p.add_argument("--ga", type=int, default=2, help="gradient_accumulation_steps")
    p.add_argument("--steps", type=int, default=None, help="timed steps per variant and round (default 5, quick 4)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds of the variants (default 3, quick 2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the trainers")
    args = p.parse_args()
    n_tasks, max_tokens = args.tasks or (12 if args.quick else 24), args.max_tokens or (8000 if args.quick else 16000)
    steps, rounds = args.steps or (4 if args.quick else 5), args.rounds or (2 if args.quick else 3)
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    trajs = record(args.model, n_tasks, args.k)
    record_s = time.perf_counter() - started
    print(f"recorded {len(trajs)} rollouts in {record_s:.0f} s", file=sys.stderr)
    figures: dict = {"rollouts_recorded": len(trajs), "record_s": round(record_s, 1), **merged_token_ratio(trajs)}
    groups = choose_groups(trajs, max_tokens, math.lcm(args.k, args.ga), penalty=PENALTY)
    if len(groups) * args.k % args.ga:
        raise SystemExit("groups x k must be a multiple of --ga: pick --k and --ga so that --ga divides --k.")
    chosen = [t for g in groups.values() for t in g]
    figures.update(groups_per_step=len(groups), rollouts_per_step=len(chosen), k=args.k, ga=args.ga,
                   calls_per_step=sum(len(t.transitions) for t in chosen))  # fmt: skip
    times: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for variant in ("trl", "ours", "ours_merged"):
                step_s, counts = run_variant(variant, groups, model_path=args.model, ga=args.ga, k=args.k,
                                             steps=steps, out=f"{tmp}/{variant}")  # fmt: skip
                times[variant] += step_s
                print(f"round {r}: {variant} {[round(1000 * w) for w, _ in step_s]} ms {counts}", file=sys.stderr)
                figures.update({f"{variant}_{key}": value for key, value in counts.items()})
    figures["same_tokens"] = all(figures[f"trl_{key}_per_step"] == figures[f"ours_{key}_per_step"]
                                 for key in ("rows", "trained_tokens", "row_tokens"))  # fmt: skip
    for variant, values in times.items():
        figures[f"{variant}_step_ms"] = round(1000 * statistics.median(w for w, _ in values), 1)
        figures[f"{variant}_step_cpu_ms"] = round(1000 * statistics.median(c for _, c in values), 1)
        figures[f"{variant}_step_ms_all"] = [round(1000 * w) for w, _ in values]
    for suffix, ours in (("", "ours"), ("_merged", "ours_merged")):
        figures[f"step_time_ratio_vs_trl{suffix}"] = round(figures[f"{ours}_step_ms"] / figures["trl_step_ms"], 3)
        figures[f"step_cpu_ratio_vs_trl{suffix}"] = round(figures[f"{ours}_step_cpu_ms"] / figures["trl_step_cpu_ms"],
                                                          3)  # fmt: skip
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
