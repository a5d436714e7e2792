#!/usr/bin/env bash
# The three mechanisms on the real model (issue 42, item 6), after benchmarks/real_model_runs.sh: each arm is
# one GRPO run (seed 0) with the settings chosen on validation ($R/sweep/chosen.json), started from the same
# warm start on the same rl pool, and judged like the GRPO arm: a paired, seeded evaluation on test:$TEST_N x 4
# against the warm start, recorded in benchmarks/results/real_model.json.
#
#   adca         the reference judge (alpha 0.1); checkpoints every CHECK_EVERY steps are evaluated on
#                validation, and the first one to reach the GRPO arm's final validation score gives
#                steps_to_grpo_final / STEPS ($R/adca-s0/steps_to_grpo.json; the goal is <= 0.6)
#   navigation   self-navigating: half of each group guided by the run's own experience pool, the advice
#                stripped before training; guided vs unguided reward per step in its metrics.jsonl
#   questioning  self-questioning: trained only on tasks synthesized from the sandbox's tools
#                (langgraph_evolver.questioning, schema explorer), evaluated on the hand-made test pool
#
# Resumable like real_model_runs.sh (each stage skips when its output exists; GRPO resumes from its newest
# checkpoint):
#
#   nohup bash benchmarks/real_model_arms.sh > runs/r42-arms.log 2>&1 &
#
# Knobs: R, CONFIG, STEPS, EVAL_SEED, TEST_N, VAL, RL, ARMS, CHECK_EVERY, SYNTH_TASKS, BASE, OUT, PY.
set -euo pipefail
cd "$(dirname "$0")/.."

source benchmarks/real_model_common.sh   # PY R CONFIG STEPS EVAL_SEED TEST_N VAL RL, say, grpo_run, evaluate_on
ARMS=${ARMS:-"adca navigation questioning"}
CHECK_EVERY=${CHECK_EVERY:-20}
SYNTH_TASKS=${SYNTH_TASKS:-300}
BASE=${BASE:-checkpoints/smollm2-warm}
OUT=${OUT:-benchmarks/results/real_model.json}

[ -f "$R/sweep/chosen.json" ] || { say "no $R/sweep/chosen.json: run benchmarks/real_model_runs.sh first"; exit 1; }
read -r LR GENS RANK < <($PY -c "import json,sys; n=json.load(open(sys.argv[1]))['run'].split('_'); \
print(n[0][2:], n[1][1:], n[2][1:])" "$R/sweep/chosen.json")
say "settings chosen on validation: lr $LR, $GENS rollouts per task, LoRA r $RANK"

evaluate() {  # out split [adapter]
    evaluate_on "$1" "$2" "$BASE" "${3:-}"
}

arm() {  # name, then its own trainers.grpo flags
    local name=$1 out="$R/$1-s0"
    shift
    grpo_run "$out" "$BASE" --seed 0 --max_steps "$STEPS" --learning_rate "$LR" --num_generations "$GENS" \
        --lora_r "$RANK" --lora_alpha $((RANK * 2)) --eval_before false --eval_after false "$@"
    evaluate "$R/eval/$name-s0" "test:$TEST_N" "$out/final"
    $PY -m trainers.paired --before "$R/eval/warm" --after "$R/eval/$name-s0"
    $PY -m benchmarks.real_model record --arm "$name" --seed 0 --run "$out" --before "$R/eval/warm" \
        --after "$R/eval/$name-s0" --base "$BASE" --adapter "$out/final" --rl "sandbox:$RL" --out "$OUT"
}

for A in $ARMS; do
    case $A in
    adca)
        # keep a checkpoint every CHECK_EVERY steps (the last flags win over arm()'s own)
        arm adca --attribution '{"alpha": 0.1, "judge": "reference"}' --save_steps "$CHECK_EVERY" \
            --save_total_limit $((STEPS / CHECK_EVERY + 1))
        evaluate "$R/eval/val-grpo-s0" "$VAL" "$R/grpo-s0/final"
        for ckpt in "$R"/adca-s0/checkpoint-*; do
            [ -f "$ckpt/adapter_config.json" ] && evaluate "$R/eval/val-adca-s0-${ckpt##*-}" "$VAL" "$ckpt"
        done
        $PY - "$R" "$STEPS" <<'EOF'
import json, sys
from pathlib import Path
R, steps = Path(sys.argv[1]), int(sys.argv[2])
target = json.loads((R / "eval/val-grpo-s0/summary.json").read_text())["all"]["avg@4"]
curve = sorted((int(p.name.rsplit("-", 1)[1]), json.loads((p / "summary.json").read_text())["all"]["avg@4"])
               for p in R.glob("eval/val-adca-s0-*") if (p / "summary.json").is_file())
reached = next((s for s, v in curve if v >= target), None)
out = {"grpo_final_validation": target, "adca_curve": curve, "steps_to_grpo_final": reached, "grpo_steps": steps,
       "ratio": None if reached is None else round(reached / steps, 3), "goal": "<= 0.6"}
(R / "adca-s0/steps_to_grpo.json").write_text(json.dumps(out) + "\n")
print(json.dumps(out))
EOF
        ;;
    navigation)
        arm navigation --navigation '{"enabled": true, "eta": 0.5, "mode": "strip"}'
        ;;
    questioning)
        if [ ! -f "$R/synth/tasks.sqlite" ]; then
            mkdir -p "$R/synth"
            say "synthesizing $SYNTH_TASKS sandbox tasks (schema explorer)"
            $PY -m langgraph_evolver.questioning --env sandbox --n "$SYNTH_TASKS" --seed 0 \
                --out "$R/synth/tasks.tmp.sqlite" --jsonl "$R/synth/tasks.jsonl"
            mv "$R/synth/tasks.tmp.sqlite" "$R/synth/tasks.sqlite"
        fi
        arm questioning --task_store "$R/synth/tasks.sqlite" --synthetic_ratio 1.0
        ;;
    *) say "unknown arm $A (adca, navigation, questioning)"; exit 1 ;;
    esac
done
say "done: $OUT"
