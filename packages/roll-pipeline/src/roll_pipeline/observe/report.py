"""What `roll train` prints before and after a run: the setup, the baselines, and the result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from roll_algos import estimator_spec

from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.observe.summary import RunSummary

if TYPE_CHECKING:
    from roll_envs import EnvBaselines


def env_id_baselines(env_id: str, episodes: int = 1000, max_steps: int | None = None) -> EnvBaselines:
    """The baselines of a registered env with its default config (`roll baselines`), at `max_steps` turns
    (default: the env's own `max_steps`); ValueError naming the envs that have some when it has none."""
    import roll_envs

    env = roll_envs.make(env_id, render_mode=None)
    found = roll_envs.env_baselines(env, env.config.max_steps if max_steps is None else max_steps, episodes)
    env.close()
    if found is None:
        raise ValueError(
            f"env {env_id!r} has no baselines; envs with some: {', '.join(envs_with_baselines())}"
        )
    return found


def envs_with_baselines() -> list[str]:
    """Registered env ids whose default build has baselines (`roll_envs.baselines.has_baselines`)."""
    import roll_envs
    from roll_envs.baselines import has_baselines

    ids = []
    for env_id in roll_envs.list_envs():
        try:
            env = roll_envs.make(env_id, render_mode=None)
        except Exception:  # an env needing extra config has no default build
            continue
        if has_baselines(env):
            ids.append(env_id)
        env.close()
    return ids


def tag_baselines(
    config: AgenticConfig, episodes: int = 1000, *, validation_only: bool = False
) -> dict[str, EnvBaselines]:
    """`roll_envs.EnvBaselines` of each tag the run plays (validation tags first; `validation_only`: only
    them) whose env has some, at the tag's turn cap: the smaller of `max_actions_per_traj` and the env's
    `max_steps`."""
    import roll_envs

    tags = [*config.val_env_manager.tags, *([] if validation_only else config.train_env_manager.tags)]
    found = {}
    for tag in dict.fromkeys(tags):
        spec = config.custom_envs[tag]
        env = roll_envs.make(spec.env_type, render_mode=None, **spec.env_config)
        turns = min(spec.max_actions_per_traj, env.config.max_steps)
        result = roll_envs.env_baselines(env, turns, episodes)
        env.close()
        if result is not None:
            found[tag] = result
    return found


def baseline_lines(config: AgenticConfig, *, validation_only: bool = False) -> dict[str, float]:
    """The reference lines of a learning curve: `NAME baseline` per success rate, prefixed by the tag
    when several tags have baselines (`validation_only`: the validation tags', for a validation curve)."""
    found = tag_baselines(config, validation_only=validation_only)
    prefix = len(found) > 1
    return {
        f"{tag} {name} baseline" if prefix else f"{name} baseline": value
        for tag, result in found.items()
        for name, value in result.success.items()
    }


def print_run_header(config: AgenticConfig) -> None:
    """Experiment, model, env setup and, for each tag whose env has baselines, the baselines to judge
    the result by."""
    train = config.train_env_manager
    est = estimator_spec(config.adv_estimator)
    kind = ", ".join(
        [f"{est.level}-level"] + ["group-based"] * est.group_based + ["critic"] * est.needs_critic
    )
    print(f"[roll] experiment {config.exp_name!r} -> {config.output_dir}/{config.exp_name}")
    print(
        f"[roll] model {config.pretrain}; {config.max_steps} steps of {config.train_rollout_batch_size} "
        f"trajectories ({train.num_env_groups} groups x {train.group_size}); estimator {config.adv_estimator}"
        f" ({kind}); backend {config.cluster.backend}"
    )
    if not config.print_baselines:
        return
    try:
        found = tag_baselines(config)
    except Exception as exc:  # baselines are a courtesy; never block a run on them
        print(f"[roll] (baselines unavailable: {exc})")
        return
    for tag, base in found.items():
        name = base.env if tag == base.env else f"{tag} ({base.env})"
        rates = ", ".join(f"{k} {v:.1%}" for k, v in base.success.items())
        print(f"[roll] {name} baselines on held-out {base.episodes}: {rates}. {base.note}")


def print_final_report(config: AgenticConfig, summary: RunSummary) -> None:
    """Validation success before and after, wall time and where the artefacts are."""
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
