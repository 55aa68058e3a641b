#!/usr/bin/env bash
# Train the tiny offline model on FrozenLake on a CPU. Extra arguments are Hydra overrides:
#   bash examples/tiny-cpu-agentic/run_agentic_pipeline_frozen_lake.sh exp_name=my_run seed=123
set -euo pipefail
CONFIG_PATH=$(basename "$(dirname "$0")")
cd "$(dirname "$0")/../.."
exec uv run python examples/start_agentic_pipeline.py --config_path "$CONFIG_PATH" \
  --config_name agent_val_frozen_lake "$@"
