"""`RunFields`: the top-level keys of `AgenticConfig` that shape the run itself, not its algorithm or roles: the
run's name, seed and folder, the model to start from, how long it trains and how often it checkpoints,
validates and logs, the rollout's batch sizes, sequence length and asynchrony, and the limits after which a
run that cannot progress (no batch in time, steps skipped or non-finite in a row) stops with an error.
`AgenticConfig` inherits these fields, so they stay flat keys of the run's YAML; their defaults live here.
"""

from __future__ import annotations

from pydantic import Field

from roll_pipeline.config.roles import StrictModel

__all__ = ["RunFields"]


class RunFields(StrictModel):
    """The run's own keys: name, seed, model, step counts, batch sizes and stop limits."""

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
