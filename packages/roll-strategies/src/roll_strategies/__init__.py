"""roll-strategies: training and inference backends (HF on CPU/GPU; DeepSpeed, vLLM later) and weight sync.

Everything here is importable without ray, vllm or deepspeed. The tiny offline model the embedded
configs train is built by `build_tiny_model` (CLI: `uv run python tools/build_tiny_model.py --out DIR`).
"""

from roll_strategies.critic import HFCriticStrategy, ValueLossFn
from roll_strategies.errors import CheckpointError, ModelNotFoundError, StrategyError, WeightSyncError
from roll_strategies.forward import TokenOutputs, lm_outputs, packing_supported, value_outputs
from roll_strategies.hf_infer import GenerationOutput, GenerationParams, HFInferStrategy
from roll_strategies.hf_train import HFTrainStrategy, LossFn
from roll_strategies.logprobs import batched_log_probs, position_ids_from_mask, token_log_probs
from roll_strategies.protocols import InferStrategy, TrainStrategy
from roll_strategies.schedules import lr_decay_factor
from roll_strategies.tiny_model import (
    TINY_MODEL_FORMAT_VERSION,
    WarmupExample,
    build_tiny_model,
    encode_chat_example,
)
from roll_strategies.tiny_tokenizer import build_tiny_tokenizer
from roll_strategies.value_model import load_value_model
from roll_strategies.weights import export_named_weights, load_named_weights
from roll_strategies.workers import ActorInferWorker, ActorTrainWorker, CriticWorker, ReferenceWorker

__version__ = "0.1.0"

__all__ = [
    "TINY_MODEL_FORMAT_VERSION",
    "ActorInferWorker",
    "ActorTrainWorker",
    "CheckpointError",
    "GenerationOutput",
    "GenerationParams",
    "HFInferStrategy",
    "HFTrainStrategy",
    "InferStrategy",
    "LossFn",
    "ModelNotFoundError",
    "ReferenceWorker",
    "StrategyError",
    "TrainStrategy",
    "WarmupExample",
    "WeightSyncError",
    "__version__",
    "batched_log_probs",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "encode_chat_example",
    "export_named_weights",
    "load_named_weights",
    "lr_decay_factor",
    "position_ids_from_mask",
    "token_log_probs",
]
__all__ += [
    "CriticWorker",
    "HFCriticStrategy",
    "TokenOutputs",
    "ValueLossFn",
    "lm_outputs",
    "load_value_model",
    "packing_supported",
    "value_outputs",
]
