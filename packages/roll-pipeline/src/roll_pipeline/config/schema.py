"""`AgenticConfig`: the validated configuration of an agentic RL run.

Field names follow the upstream ROLL agentic docs (exp_name, max_steps, adv_estimator, actor_train,
train_env_manager, custom_envs, ...). Unknown keys are rejected with the list of valid ones, so a typo
never silently falls back to a default. These models are the single place where defaults live, and they are
set for a pretrained instruct model (docs/config.md#defaults): the env's own instruction, the sampled k3 KL,
a learning rate of 1e-6, 128-token turns, every sampled token trained. `pretrain` has no default. The
builtin tiny models' recipe is `config.tiny_recipe` (Hydra config `roll_tiny`), which `roll train` with no
config file runs (the tiny model learning FrozenLake on a CPU).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from roll_algos import DEFAULT_POLICY_LOSS, FULL_KL_KINDS, estimator_spec

from roll_pipeline.config.checks import config_problems, estimator_problem, policy_loss_problem
from roll_pipeline.config.envs import CustomEnvConfig, EnvManagerConfig, default_val_envs, val_subset_problems
from roll_pipeline.config.roles import (
    ClusterConfig,
    GeneratingArgs,
    ModelArgs,
    StrategyArgs,
    StrictModel,
    TrainingArgs,
    WorkerConfig,
)

__all__ = [
    "AgenticConfig",
    "ClusterConfig",
    "CustomEnvConfig",
    "EnvManagerConfig",
    "GeneratingArgs",
    "ModelArgs",
    "StrategyArgs",
    "StrictModel",
    "TrainingArgs",
    "WorkerConfig",
    "default_values",
]

LossAggModeName = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]


class AgenticConfig(StrictModel):
    """Everything an agentic RL run needs; see docs/config.md for each field."""

    exp_name: str = Field("agentic", description="name of the run (its folder under output_dir)")
    seed: int = Field(42, description="seeds the env seed stream, sampling and mini-batch order")
    output_dir: str = Field("runs", description="run directory = output_dir/exp_name")
    pretrain: str | None = Field(
        None,
        description="a local model folder; a Hugging Face hub id (Org/Name), loaded from the Hugging Face cache"
        " (HF_HUB_CACHE or HF_HOME/hub) and downloaded there first unless HF_HUB_OFFLINE=1; or 'builtin:NAME',"
        " a tiny model built offline",
    )
    max_steps: int = Field(400, ge=0, description="training steps (one rollout + one actor update each)")
    save_steps: int = Field(80, ge=1, description="checkpoint every this many steps (and at the end)")
    eval_steps: int = Field(20, ge=1, description="validate every this many steps and at max_steps")
    validate_at_start: bool = Field(
        True,
        description="validate before the first step (or the resumed step), the start of every curve; false"
        " skips it, for runs whose start is known (an ablation of one setting, a resume at a validated step)",
    )
    logging_steps: int = Field(
        1,
        ge=1,
        description="log metrics every this many steps (and at every validation step, whatever it is)",
    )
    rollout_batch_size: int | None = Field(
        None, ge=1, description="trajectories per step (default: all train envs)"
    )
    val_batch_size: int | None = Field(None, ge=1, description="validation episodes (default: all val envs)")
    val_subset_size: int | None = Field(
        None,
        ge=1,
        description="episodes of every validation but the one at max_steps: the first this many of the"
        " validation's fixed seeds (the same at each pass, never chosen by score; whole val groups, fewer than"
        " val_batch_size's); the one at max_steps plays them (val/subset/env/TAG/success) and then all"
        " val_batch_size (val/env/...); val/episodes says what each pass played. null: every pass plays all",
    )
    sequence_length: int = Field(1024, ge=16, description="max tokens of a prompt plus its response")
    async_generation_ratio: int = Field(
        1,
        ge=0,
        description="0: synchronous rollout (paused while the trainer trains, every turn from the current"
        " weights); r > 0: env loops keep generating during training, up to (1 + r) batches ahead, and a group"
        " with a turn more than r policy versions old is dropped (docs/rollout.md)",
    )
    rollout_filter_ratio: float = Field(
        1.0,
        gt=0,
        le=1,
        description="StarPO-S: collect rollout_batch_size / ratio trajectories per step and keep the groups of"
        " largest reward std (1: no filter)",
    )
    rollout_batch_timeout_s: float = Field(
        900.0,
        gt=0,
        description="a rollout that cannot deliver its batch within this time (every env failing, a hung"
        " policy) stops the run with an error naming the last failure",
    )
    max_consecutive_skipped_steps: int = Field(
        5,
        ge=1,
        description="steps in a row with nothing to train on (each logged with its reason) before the run"
        " stops with an error",
    )
    max_consecutive_nonfinite_steps: int = Field(
        5,
        ge=1,
        description="optimiser steps in a row (actor or critic) skipped for a NaN/inf loss or gradient norm"
        " (each counted in actor/nonfinite_steps, critic/nonfinite_steps) before the run stops with an error"
        " naming the step and the first non-finite quantity",
    )
    adv_estimator: str = Field(
        "gigpo",
        description="advantage estimator: a name registered in roll_algos (the builtins grpo, reinforce, gae,"
        " reinforce_plus_plus, gigpo, step_reinforce, agentic_reinforce, or a plugin's: docs/algos/registry.md)",
    )
    ppo_epochs: int = Field(1, ge=1, description="passes over each rollout")
    model_update_frequency: int = Field(
        1,
        ge=1,
        description="sync the trained weights to actor_infer every this many steps (bucketed, versioned); in"
        " between, the rollout samples from the last synced version",
    )
    recompute_old_log_probs: bool = Field(
        False,
        description="recompute the rollout's log-probs with the training model; false reuses the sampler's"
        " (exact when both run the same weights and numerics, e.g. HF on the CPU; set true for bf16, and a vllm"
        " actor_infer requires it)."
        " With async_generation_ratio > 0, false makes the PPO ratio pi / pi_behaviour (the clip bounds the"
        " off-policy ratio); true makes it pi / pi_current and tis_cap corrects pi_current / pi_behaviour",
    )
    tis_cap: float | None = Field(
        None,
        gt=0,
        description="truncated importance sampling: weight each token's policy loss by"
        " min(exp(old_log_prob - inference_log_prob), tis_cap) (needs recompute_old_log_probs; null: off)",
    )
    gamma: float = Field(
        0.9,
        ge=0,
        le=1,
        description="discount (below 1: shorter paths to the goal score higher); per env step for gigpo /"
        " step_reinforce / agentic_reinforce, per token for the others",
    )
    lambd: float = Field(1.0, ge=0, le=1, description="GAE lambda (gae only)")
    policy_loss: str = Field(
        DEFAULT_POLICY_LOSS,
        description="policy loss, a name registered in roll_algos: ppo (PPO's clipped surrogate on ratio_level's"
        " ratio), gspo (GSPO: one length-normalised ratio per sequence; a clip range above 1e-2 is refused:"
        " pg_clip_low=3e-4, pg_clip_high=4e-4 as in the paper; no skip_confident_tokens), or a plugin's"
        " (docs/algos/policy_loss.md)",
    )
    pg_clip: float = Field(0.2, gt=0, description="PPO ratio clip range")
    pg_clip_low: float | None = Field(None, gt=0, description="lower clip range (default pg_clip)")
    pg_clip_high: float | None = Field(None, gt=0, description="upper clip range (default pg_clip)")
    dual_clip_loss: bool = Field(False, description="dual-clip PPO (c=3) for negative advantages")
    ratio_level: Literal["token", "segment", "sequence"] = Field(
        "token",
        description="importance ratio of the PPO loss: per token (PPO), per segment (one per turn: exp of the"
        " turn's mean log-ratio), per sequence (GSPO: one per training row; use small clip ranges)",
    )
    init_kl_coef: float = Field(
        0.0,
        ge=0,
        description="KL(actor || reference) as a reward penalty with this coefficient: r_t - coef * KL_t on each"
        " response token, and the turn's / episode's summed penalty on step rewards and scores, so every"
        " estimator sees it; 0: off",
    )
    target_kl: float | None = Field(
        None,
        gt=0,
        description="adaptive KL controller (Ziegler et al.): steer the measured KL per token towards this by"
        " scaling the KL coefficients in use (init_kl_coef, kl_loss_coef); null: fixed coefficients",
    )
    kl_horizon: int = Field(10000, ge=1, description="adaptive KL horizon, in trajectories (needs target_kl)")
    kl_penalty: Literal["kl", "abs", "mse", "k3", "full", "full_forward"] = Field(
        "k3",
        description="per-token KL estimator of the reward penalty, the loss term and the measured KL; k3, kl, abs"
        " and mse read the sampled tokens' log-probs; full is the exact KL(actor || reference) over the vocabulary,"
        " full_forward the exact KL(reference || actor): it pulls back a token the actor has given up in"
        " proportion to the reference's probability of it (keeps exploring). The exact ones run in the trainer"
        " against a frozen reference copy there (one more model in its memory, activations O(chunk x"
        " vocabulary); docs/training.md)",
    )
    kl_reference: Literal["pretrained", "rl_start"] = Field(
        "pretrained",
        description="the KL term's reference weights: pretrain's, or rl_start: the actor's as the first RL step"
        " starts (after demonstration_steps: the clone; with none, pretrain's); rl_start needs a KL term",
    )
    use_kl_loss: bool = Field(True, description="add kl_loss_coef * KL(actor || reference) to the loss")
    kl_loss_coef: float = Field(0.01, ge=0, description="weight of the KL loss term")
    entropy_loss_coef: float = Field(
        0.0,
        ge=0,
        description="entropy bonus; 0 by default: over every response token it also randomises the answer "
        "format, while the KL term alone keeps the policy near the reference",
    )
    entropy_scope: Literal["response", "decision", "turn_max"] = Field(
        "response",
        description="the tokens the entropy bonus covers (actor/entropy is their mean): every response token;"
        " decision: those the policy-gradient term trains on (needs skip_confident_tokens), so the answer format"
        " stays sharp; turn_max: each turn's token of largest entropy (its choice), kept however sure it grows",
    )
    whiten_advantages: bool = Field(
        True,
        description="whiten advantages over the batch's response tokens; also removes their mean, whose"
        " steady sign (failing episodes have more turns) AdamW turns into a drift of every unsampled token",
    )
    skip_confident_tokens: float | None = Field(
        None,
        gt=0,
        le=1,
        description="leave out of the policy-gradient term the response tokens the old policy drew with"
        " probability >= this (format tokens: no decision, only noise that AdamW scales up); null trains all",
    )
    skip_confident_by: Literal["sampler", "reference"] = Field(
        "sampler",
        description="whose probability of a token skip_confident_tokens compares: the sampler's (the policy"
        " that drew it), or the reference model's (fixed for the run: a format token stays out however the"
        " policy drifts, and a decision the policy grew sure of stays in; needs use_kl_loss)",
    )
    norm_mean_type: Literal["mean_std", "mean", "none"] = Field("mean_std", description="group normalisation")
    gigpo_step_weight: float = Field(
        1.0, ge=0, description="gigpo: omega, the weight of the step (anchor-state) advantage"
    )
    gigpo_norm_mode: Literal["mean_std", "mean"] | None = Field(
        None,
        description="gigpo: normalisation of both its levels, std-normalised or mean-only; null: norm_mean_type",
    )
    gigpo_anchor_threshold: float = Field(
        1.0,
        gt=0,
        le=1,
        description="gigpo: merge the anchor states of similar observations of an env group (similarity >="
        " this, docs/algos/gigpo.md#anchors); 1: exact anchors (equal observations only)",
    )
    gigpo_anchor_similarity: Literal["jaccard", "difflib"] = Field(
        "jaccard",
        description="gigpo: observation similarity of gigpo_anchor_threshold: jaccard (word/punctuation sets)"
        " or difflib (SequenceMatcher ratio)",
    )
    advantage_clip: float | None = Field(None, gt=0, description="clamp advantages to [-c, c]")
    reward_clip: float | None = Field(None, gt=0, description="clamp rewards to [-c, c]")
    loss_agg_mode: LossAggModeName = Field("seq-mean-token-mean", description="how token losses aggregate")
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
        " episodes of the training tags whose every answer is the env's demonstration (BaseEnv.demonstration),"
        " and trains the actor on them with the sft loss (the negative log-likelihood of the answers; no KL, no"
        " entropy, no critic); they count in max_steps and in the time. 0: none. Every training env must"
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

    @field_validator("adv_estimator", "policy_loss")
    @classmethod
    def _registered(cls, name: str, info: ValidationInfo) -> str:
        check = estimator_problem if info.field_name == "adv_estimator" else policy_loss_problem
        if problem := check(name):
            raise ValueError(problem)
        return name

    @model_validator(mode="after")
    def _consistent(self) -> AgenticConfig:
        for name in ("train_env_manager", "val_env_manager"):
            unknown = [t for t in getattr(self, name).tags if t not in self.custom_envs]
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
    def uses_reference(self) -> bool:
        """Whether a KL term (the loss's or the reward penalty's) reads the reference model."""
        return (self.use_kl_loss and self.kl_loss_coef > 0) or self.init_kl_coef > 0

    @property
    def uses_critic(self) -> bool:
        """Whether `adv_estimator` declares that it needs a critic (its registered `needs_critic`)."""
        return estimator_spec(self.adv_estimator).needs_critic

    @property
    def reference_in_trainer(self) -> bool:
        """Whether the reference is a frozen copy inside actor_train: an exact KL needs both models' logits."""
        return self.uses_reference and self.kl_penalty in FULL_KL_KINDS

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
    def clip_range(self) -> tuple[float, float]:
        """(low, high) of the PPO ratio clip: `pg_clip_low` / `pg_clip_high` where set, else `pg_clip`."""
        low, high = self.pg_clip_low, self.pg_clip_high
        return (self.pg_clip if low is None else low, self.pg_clip if high is None else high)

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
