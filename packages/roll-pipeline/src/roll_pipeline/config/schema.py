"""`AgenticConfig`: the validated configuration of an agentic RL run.

Field names follow the upstream ROLL agentic docs (exp_name, max_steps, adv_estimator, actor_train,
train_env_manager, custom_envs, ...). Unknown keys are rejected with the list of valid ones, so a typo
never silently falls back to a default. These models are the single place where defaults live, and they are
set for a pretrained instruct model (docs/config.md#defaults): the env's own instruction, the sampled k3 KL,
a learning rate of 1e-6, 128-token turns, every sampled token trained. `pretrain` has no default. The
builtin tiny models' recipe is `config.tiny_recipe` (Hydra config `roll_tiny`), which `roll train` with no
config file runs (the tiny model learning FrozenLake on a CPU). The keys are flat but declared by group:
the run's own in `run.py` (`RunFields`), the algorithm's in `algorithm.py` (`AlgorithmFields`), and here the
roles, demonstration steps, training rows, envs, cluster, rendering, checkpoints and tracking, with the checks
that span groups.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from roll_pipeline.config.algorithm import AlgorithmFields
from roll_pipeline.config.checks import config_problems
from roll_pipeline.config.envs import CustomEnvConfig, EnvManagerConfig, default_val_envs, val_subset_problems
from roll_pipeline.config.roles import ClusterConfig, StrategyArgs, WorkerConfig
from roll_pipeline.config.run import RunFields

__all__ = ["AgenticConfig", "default_values"]


# pydantic orders inherited fields by the reversed MRO: RunFields' keys first, then AlgorithmFields', then these.
class AgenticConfig(AlgorithmFields, RunFields):
    """Everything an agentic RL run needs; see docs/config.md for each field."""

    actor_train: WorkerConfig = Field(default_factory=WorkerConfig, description="the trained policy")
    actor_infer: WorkerConfig = Field(
        default_factory=lambda: WorkerConfig(strategy_args=StrategyArgs(strategy_name="hf_infer")),
        description="the rollout policy (weights synced from actor_train every step)",
    )
    reference: WorkerConfig = Field(
        default_factory=lambda: WorkerConfig(strategy_args=StrategyArgs(strategy_name="hf_infer")),
        description="the frozen policy of the KL term (its weights: kl_reference)",
    )
    critic: WorkerConfig = Field(
        default_factory=lambda: WorkerConfig(strategy_args=StrategyArgs(strategy_name="hf_critic")),
        description="the value model of adv_estimator=gae (the policy's architecture with a value head, its own"
        " optimiser); unused by the other estimators",
    )
    demonstration_steps: int = Field(
        0,
        ge=0,
        description="the first this many steps are behaviour cloning: each plays train_rollout_batch_size"
        " episodes of demonstration_env_manager (null: the training envs) whose every answer is the env's"
        " demonstration (BaseEnv.demonstration), and trains the actor on them with the sft loss (the negative"
        " log-likelihood of the answers; no KL, no entropy, no critic); they count in max_steps and in the"
        " time. 0: none. Every env they play must"
        " demonstrate (roll config checks it)",
    )
    demonstration_learning_rate: float = Field(
        2e-5,
        gt=0,
        description="the actor's learning rate in the demonstration steps, in place of its training_args"
        ".learning_rate (with the same warm-up and decay): cloning is supervised learning, which wants more than"
        " RL's 1e-6. SmolLM2-135M on held-out FrozenLake maps after 10 cloning steps: 0.008 at 1e-6 (nothing"
        " cloned), 0.531 at 2e-5, 0.742 at 1e-4",
    )
    critic_warmup: int = Field(0, ge=0, description="gae: the first this many steps train only the critic")
    value_clip: float | None = Field(
        None, gt=0, description="gae: clip the value loss around the old values by this much; null: unclipped"
    )
    sample_shape: Literal["auto", "step", "trajectory"] = Field(
        "auto",
        description="training rows: step = one per turn (its prompt + response); trajectory = one per episode"
        " (StarPO: the whole conversation, every turn's response trained, observations masked; needs prompts"
        " that keep the whole history, max_history_turns: null; an openai_agent tag's episode trains as one"
        " row where its calls chain, else one row per call: docs/openai_agent.md); auto = trajectory when"
        " every training env keeps the whole history, else step",
    )
    share_prefix: bool = Field(
        True,
        description="compute the tokens that rows share from their start (a group's prompt, an episode's"
        " earlier turns) once: each micro-batch's rows run as a prefix tree (a batch row per set of rows sharing"
        " a first token, each distinct token once at its own position, attending only to its own row's earlier"
        " tokens, within its window on a sliding-window layer), so log-probs, values and gradients equal the"
        " per-row forward's, wherever the tree costs less than the rows (its tokens plus its rows' masks'"
        " attention pairs at their cost measured on the CPU, against the padded or packed rows'; elsewhere the"
        " micro-batch runs as with false); in every role: actor_train's train step"
        " and old log-probs, the reference, the critic, and hf_infer generation (each distinct prompt encoded once;"
        " vllm: its prefix caching). The trained roles' batching keeps a group's rows in one data-parallel rank"
        " and one micro-batch where they fit (mini-batches hold whole groups on or off: the switch changes the"
        " arithmetic, never which rows an optimiser step trains). roll config refuses a model whose attention"
        " cannot take the tree; false: every row is its own sequence everywhere",
    )
    train_env_manager: EnvManagerConfig = Field(default_factory=EnvManagerConfig, description="training envs")
    demonstration_env_manager: EnvManagerConfig | None = Field(
        None,
        description="the envs the demonstration_steps play; null: train_env_manager's. A demonstrated group's"
        " copies play the same answers on the same seed, so group_size: 1 with as many groups as the batch"
        " holds clones on that many distinct episodes a step instead of batch / group_size"
        " (rollout/distinct_episodes counts them); its tags need demonstrations as the training tags do",
    )
    val_env_manager: EnvManagerConfig = Field(
        default_factory=default_val_envs, description="validation envs (greedy)"
    )
    custom_envs: dict[str, CustomEnvConfig] = Field(
        default_factory=lambda: {"FrozenLake": CustomEnvConfig()},
        description="env tags and their env types and limits",
    )
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="where workers run")
    render_save_dir: str | None = Field(
        None,
        description="after each validation, save render_episodes_per_tag episodes per tag as GIFs here"
        " (step-NNNNNN/TAG-seedS-success.gif or -fail.gif; relative: inside the run folder) and log their"
        " filmstrips to TensorBoard; null: no rendering",
    )
    render_episodes_per_tag: int = Field(
        2,
        ge=1,
        le=64,
        description="validation episodes drawn per tag (the lowest seeds, the same at every validation);"
        " needs render_save_dir",
    )
    resume_from_checkpoint: str | None = Field(
        None,
        description="a checkpoint-N folder to resume from, or 'auto': this run folder's newest checkpoint that"
        " verifies (a fresh start when there is none, so the same command starts and resumes a run;"
        " docs/checkpoints.md)",
    )
    keep_last_n: int | None = Field(
        None,
        ge=1,
        description="keep only the newest this many checkpoints of the run, deleting older ones once a new one"
        " is complete; null keeps all",
    )
    track_with: list[Literal["tensorboard", "stdout", "wandb"]] = Field(
        default_factory=lambda: ["tensorboard", "stdout"],
        description="metric sinks (metrics.jsonl is always written); wandb needs roll-pipeline[wandb]",
    )
    tracker_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="wandb.init arguments for track_with: [wandb] (project, entity, name, tags, notes, mode)",
    )
    print_baselines: bool = Field(
        True, description="print the baselines of each played tag whose env has some (FrozenLake, Sokoban)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> AgenticConfig:
        for name in ("train_env_manager", "val_env_manager", "demonstration_env_manager"):
            manager = getattr(self, name)
            unknown = [t for t in manager.tags if t not in self.custom_envs] if manager else []
            if unknown:
                raise ValueError(
                    f"{name}.tags {unknown} have no entry in custom_envs (defined: {sorted(self.custom_envs)}); "
                    "add them under custom_envs with an env_type"
                )
        group = self.train_env_manager.group_size
        batch = self.train_rollout_batch_size
        if batch % group:
            raise ValueError(
                f"rollout_batch_size={batch} must be a multiple of train_env_manager.group_size={group} (whole"
                " groups); a batch larger than num_env_groups*group_size is fine: groups play several seeds a step"
            )
        demo = self.demonstration_env_manager
        if demo is not None and self.demonstration_steps == 0:
            raise ValueError(
                "demonstration_env_manager is set but demonstration_steps is 0: nothing plays it; set"
                " demonstration_steps or remove demonstration_env_manager"
            )
        if demo is not None and batch % demo.group_size:
            raise ValueError(
                f"rollout_batch_size={batch} must be a multiple of demonstration_env_manager.group_size="
                f"{demo.group_size} (a demonstration step plays the training batch size in whole groups)"
            )
        problems = config_problems(self) + val_subset_problems(self)
        if self.pretrain is None:
            problems.insert(
                0,
                "pretrain is not set: name a model folder, a hub id (e.g. Qwen/Qwen2.5-0.5B-Instruct) or"
                " builtin:NAME; `roll train` with no config file runs the builtin tiny model's recipe (roll_tiny)",
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def train_sample_shape(self) -> Literal["step", "trajectory"]:
        """The training rows of this run: `sample_shape`, with `auto` resolved (see its description)."""
        if self.sample_shape != "auto":
            return self.sample_shape
        full = all(self.custom_envs[t].max_history_turns is None for t in self.train_env_manager.tags)
        return "trajectory" if full else "step"

    @property
    def spawned_roles(self) -> list[str]:
        """The roles a run spawns a worker for: the critic only for an estimator that needs one, the reference
        only when a KL term reads it and the trainer does not hold it."""
        spawned = {
            "critic": self.uses_critic,
            "reference": self.uses_reference and not self.reference_in_trainer,
        }
        return ["actor_train", "actor_infer", *(name for name, spawn in spawned.items() if spawn)]

    @property
    def demonstration_envs(self) -> EnvManagerConfig:
        """The envs the demonstration steps play: `demonstration_env_manager`, else the training envs."""
        return self.demonstration_env_manager or self.train_env_manager

    @property
    def train_rollout_batch_size(self) -> int:
        """Trajectories per training step."""
        return self.rollout_batch_size or self.train_env_manager.num_trajectories

    @property
    def val_rollout_batch_size(self) -> int:
        """Episodes per validation."""
        return self.val_batch_size or self.val_env_manager.num_trajectories


def default_values() -> dict[str, Any]:
    """`AgenticConfig`'s defaults as a plain dict (`pretrain` unset; derived values such as
    `num_groups_partition` left for the validators to fill in): the base a partial config is merged into."""
    node = AgenticConfig.model_construct().model_dump(mode="json")
    for manager in ("train_env_manager", "val_env_manager"):
        node[manager]["num_groups_partition"] = None
    return node
