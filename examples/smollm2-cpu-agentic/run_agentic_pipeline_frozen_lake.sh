#!/usr/bin/env bash
# Train SmolLM2-135M-Instruct on FrozenLake on a CPU (fetch it first: uv run python tools/convert_gguf.py --fetch-smollm2). Extra arguments are Hydra overrides:
#   bash examples/smollm2-cpu-agentic/run_agentic_pipeline_frozen_lake.sh max_steps=5
set -euo pipefail
CONFIG_PATH=$(basename "$(dirname "$0")")
cd "$(dirname "$0")/../.."
exec uv run python examples/start_agentic_pipeline.py --config_path "$CONFIG_PATH" \
  --config_name agent_val_frozen_lake "$@"
