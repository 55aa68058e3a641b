"""`AgenticConfig`: the validated configuration of an agentic RL run.

Field names follow the upstream ROLL agentic docs (exp_name, max_steps, adv_estimator, actor_train,
train_env_manager, custom_envs, ...). Unknown keys are rejected with the list of valid ones, so a typo
never silently falls back to a default. These models are the single place where defaults live: the
example YAML files only override them, and `roll train` with no argument runs these defaults (the tiny
model learning FrozenLake on a CPU).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

AdvEstimatorName = Literal[
    "grpo", "reinforce", "gae", "reinforce_plus_plus", "gigpo", "step_reinforce", "agentic_reinforce"
]
LossAggModeName = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelArgs(StrictModel):
    """How to load the model weights."""

    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    gguf_file: str | None = Field(None, description="GGUF file inside `pretrain` (needs the gguf extra)")


class TrainingArgs(StrictModel):
    """Optimiser and batching of a trained role."""

    learning_rate: float = Field(2e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    warmup_steps: int = Field(0, ge=0)
    per_device_train_batch_size: int = Field(64, ge=1, description="rows per micro-batch")
    gradient_accumulation_steps: int = Field(
        4, ge=1, description="micro-batches per optimiser step: the rows of a step are split into this many mini-batches"
    )


class GeneratingArgs(StrictModel):
    """Sampling of the inference role."""

    max_new_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    num_return_sequences: Literal[1] = 1


class StrategyArgs(StrictModel):
    """Which backend runs a role."""

    strategy_name: Literal["hf_train", "hf_infer", "deepspeed_train", "vllm"] = "hf_train"
    strategy_config: dict[str, Any] = Field(default_factory=dict)


class WorkerConfig(StrictModel):
    """One role: actor_train, actor_infer or reference."""

    model_args: ModelArgs = Field(default_factory=ModelArgs)
    training_args: TrainingArgs = Field(default_factory=TrainingArgs)
    generating_args: GeneratingArgs = Field(default_factory=GeneratingArgs)
    strategy_args: StrategyArgs = Field(default_factory=StrategyArgs)
    device_mapping: list[int] = Field(default_factory=list, description="GPU indices; empty runs on the CPU")
    infer_batch_size: int = Field(128, ge=1, description="rows per forward pass when computing log-probs")
    num_threads: int | None = Field(None, ge=1, description="torch CPU threads of this role")


class EnvManagerConfig(StrictModel):
    """How many envs run, in which groups, with which tags."""

    max_env_num_per_worker: int = Field(64, ge=1)
    num_env_groups: int = Field(16, ge=1)
    group_size: int = Field(8, ge=1, description="envs per group; they share the episode seed (GRPO group)")
    tags: list[str] = Field(default_factory=lambda: ["FrozenLake"])
    num_groups_partition: list[int] | None = Field(None, description="groups per tag; default: all to the first")

    @model_validator(mode="after")
    def _partition(self) -> EnvManagerConfig:
        if self.num_groups_partition is None:
            share, rest = divmod(self.num_env_groups, len(self.tags))
            self.num_groups_partition = [share + (i < rest) for i in range(len(self.tags))]
        if len(self.num_groups_partition) != len(self.tags) or sum(self.num_groups_partition) != self.num_env_groups:
            raise ValueError(
                f"num_groups_partition {self.num_groups_partition} must give one group count per tag "
                f"{self.tags} and sum to num_env_groups={self.num_env_groups}"
            )
        return self

    @property
    def num_trajectories(self) -> int:
        """Trajectories per rollout: num_env_groups * group_size."""
        return self.num_env_groups * self.group_size


class CustomEnvConfig(StrictModel):
    """An env tag: which registered env type, its config, and the episode limits."""

    env_type: str = "frozen_lake"
    max_actions_per_traj: int = Field(8, ge=1, description="agent turns per episode")
    max_tokens_per_step: int = Field(16, ge=1, description="new tokens per turn")
    max_history_turns: int | None = Field(0, ge=0, description="earlier turns kept in the prompt; null = all")
    env_config: dict[str, Any] = Field(default_factory=dict)


class ClusterConfig(StrictModel):
    """Where workers run: Ray (local by default, or an existing cluster) or in-process."""

    backend: Literal["ray", "local"] = "ray"
    address: str | None = Field(None, description="existing Ray cluster, e.g. 'auto' or 'ray://host:10001'")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local Ray instance (default: all)")


def _default_val_envs() -> EnvManagerConfig:
    return EnvManagerConfig(num_env_groups=128, group_size=1)


class AgenticConfig(StrictModel):
    """Everything an agentic RL run needs; see docs/config.md for each field."""

    exp_name: str = "frozen_lake_tiny"
    seed: int = 42
    output_dir: str = Field("runs", description="run directory = output_dir/exp_name")
    pretrain: str = Field(
        "builtin:tiny-frozen-lake",
        description="a model folder or hub id for from_pretrained; 'builtin:NAME' builds a tiny model offline",
    )
    max_steps: int = Field(100, ge=0)
    save_steps: int = Field(50, ge=1)
    eval_steps: int = Field(25, ge=1)
    logging_steps: int = Field(1, ge=1)
    rollout_batch_size: int | None = Field(None, ge=1, description="trajectories per step (default: all train envs)")
    val_batch_size: int | None = Field(None, ge=1, description="validation episodes (default: all val envs)")
    sequence_length: int = Field(1024, ge=16, description="max tokens of a prompt plus its response")
    adv_estimator: AdvEstimatorName = "grpo"
    ppo_epochs: int = Field(1, ge=1)
    gamma: float = Field(1.0, ge=0, le=1)
    lambd: float = Field(1.0, ge=0, le=1)
    pg_clip: float = Field(0.2, gt=0)
    pg_clip_low: float | None = None
    pg_clip_high: float | None = None
    dual_clip_loss: bool = False
    init_kl_coef: float = Field(0.0, ge=0, description="KL penalty folded into the reward")
    target_kl: float | None = Field(None, gt=0, description="adaptive KL controller target (None: fixed)")
    kl_horizon: int = Field(10000, ge=1)
    kl_penalty: Literal["kl", "abs", "mse", "k3", "full"] = "k3"
    use_kl_loss: bool = True
    kl_loss_coef: float = Field(0.02, ge=0)
    entropy_loss_coef: float = Field(0.01, ge=0)
    whiten_advantages: bool = False
    norm_mean_type: Literal["mean_std", "mean", "none"] = "mean_std"
    advantage_clip: float | None = Field(None, gt=0)
    reward_clip: float | None = Field(None, gt=0)
    loss_agg_mode: LossAggModeName = "seq-mean-token-mean"
    actor_train: WorkerConfig = Field(default_factory=WorkerConfig)
    actor_infer: WorkerConfig = Field(
        default_factory=lambda: WorkerConfig(strategy_args=StrategyArgs(strategy_name="hf_infer"))
    )
    reference: WorkerConfig = Field(
        default_factory=lambda: WorkerConfig(strategy_args=StrategyArgs(strategy_name="hf_infer"))
    )
    train_env_manager: EnvManagerConfig = Field(default_factory=EnvManagerConfig)
    val_env_manager: EnvManagerConfig = Field(default_factory=_default_val_envs)
    custom_envs: dict[str, CustomEnvConfig] = Field(default_factory=lambda: {"FrozenLake": CustomEnvConfig()})
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    render_save_dir: str | None = None
    resume_from_checkpoint: str | None = None
    track_with: list[Literal["tensorboard", "stdout"]] = Field(default_factory=lambda: ["tensorboard", "stdout"])
    print_baselines: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> AgenticConfig:
        for name, manager in (("train_env_manager", self.train_env_manager), ("val_env_manager", self.val_env_manager)):
            unknown = [t for t in manager.tags if t not in self.custom_envs]
            if unknown:
                raise ValueError(
                    f"{name}.tags {unknown} have no entry in custom_envs (defined: {sorted(self.custom_envs)}); "
                    "add them under custom_envs with an env_type"
                )
        group = self.train_env_manager.group_size
        batch = self.train_rollout_batch_size
        if batch % group or batch > self.train_env_manager.num_trajectories:
            raise ValueError(
                f"rollout_batch_size={batch} must be a multiple of train_env_manager.group_size={group} and at most "
                f"num_env_groups*group_size={self.train_env_manager.num_trajectories}"
            )
        return self

    @property
    def train_rollout_batch_size(self) -> int:
        """Trajectories per training step."""
        return self.rollout_batch_size or self.train_env_manager.num_trajectories

    @property
    def val_rollout_batch_size(self) -> int:
        """Episodes per validation."""
        return self.val_batch_size or self.val_env_manager.num_trajectories
