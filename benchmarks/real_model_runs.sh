#!/usr/bin/env bash
# The issue-42 recipe for SmolLM2-135M-Instruct, end to end (docs/real-model.md §5): a warm start on the
# sft pool, a short validation sweep (learning rate, rollouts per task, LoRA rank), GRPO with dynamic sampling
# on the rl pool for >= 100 steps on 2 seeds, and a paired, seeded evaluation (1 server thread) of the warm
# start and of each committed GRPO adapter on the test pool (>= 75 tasks x 4), recorded in
# benchmarks/results/real_model.json. Test is read once per final run, never by the sweep.
#
# Resumable: each stage skips when its output exists; a killed GRPO run resumes from its newest complete
# checkpoint (resume_from_checkpoint: auto). Start it in the background and rerun the same line after a kill:
#
#   nohup bash benchmarks/real_model_runs.sh > runs/r42.log 2>&1 &
#
# Knobs (environment): R (runs folder), CONFIG (a trainers.grpo YAML: examples/smollm2_cpu.yaml, or
# examples/smollm2_gpu.yaml on a GPU), STEPS, SWEEP_STEPS, SWEEP_POINTS, VAL, SEEDS, EVAL_SEED, TEST_N, EXAMPLES, RL,
# WARM_MINUTES, WARM_EVAL_EVERY, WARM_EVAL_TASKS, TEMPLATE, SYNTH, WARM_COPY, PY. The warm start itself is not resumable (35 minutes): a killed one starts again.
set -euo pipefail
cd "$(dirname "$0")/.."

source benchmarks/real_model_common.sh   # PY R CONFIG STEPS EVAL_SEED TEST_N VAL RL, say, grpo_run, evaluate_on
SWEEP_STEPS=${SWEEP_STEPS:-20}
SEEDS=${SEEDS:-"0 1"}
EXAMPLES=${EXAMPLES:-3000}
SWEEP_POINTS=${SWEEP_POINTS:-"lr1e-4_g8_r16 lr2e-4_g8_r16 lr1e-4_g4_r16"}  # + lr5e-5_g8_r16, lr1e-4_g8_r8 where time allows
WARM_MINUTES=${WARM_MINUTES:-40}
WARM_EVAL_EVERY=${WARM_EVAL_EVERY:-20}   # minutes; each evaluation (HF generate, 8 turns) counts against WARM_MINUTES
WARM_EVAL_TASKS=${WARM_EVAL_TASKS:-16}
TEMPLATE=${TEMPLATE:-compact_doc}   # descriptions and argument types (docs/transfer.md): one warm start for issues 42 and 43
SYNTH=${SYNTH:-0.5}                # share of chats from generated tool domains (trainers/synthetic_domains.py)
WARM_COPY=${WARM_COPY-checkpoints/smollm2-warm-doc}   # a committed warm start of this recipe (step 1)

# 1. warm start on the sft pool (records supervised_tasks.json beside the adapter). The committed one
# (WARM_COPY, trained by this command in session 53) stands in for it in a fresh checkout: the 40 minutes are
# not repeated, and the warm start that issue 43's runs start from is the same everywhere. WARM_COPY= trains anew.
if [ ! -f "$R/warm/warm_start_summary.json" ] && [ -n "$WARM_COPY" ] && [ -f "$WARM_COPY/warm_start_summary.json" ]; then
    say "warm start: the committed $WARM_COPY -> $R/warm"
    mkdir -p "$R" && cp -r "$WARM_COPY" "$R/warm"
fi
if [ ! -f "$R/warm/warm_start_summary.json" ]; then
    say "warm start on sft:$EXAMPLES -> $R/warm"
    $PY -m trainers.warm_start --model smollm2-135m-instruct --template "$TEMPLATE" --out "$R/warm" \
        --minutes "$WARM_MINUTES" --eval-every "$WARM_EVAL_EVERY" --eval-tasks "$WARM_EVAL_TASKS" --no-eval-at-start --lora-r 8 --lora-alpha 16 --lr 1e-3 \
        --examples "$EXAMPLES" --synthetic-share "$SYNTH"
fi
$PY -m trainers.pools recipe --examples "$EXAMPLES" --rl "${RL#rl:}" --test "$TEST_N"   # must print 0, 0

# 2. the validation sweep: one knob at a time around lr 1e-4, 8 rollouts per task, LoRA r 16. The warm start
# is evaluated on validation once (every point's "before" is the same seeded evaluation), each point once
# after its GRPO run, and the two are paired by trainers.paired.
validate() {  # out [adapter]
    evaluate_on "$1" "$VAL" "$R/warm" "${2:-}"
}
validate "$R/eval/val-warm"
sweep_point() {  # name lr generations rank
    grpo_run "$R/sweep/$1" "$R/warm" --seed 0 --max_steps "$SWEEP_STEPS" --learning_rate "$2" --num_generations "$3" \
        --lora_r "$4" --lora_alpha $(($4 * 2)) --eval_before false --eval_after false
    validate "$R/eval/val-$1" "$R/sweep/$1/final"
    [ -f "$R/sweep/$1/paired.json" ] ||
        $PY -m trainers.paired --before "$R/eval/val-warm" --after "$R/eval/val-$1" | tail -1 > "$R/sweep/$1/paired.json"
}
for point in ${SWEEP_POINTS}; do
    IFS=_ read -r lr g r <<< "$point"
    sweep_point "$point" "${lr#lr}" "${g#g}" "${r#r}"
done
# the point with the highest paired validation gain (ties: the higher bound)
read -r LR GENS RANK < <($PY - "$R/sweep" <<'EOF'
import json, sys
from pathlib import Path
points = []
for run in sorted(p for p in Path(sys.argv[1]).iterdir() if (p / "paired.json").is_file()):
    paired = json.loads((run / "paired.json").read_text())
    lr, g, r = run.name.split("_")
    points.append((paired["gain"], paired["lower_bound"], lr[2:], g[1:], r[1:], run.name))
    print(f"sweep {run.name}: validation gain {paired['gain']:+.3f}, 90% lower bound {paired['lower_bound']:+.3f}",
          file=sys.stderr)
best = max(points, key=lambda p: (p[0], p[1]))
(Path(sys.argv[1]) / "chosen.json").write_text(json.dumps({"run": best[5], "gain": best[0], "lower_bound": best[1]}) + "\n")
print(best[2], best[3], best[4])
EOF
)
[ -n "${RANK:-}" ] || { say "no sweep point to choose from"; exit 1; }
say "chosen on validation: lr $LR, $GENS rollouts per task, LoRA r $RANK"

# 3. the final runs, no evaluation inside (the paired one below reads test once per run). The chosen point is
# seed 0's first SWEEP_STEPS steps (same seed, flags and pool; a constant learning rate): seed 0 continues it.
CHOSEN=$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['run'])" "$R/sweep/chosen.json")
for S in $SEEDS; do
    if [ "$S" = 0 ] && [ ! -d "$R/grpo-s0" ] && [ -d "$R/sweep/$CHOSEN/checkpoint-$SWEEP_STEPS" ]; then
        say "seed 0 continues the chosen sweep point $CHOSEN from its step $SWEEP_STEPS"
        mkdir -p "$R/grpo-s0"
        cp -r "$R/sweep/$CHOSEN/checkpoint-$SWEEP_STEPS" "$R/grpo-s0/"
        cp "$R/sweep/$CHOSEN/metrics.jsonl" "$R/grpo-s0/" 2>/dev/null || true
        echo "$R/sweep/$CHOSEN/checkpoint-$SWEEP_STEPS" > "$R/grpo-s0/continued_from.txt"
    fi
    grpo_run "$R/grpo-s$S" "$R/warm" --seed "$S" --max_steps "$STEPS" --learning_rate "$LR" --num_generations "$GENS" \
        --lora_r "$RANK" --lora_alpha $((RANK * 2)) --eval_before false --eval_after false
done

# 4. the warm start replaces the committed one; each final adapter is committed in bf16
if ! cmp -s "$R/warm/adapter_model.safetensors" checkpoints/smollm2-warm/adapter_model.safetensors; then
    say "replacing checkpoints/smollm2-warm with $R/warm"
    rm -rf checkpoints/smollm2-warm && mkdir -p checkpoints/smollm2-warm
    cp "$R/warm"/{adapter_config.json,adapter_model.safetensors,chat_template.jinja,supervised_tasks.json} \
        "$R/warm"/warm_start* checkpoints/smollm2-warm/
fi
for S in $SEEDS; do
    [ -f "checkpoints/smollm2-grpo-s$S/adapter_model.safetensors" ] && continue
    $PY - "$R/grpo-s$S/final" "checkpoints/smollm2-grpo-s$S" <<'EOF'
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
src, dst = map(Path, sys.argv[1:])
dst.mkdir(parents=True, exist_ok=True)
for f in src.iterdir():
    if f.name == "adapter_model.safetensors":
        save_file({k: v.bfloat16().contiguous() for k, v in load_file(f).items()}, dst / f.name)
    elif f.is_file() and f.suffix in (".json", ".jinja", ".md"):
        shutil.copy2(f, dst / f.name)
EOF
done

# 5. paired, seeded evaluation on the test pool (1 server thread), and the record
evaluate() {  # name [adapter]
    evaluate_on "$R/eval/$1" "test:$TEST_N" checkpoints/smollm2-warm "${2:-}"
}
evaluate warm
for S in $SEEDS; do
    evaluate "grpo-s$S" "checkpoints/smollm2-grpo-s$S"
    $PY -m trainers.paired --before "$R/eval/warm" --after "$R/eval/grpo-s$S"
    $PY -m benchmarks.real_model record --arm grpo --seed "$S" --run "$R/grpo-s$S" --before "$R/eval/warm" \
        --after "$R/eval/grpo-s$S" --base checkpoints/smollm2-warm --adapter "checkpoints/smollm2-grpo-s$S" \
        --rl "sandbox:$RL"
done
say "done: benchmarks/results/real_model.json"
