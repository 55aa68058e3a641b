"""roll-strategies: training and inference backends (HF on CPU/GPU, DeepSpeed, vLLM) and weight sync.

Everything here is importable without ray, vllm or deepspeed: those are optional extras imported only
when their strategy is built. Backends are picked by name (`create_strategy`, `check_strategy`); weight
sync is versioned and bucketed (`sync_weights`). The tiny offline model the embedded configs train is
built by `build_tiny_model` (CLI: `uv run python tools/build_tiny_model.py --out DIR`).
"""

from roll_strategies.compute.forward import TokenOutputs, lm_outputs, value_outputs
from roll_strategies.compute.logprobs import position_ids_from_mask, token_log_probs
from roll_strategies.compute.probes import packing_supported
from roll_strategies.compute.recompute import batched_log_probs
from roll_strategies.errors import (
    CheckpointError,
    ModelNotFoundError,
    StaleWeightsError,
    StrategyError,
    StrategyNotAvailableError,
    WeightSyncError,
)
from roll_strategies.infer.hf_infer import HFInferStrategy
from roll_strategies.infer.vllm_infer import VLLMInferStrategy
from roll_strategies.models._loading import choose_dtype
from roll_strategies.models.gguf import ensure_model_folder
from roll_strategies.models.qwen_shaped import build_qwen_shaped_model, build_qwen_style_tokenizer
from roll_strategies.models.tiny_model import (
    TINY_MODEL_FORMAT_VERSION,
    WarmupExample,
    build_tiny_model,
    encode_chat_example,
)
from roll_strategies.models.tiny_tokenizer import build_tiny_tokenizer
from roll_strategies.protocols import (
    GenerationOutput,
    GenerationParams,
    InferStrategy,
    LogProbStrategy,
    LossFn,
    SleepableStrategy,
    StreamingInferStrategy,
    TrainStrategy,
    ValueLossFn,
)
from roll_strategies.registry import (
    STRATEGIES,
    StrategySpec,
    available_strategies,
    check_strategy,
    create_strategy,
    strategy_class,
)
from roll_strategies.sync.weight_receiver import WeightReceiver
from roll_strategies.sync.weight_sync import (
    DEFAULT_BUCKET_BYTES,
    TensorSpec,
    WeightBucket,
    WeightExporter,
    WeightSlice,
    WeightSyncPlan,
    plan_buckets,
    sync_weights,
    weight_sync_due,
)
from roll_strategies.sync.weights import export_named_weights, load_named_weights
from roll_strategies.train.critic import HFCriticStrategy
from roll_strategies.train.data_parallel import DataParallel, DataParallelSpec, free_port, join_group
from roll_strategies.train.deepspeed_config import build_deepspeed_config
from roll_strategies.train.deepspeed_train import DeepSpeedTrainStrategy
from roll_strategies.train.hf_train import HFTrainStrategy
from roll_strategies.train.master_weights import MasterWeightOptimizer
from roll_strategies.train.optimizer import OptimizerSettings
from roll_strategies.train.schedules import lr_decay_factor, warmup_factor
from roll_strategies.train.train_loop import (
    LAST_VALUE_METRICS,
    GradientBackend,
    NonFiniteCount,
    StepOutcome,
    StepSums,
    run_train_step,
)
from roll_strategies.train.value_model import load_value_model
from roll_strategies.workers.allocator import (
    HeapStats,
    ProcessMemory,
    configure_allocator,
    heap_stats,
    release_freed_memory,
)
from roll_strategies.workers.roles import ActorInferWorker, ActorTrainWorker, CriticWorker, ReferenceWorker

__version__ = "0.3.0"

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "LAST_VALUE_METRICS",
    "STRATEGIES",
    "TINY_MODEL_FORMAT_VERSION",
    "ActorInferWorker",
    "ActorTrainWorker",
    "CheckpointError",
    "CriticWorker",
    "DataParallel",
    "DataParallelSpec",
    "DeepSpeedTrainStrategy",
    "GenerationOutput",
    "GenerationParams",
    "GradientBackend",
    "HFCriticStrategy",
    "HFInferStrategy",
    "HFTrainStrategy",
    "HeapStats",
    "InferStrategy",
    "LogProbStrategy",
    "LossFn",
    "MasterWeightOptimizer",
    "ModelNotFoundError",
    "NonFiniteCount",
    "OptimizerSettings",
    "ProcessMemory",
    "ReferenceWorker",
    "SleepableStrategy",
    "StaleWeightsError",
    "StepOutcome",
    "StepSums",
    "StrategyError",
    "StrategyNotAvailableError",
    "StrategySpec",
    "StreamingInferStrategy",
    "TensorSpec",
    "TokenOutputs",
    "TrainStrategy",
    "VLLMInferStrategy",
    "ValueLossFn",
    "WarmupExample",
    "WeightBucket",
    "WeightExporter",
    "WeightReceiver",
    "WeightSlice",
    "WeightSyncError",
    "WeightSyncPlan",
    "__version__",
    "available_strategies",
    "batched_log_probs",
    "build_deepspeed_config",
    "build_qwen_shaped_model",
    "build_qwen_style_tokenizer",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "check_strategy",
    "choose_dtype",
    "configure_allocator",
    "create_strategy",
    "encode_chat_example",
    "ensure_model_folder",
    "export_named_weights",
    "free_port",
    "heap_stats",
    "join_group",
    "lm_outputs",
    "load_named_weights",
    "load_value_model",
    "lr_decay_factor",
    "packing_supported",
    "plan_buckets",
    "position_ids_from_mask",
    "release_freed_memory",
    "run_train_step",
    "strategy_class",
    "sync_weights",
    "token_log_probs",
    "value_outputs",
    "warmup_factor",
    "weight_sync_due",
]
