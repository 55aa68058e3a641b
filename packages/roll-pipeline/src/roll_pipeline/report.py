"""What `roll train` prints before and after a run: the setup, the baselines, and the result."""

from __future__ import annotations

from roll_pipeline.config import AgenticConfig


def frozen_lake_baselines(episodes: int = 1000, max_steps: int | None = None) -> dict[str, float]:
    """Success of a uniform random policy and of the best board-blind fixed move sequence."""
    from roll_envs.baselines import frozen_lake_baselines as compute

    return compute(episodes, max_steps=max_steps)


def frozen_lake_turn_cap(config: AgenticConfig) -> int | None:
    """Moves an episode may take: the smaller of the env's max_steps and max_actions_per_traj."""
    caps = [
        min(e.max_actions_per_traj, int(e.env_config.get("max_steps", 10**9)))
        for e in config.custom_envs.values()
        if e.env_type == "frozen_lake"
    ]
    return min(caps) if caps else None


def print_run_header(config: AgenticConfig) -> None:
    """Experiment, model, env setup and, for FrozenLake, the baselines to judge the result by."""
    train = config.train_env_manager
    print(f"[roll] experiment {config.exp_name!r} -> {config.output_dir}/{config.exp_name}")
    print(
        f"[roll] model {config.pretrain}; {config.max_steps} steps of {config.train_rollout_batch_size} "
        f"trajectories ({train.num_env_groups} groups x {train.group_size}); estimator {config.adv_estimator}; "
        f"backend {config.cluster.backend}"
    )
    if config.print_baselines and any(e.env_type == "frozen_lake" for e in config.custom_envs.values()):
        try:
            base = frozen_lake_baselines(max_steps=frozen_lake_turn_cap(config))
        except Exception as exc:  # baselines are a courtesy; never block a run on them
            print(f"[roll] (baselines unavailable: {exc})")
            return
        print(
            "[roll] FrozenLake baselines on held-out maps: "
            + ", ".join(f"{k} {v:.1%}" for k, v in base.items())
            + ". At or below the fixed-sequence baseline the agent does not read the board."
        )


def print_final_report(config: AgenticConfig, summary: object) -> None:
    """Validation success before and after, wall time and where the artefacts are."""
    from roll_pipeline.pipeline import RunSummary

    assert isinstance(summary, RunSummary)
    print(f"[roll] done: {summary.steps} steps in {summary.wall_time_s / 60:.1f} min")
    if summary.val_history:
        first_step, _ = summary.val_history[0]
        last_step, _ = summary.val_history[-1]
        print(
            f"[roll] validation success (greedy, {config.val_rollout_batch_size} held-out seeds): "
            f"step {first_step}: {summary.val_success(0):.3f} -> step {last_step}: {summary.val_success(-1):.3f}"
        )
    print(f"[roll] TensorBoard: tensorboard --logdir {summary.run_dir / 'tensorboard'}")
    print(f"[roll] metrics: {summary.run_dir / 'metrics.jsonl'}; learning curve: roll plot {summary.run_dir}")
    if summary.last_checkpoint:
        print(f"[roll] last checkpoint: {summary.last_checkpoint}")
