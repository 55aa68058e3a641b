"""Env tags and env managers of an agentic run: which registered envs play (`custom_envs`), in how many groups
of how many slots (`train_env_manager`, `val_env_manager`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from roll_pipeline.config.roles import StrictModel

if TYPE_CHECKING:
    from roll_pipeline.config.schema import AgenticConfig

__all__ = ["CustomEnvConfig", "EnvManagerConfig", "default_val_envs", "val_subset_problems"]


class EnvManagerConfig(StrictModel):
    """How many envs run, in which groups, with which tags."""

    max_env_num_per_worker: int | None = Field(
        None,
        ge=1,
        description="envs hosted by one env worker (Ray actor); null: 64, or more so that the manager has no more"
        " env workers than the driver's usable CPUs (extra workers only compete for the cores; on a multi-node"
        " cluster set it). max_env_step_concurrent applies per worker",
    )
    num_env_groups: int = Field(16, ge=1, description="groups of envs; each group plays one seed per step")
    group_size: int = Field(8, ge=1, description="envs per group; they share the episode seed (GRPO group)")
    tags: list[str] = Field(
        default_factory=lambda: ["FrozenLake"], description="env tags (keys of custom_envs)"
    )
    num_groups_partition: list[int] | None = Field(
        None, description="groups per tag; default: all to the first"
    )
    group_size_redundancy: int = Field(
        0,
        ge=0,
        description="extra env slots per group: a group completes on its first group_size finishers and the"
        " stragglers are cancelled (tail latency for compute)",
    )
    max_env_step_concurrent: int = Field(
        8, ge=1, description="env reset/step calls running at once per env worker (its thread pool)"
    )
    env_step_timeout_s: float = Field(
        60.0,
        gt=0,
        description="an env constructor, reset or step taking longer fails its episode; the env is recreated",
    )
    env_step_backup_after_s: float = Field(
        2.0,
        ge=0,
        description="a reset or step running longer than this (or 200x the median of its worker's recent ones, "
        "if more) has its episode backed up: a replica (the same seed and sampling keys) plays on a free env slot. "
        "In training the episode still trains whenever it ends, whatever its time, and the backup replaces it "
        "if it fails or hits env_step_timeout_s, or if it ends first and replayed what the episode had played "
        "with the same weights (the policy servers sample by key: it took the same actions; docs/rollout.md, "
        "Faults); otherwise a hung call holds its group until that timeout, but no replay follows it. In "
        "validation the first episodes to finish count, so a hung call holds a pass for about this long; 0 turns "
        "backups off",
    )
    max_hung_env_calls: int = Field(
        4,
        ge=1,
        description="timed-out env calls still stuck in their threads before the env worker is replaced",
    )
    max_failures_per_group: int = Field(
        4,
        ge=0,
        description="failed episodes a group episode survives (each replayed on a fresh env, same seed) before"
        " the group is given up; validation never replays (a failed episode fails its seed)",
    )

    @model_validator(mode="after")
    def _partition(self) -> EnvManagerConfig:
        if self.num_groups_partition is None:
            share, rest = divmod(self.num_env_groups, len(self.tags))
            self.num_groups_partition = [share + (i < rest) for i in range(len(self.tags))]
        if (
            len(self.num_groups_partition) != len(self.tags)
            or sum(self.num_groups_partition) != self.num_env_groups
        ):
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

    env_type: str = Field("frozen_lake", description="registry id of the env (`roll-envs list`)")
    max_actions_per_traj: int = Field(
        8, ge=1, description="agent turns per episode (a multi-player game: every seat's moves together)"
    )
    max_tokens_per_step: int = Field(
        128, ge=1, description="new tokens per turn (a short reasoning and the answer)"
    )
    max_history_turns: int | None = Field(
        0,
        ge=0,
        description="earlier turns kept in the prompt; null = all. The default 0 (the current observation alone)"
        " fits envs whose observation shows the whole state (FrozenLake, Sokoban, TicTacToe, four_choice) and keeps"
        " prompts short; an env whose observation does not (a search, a dialogue, a tool's output) needs its"
        " history: null (sample_shape auto then trains whole episodes) or the turns it needs",
    )
    env_instruction: str | None = Field(
        None,
        description="system prompt; null = the env's own instruction; empty = none (the observation alone)",
    )
    response_prefix: str = Field(
        "",
        description="text every assistant turn starts with, e.g. '<answer>': part of the prompt (neither sampled"
        " nor trained); the env reads it followed by the sampled text",
    )
    env_config: dict[str, Any] = Field(
        default_factory=dict, description="keyword config of the env (validated by the env)"
    )
    fixed_players: dict[str, str] = Field(
        default_factory=dict,
        description="seats of a multi-player env played by one of its fixed policies, e.g. {O: random}; the"
        " trained policy plays every other seat (self-play when that is more than one), each seat's turns"
        " training as trajectories of their own",
    )


def default_val_envs() -> EnvManagerConfig:
    return EnvManagerConfig(num_env_groups=128, group_size=1)


def val_subset_problems(cfg: AgenticConfig) -> list[str]:
    """What is wrong with `val_subset_size` (the first whole groups of a validation, fewer than all)."""
    subset, episodes, group = cfg.val_subset_size, cfg.val_rollout_batch_size, cfg.val_env_manager.group_size
    if subset is None or (subset < episodes and subset % group == 0):
        return []
    return [
        f"val_subset_size={subset} must be a multiple of val_env_manager.group_size={group} (whole groups)"
        f" and below the {episodes} episodes of a whole validation (val_batch_size), of which it plays the first;"
        f" set it to a multiple of {group} under {episodes}, or null to play all at every validation"
    ]
