#!/usr/bin/env bash
# Transfer to unseen MCP domains (docs/transfer.md, issue 43): a model evaluated on each held-out server's
# hand-written tasks, seeded (paired across models per (task, sample)). $1 = model path, $2 = label; resumable.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for s in library shipping sheets; do
  out=${R:-runs/r42}/transfer/$2-$s
  [ -f "$out/summary.json" ] && continue
  echo "[$(date -u +%H:%M:%S)] $2 on $s"
  .venv/bin/python -m trainers.evaluate --env "mcp:python examples/mcp_servers/$s.py#tasks=examples/mcp_servers/${s}_tasks.jsonl" \
      --model_path "$1" --k 4 --seed 42 --server_threads 1 --max_tokens 128 --max_turns 8 --concurrency 8 \
      --output_dir "$out" 2>&1 | tail -4
done
