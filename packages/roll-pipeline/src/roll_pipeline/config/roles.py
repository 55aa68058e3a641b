"""Config models of the worker roles (actor_train, actor_infer, reference, critic): model loading,
optimiser and batching, sampling, backend, devices (`AgenticConfig`, config/schema.py, holds one per role), and
where workers run (`ClusterConfig`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ClusterConfig",
    "GeneratingArgs",
    "ModelArgs",
    "StrategyArgs",
    "StrictModel",
    "TrainingArgs",
    "WorkerConfig",
]


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelArgs(StrictModel):
    """How to load the model weights."""

    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "float32",
        description="weights dtype; auto: bfloat16 on a CUDA device that supports it and on a CPU whose bfloat16"
        " matmuls measure at least as fast as float32's at load, float32 elsewhere (a CPU without avx512_bf16 or"
        " AMX emulates bfloat16 tens to hundreds of times slower); the choice is logged at load",
    )
    gguf_file: str | None = Field(
        None,
        description="GGUF file inside `pretrain` (needs the gguf extra), converted once into a cached model folder"
        " that every role loads; roles that set it must name the same file",
    )


class TrainingArgs(StrictModel):
    """Optimiser and batching of a trained role."""

    learning_rate: float = Field(1e-6, gt=0, description="AdamW learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    adam_epsilon: float = Field(
        1e-8,
        gt=0,
        description="AdamW epsilon; larger (e.g. 1e-5) stops parameters whose gradients are tiny noise (the"
        " format tokens' under RL) from being scaled up to full learning-rate steps",
    )
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="AdamW first-moment decay")
    adam_beta2: float = Field(
        0.999,
        ge=0,
        lt=1,
        description="AdamW second-moment decay; lower (e.g. 0.98) bounds the step a sudden gradient spike"
        " causes at (1 - beta1) / sqrt(1 - beta2) learning rates",
    )
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    warmup_steps: int = Field(10, ge=0, description="linear learning-rate warm-up, optimiser steps")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field(
        "linear", description="learning-rate decay over the run's max_steps pipeline steps (after warm-up)"
    )
    min_lr_ratio: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the decayed learning rate at the last step, as a fraction of learning_rate",
    )
    per_device_train_batch_size: int = Field(8, ge=1, description="rows per micro-batch")
    gradient_accumulation_steps: int = Field(
        16,
        ge=1,
        description="micro-batches per optimiser step (mini-batch = this x per_device_train_batch_size rows)",
    )


class GeneratingArgs(StrictModel):
    """Sampling of the inference role."""

    max_new_tokens: int = Field(
        128,
        ge=1,
        description="cap on new tokens of a turn (a tag's max_tokens_per_step may lower it; one set above it is"
        " refused)",
    )
    temperature: float = Field(
        1.0,
        gt=0,
        description="sampling temperature of training rollouts (validation is greedy); temperature, top_p and"
        " top_k other than 1, 1, 0 need recompute_old_log_probs (the trainer scores the model's own"
        " distribution)",
    )
    temperature_schedule: list[tuple[int, float]] = Field(
        default_factory=list,
        description="[[step, temperature], ...]: from each training step on (numbered as in the metrics, 1 first),"
        " training rollouts sample at that temperature (piecewise constant, `temperature` before the first entry); e.g. [[160, 1.5]] explores"
        " again once the run has lifted off. An episode keeps the temperature it started with",
    )
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    top_k: int = Field(0, ge=0, description="top-k sampling; 0 disables")
    stop_strings: list[str] = Field(
        default_factory=lambda: ["</answer>"],
        description="a response also ends at the sampled token that completes any of these in its text (any"
        " length, any number of tokens; that token is kept and trained); eos always stops",
    )

    @field_validator("temperature_schedule")
    @classmethod
    def _increasing_steps(cls, schedule: list[tuple[int, float]]) -> list[tuple[int, float]]:
        steps = [step for step, _ in schedule]
        if any(step < 0 for step in steps) or steps != sorted(set(steps)):
            raise ValueError(
                f"the steps of temperature_schedule must be >= 0 and strictly increasing, got {steps}"
            )
        if not all(0 < temperature < float("inf") for _, temperature in schedule):
            raise ValueError(
                f"every temperature of temperature_schedule must be finite and > 0, got {schedule}"
            )
        return schedule

    def temperature_at(self, step: int) -> float:
        """The training rollouts' temperature at training step `step` (numbered as in the metrics)."""
        current = self.temperature
        for start, temperature in self.temperature_schedule:
            if step >= start:
                current = temperature
        return current

    def reshapes_sampling(self) -> bool:
        """Whether any training rollout samples from other than the model's own distribution."""
        temperatures = {self.temperature, *(t for _, t in self.temperature_schedule)}
        return temperatures != {1.0} or self.top_p < 1.0 or self.top_k > 0


class StrategyArgs(StrictModel):
    """Which backend runs a role."""

    strategy_name: Literal["hf_train", "hf_infer", "hf_critic", "deepspeed_train", "vllm"] = Field(
        "hf_train",
        description="backend of the role: hf_train / deepspeed_train (actor_train), hf_infer / vllm (actor_infer),"
        " hf_infer / hf_train (reference), hf_critic (critic); a missing extra is named before the run starts",
    )
    strategy_config: dict[str, Any] = Field(
        default_factory=dict,
        description="backend-specific options (deepspeed_train: DeepSpeed config keys; vllm: engine arguments,"
        " plus sleep_level 0/1/2, how its engine sleeps while roles on its GPUs train; hf_infer: decode, auto"
        " (static on CUDA, generate on the CPU), generate (HF generate) or static (a static KV cache of"
        " decode_slots sequences, default 64, refilled as they finish; decode_graphs: true replays each decode"
        " step as a CUDA graph), refused on sliding-window models);"
        " hf_train and hf_critic read none and reject a non-empty one",
    )


class WorkerConfig(StrictModel):
    """One role: actor_train, actor_infer, reference or critic."""

    model_args: ModelArgs = Field(default_factory=ModelArgs, description="how to load the weights")
    training_args: TrainingArgs = Field(default_factory=TrainingArgs, description="optimiser and batching")
    generating_args: GeneratingArgs = Field(default_factory=GeneratingArgs, description="sampling")
    strategy_args: StrategyArgs = Field(default_factory=StrategyArgs, description="backend")
    device_mapping: list[int] = Field(
        default_factory=list,
        description="GPU indices; empty runs on the CPU",
    )
    num_gpus_per_worker: float | None = Field(
        None,
        gt=0,
        description="GPUs the role's Ray actor asks for (each rank's, for a trained role with several); null:"
        " its device_mapping GPUs divided among the roles mapped to them (colocated roles share)",
    )
    offload_when_colocated: bool = Field(
        True,
        description="a trained role (actor_train, critic, a reference worker of its own) on a GPU of actor_infer's"
        " moves its weights, gradients, fp32 masters and optimiser state to CPU memory after the weight sync"
        " and back before the next step's training phase, so the engine has the GPU while it samples; false"
        " keeps them on the GPU",
    )
    world_size: int | None = Field(
        None,
        ge=1,
        description="data-parallel ranks of a trained role (actor_train, critic; hf_train, deepspeed_train,"
        " hf_critic): N processes in one torch.distributed group, each training on its share of every"
        " mini-batch (one optimiser step per mini-batch whatever N is). On GPUs the ranks are the"
        " device_mapping GPUs, one each (leave it null); on the CPU set it (null: 1)",
    )
    infer_batch_size: int = Field(
        32,
        ge=1,
        description="rows per forward pass when computing log-probs or values; for actor_infer, the most"
        " requests generated in one batch",
    )
    use_dynamic_batching_in_train: bool = Field(
        False,
        description="train micro-batches of length-sorted rows under max_tokens_per_microbatch_in_train padded"
        " tokens (instead of per_device_train_batch_size rows)",
    )
    use_sequence_packing: bool = Field(
        False,
        description="train on packed rows: several sequences per row, positions restarting per sequence,"
        " attention kept inside each; micro-batches under max_tokens_per_microbatch_in_train tokens. Falls back"
        " to dynamic batching when the model cannot pack (probed at start)",
    )
    max_tokens_per_microbatch_in_train: int = Field(
        8192,
        ge=16,
        description="token budget of one micro-batch (padded slots) with dynamic batching or packing",
    )
    sequence_length_round_in_train: int = Field(
        8,
        ge=1,
        description="with dynamic batching or packing, micro-batch widths / packed row lengths are rounded up"
        " to a multiple of this",
    )
    num_threads: int | None = Field(
        None,
        ge=1,
        description="torch CPU threads of this role (of each rank, with world_size); null: every core of the"
        " machine on the CPU (the roles take turns within a step; a role's ranks split its share), torch's"
        " default on a GPU",
    )

    @property
    def data_parallel_size(self) -> int:
        """The ranks this role trains with: `world_size`, else one per `device_mapping` GPU, else 1 (read for
        the trained roles only)."""
        return self.world_size or len(self.device_mapping) or 1


class ClusterConfig(StrictModel):
    """Where workers run: Ray (local by default, or an existing cluster) or in-process."""

    backend: Literal["ray", "local"] = Field(
        "ray", description="ray: workers are Ray actors; local: all in this process"
    )
    address: str | None = Field(None, description="existing Ray cluster, e.g. 'auto' or 'ray://host:10001'")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local Ray instance (default: all)")
