# Shared by benchmarks/real_model_runs.sh and benchmarks/real_model_arms.sh (sourced, not run): the knobs
# both read, one GRPO invocation and one paired-ready evaluation, so the two scripts train and judge alike.
#
# Knobs (environment): PY, R (runs folder), CONFIG (a trainers.grpo YAML), STEPS, EVAL_SEED, TEST_N, VAL, RL.

PY=${PY:-python}
R=${R:-runs/r42}
CONFIG=${CONFIG:-examples/smollm2_cpu.yaml}
STEPS=${STEPS:-100}
EVAL_SEED=${EVAL_SEED:-42}
TEST_N=${TEST_N:-75}
VAL=${VAL:-validation:75}
RL=${RL:-rl:600}
mkdir -p "$R"
say() { echo "[$(date -u +%H:%M:%S)] $*"; }

# GRPO on the rl pool with dynamic sampling, resumable (a checkpoint every 5 steps; a killed run resumes from its
# newest), skipped when it has finished. $1 = output dir, $2 = the model it starts from, the rest = its own flags
# (later flags win).
grpo_run() {
    local out=$1 base=$2
    shift 2
    if [ -f "$out/summary.json" ] && [ -f "$out/final/adapter_config.json" ]; then
        return
    fi
    local cmd=("$PY" -m trainers.grpo --config "$CONFIG" --model_name_or_path "$base" --task_split "$RL"
        --dynamic_sampling true --max_refill_rounds 2 --save_steps 5 --save_total_limit 2
        --resume_from_checkpoint auto --output_dir "$out" "$@")
    mkdir -p "$out"
    echo "${cmd[*]}" > "$out/command.txt"
    say "${cmd[*]}"
    "${cmd[@]}"
}

# One seeded evaluation, k = 4, 1 server thread (so before and after pair sample by sample: trainers.paired),
# skipped when done. $1 = output dir, $2 = split ("test:75", "validation:75"), $3 = the model, $4 = an adapter.
evaluate_on() {
    local out=$1 split=$2 base=$3 adapter=${4:-}
    [ -f "$out/summary.json" ] && return
    say "evaluating ${adapter:-$base} on $split x 4, seed $EVAL_SEED"
    $PY -m trainers.evaluate --config "$CONFIG" --model_path "$base" ${adapter:+--adapter "$adapter"} \
        --split "$split" --limit "${split#*:}" --k 4 --seed "$EVAL_SEED" --server_threads 1 --quiet --output_dir "$out"
}
