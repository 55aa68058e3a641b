"""What `roll train` prints before and after a run: the setup, the baselines, and the result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from roll_algos import estimator_spec
from roll_rollout.hosting.env_kinds import env_kind

from roll_pipeline.config.schema import AgenticConfig
from roll_pipeline.observe.summary import SUBSET_PREFIX, RunSummary

if TYPE_CHECKING:
    from roll_envs import EnvBaselines


def env_id_baselines(env_id: str, episodes: int = 1000, max_steps: int | None = None) -> EnvBaselines:
    """The baselines of a registered env with its default config (`roll baselines --env`), at `max_steps`
    turns (default: the env's own `max_steps`), on `episodes` episodes from `roll_envs.HELD_OUT_SEED_START`,
    with their distinct first observations counted; ValueError naming the envs that have some when it has
    none."""
    import roll_envs
    from roll_envs.baselines import distinct_observations

    env = roll_envs.make(env_id, render_mode=None)
    try:
        turns = env.config.max_steps if max_steps is None else max_steps
        found = roll_envs.env_baselines(env, turns, episodes)
        if found is not None:
            found = found._replace(observations=distinct_observations(env, found.seeds))
    finally:
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


def validation_seeds_by_tag(config: AgenticConfig) -> dict[str, tuple[int, ...]]:
    """The seeds each validation tag plays at a validation of the run: `val_rollout_batch_size / group_size`
    groups, one seed each from `roll_rollout.validation_seeds`, handed to the tags in order in the shares of
    `num_groups_partition` (`TagMix`), as the pipeline's first validation does (step 0; later ones split
    the same way whenever the shares are whole numbers)."""
    from roll_rollout import TagMix, validation_seeds

    manager = config.val_env_manager
    groups = config.val_rollout_batch_size // manager.group_size
    partition = manager.num_groups_partition or [1] * len(manager.tags)
    need = TagMix(dict(zip(manager.tags, partition, strict=True))).split(groups)
    seeds = iter(validation_seeds(groups))
    return {tag: tuple(next(seeds) for _ in range(need.get(tag, 0))) for tag in manager.tags}


TRAINING_SEEDS_CHECKED = 2000
"""How many of a run's first training seeds its validation episodes are compared with (`tag_baselines`)."""


def tag_baselines(
    config: AgenticConfig, episodes: int = 1000, *, validation_only: bool = False
) -> dict[str, EnvBaselines]:
    """`roll_envs.EnvBaselines` of each tag the run plays (validation tags first; `validation_only`: only
    them) whose env has some, at the tag's turn cap (the smaller of `max_actions_per_traj` and the env's
    `max_steps`), with the number of distinct first observations of the episodes scored. A validation tag's
    are scored on exactly its validation seeds (`validation_seeds_by_tag`), the episodes its validation
    success is measured on, and count how many of them training also plays (`training_overlap`); a tag
    that is only trained has no fixed episodes: its are scored on `episodes` episodes from
    `roll_envs.HELD_OUT_SEED_START`."""
    import roll_envs
    from roll_envs.baselines import first_observations

    validated = validation_seeds_by_tag(config)
    tags = [*validated, *([] if validation_only else config.train_env_manager.tags)]
    found = {}
    for tag in dict.fromkeys(tags):
        spec = config.custom_envs[tag]
        if env_kind(spec.env_type).agent_plays or (tag in validated and not validated[tag]):
            continue  # an agent tag (no env of its own to score), or a validation tag with no episode
        env = roll_envs.make(spec.env_type, render_mode=None, **spec.env_config)
        try:
            turns = min(spec.max_actions_per_traj, env.config.max_steps)
            result = roll_envs.env_baselines(env, turns, episodes, seeds=validated.get(tag))
            if result is not None:
                opening = first_observations(env, result.seeds)
                overlap = training_overlap(config, spec.env_type, opening) if tag in validated else None
                found[tag] = result._replace(observations=len(set(opening)), in_training=overlap)
        finally:
            env.close()
    return found


def training_overlap(config: AgenticConfig, env_type: str, opening: list[str]) -> tuple[int, int] | None:
    """(k, n): k of the episodes whose first observations are `opening` open as an episode of the run's
    first n training seeds (`TRAINING_SEEDS_CHECKED`, `roll_rollout.first_training_seeds`) does on a
    training tag of `env_type`; None when no training tag has that env type. A run with several such tags
    plays each seed on one of them, not on all: there k is an upper bound."""
    import roll_envs
    from roll_envs.baselines import first_observations
    from roll_rollout import first_training_seeds

    seeds = first_training_seeds(config.seed, TRAINING_SEEDS_CHECKED)
    specs = [config.custom_envs[t] for t in dict.fromkeys(config.train_env_manager.tags)]
    specs = [spec for spec in specs if spec.env_type == env_type]
    if not specs:
        return None
    trained: set[str] = set()
    for spec in specs:
        env = roll_envs.make(spec.env_type, render_mode=None, **spec.env_config)
        try:
            trained.update(first_observations(env, seeds))
        finally:
            env.close()
    return sum(o in trained for o in opening), len(seeds)


def baseline_lines(config: AgenticConfig, *, validation_only: bool = False) -> dict[str, float]:
    """The reference lines of a learning curve: `NAME baseline` per success rate, prefixed by the tag
    when several tags have baselines (`validation_only`: the validation tags', on their validation seeds,
    for a validation curve)."""
    found = tag_baselines(config, validation_only=validation_only)
    prefix = len(found) > 1
    return {
        f"{tag} {name} baseline" if prefix else f"{name} baseline": value
        for tag, result in found.items()
        for name, value in result.success.items()
    }


def few_observations(base: EnvBaselines) -> str:
    """`N distinct first observations` when the scored episodes show fewer than half as many different
    first observations as there are episodes (the same prompts repeat), else empty."""
    count, episodes = base.observations, len(base.seeds)
    if count is None or 2 * count > episodes:
        return ""
    return f"{count} distinct first observation{'s' * (count != 1)}"


def seen_in_training(base: EnvBaselines) -> str:
    """`K of them also among the first N training EPISODES` when counted (`EnvBaselines.in_training`),
    else empty."""
    if base.in_training is None:
        return ""
    shared, checked = base.in_training
    return f"{shared} of them also among the first {checked:,} training {base.episodes}"


def scored_on(base: EnvBaselines, validated: bool) -> str:
    """Which episodes a tag's baselines were scored on, e.g. `the 64 validation episodes (seeds
    1000000000-1000000063; 4 distinct first observations; 64 of them also among the first 2,000 training
    episodes)`."""
    seeds = base.seeds
    span = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"
    if len(seeds) > 1 and list(seeds) != list(range(seeds[0], seeds[-1] + 1)):
        span = f"{len(seeds)} seeds from {seeds[0]}"
    what = f"the {len(seeds)} validation {base.episodes}" if validated else f"{len(seeds)} {base.episodes}"
    if not validated:
        span = f"a training tag, not validated: {span}"
    notes = [span, few_observations(base), seen_in_training(base)]
    return f"{what} ({'; '.join(filter(None, notes))})"


def print_run_header(config: AgenticConfig) -> None:
    """Experiment, model, env setup and, for each tag whose env has baselines, the baselines to judge
    the result by, on the episodes they were scored on."""
    train = config.train_env_manager
    est = estimator_spec(config.adv_estimator)
    kind = ", ".join(
        [f"{est.level}-level"] + ["group-based"] * est.group_based + ["critic"] * est.needs_critic
    )
    cloning = ""
    if config.demonstration_steps:
        demo = config.demonstration_env_manager  # None: they play the training envs' layout, named below
        layout = f", {demo.num_env_groups} groups x {demo.group_size}" if demo else ""
        cloning = f" (the first {config.demonstration_steps} cloning the envs' demonstrations{layout})"
    print(f"[roll] experiment {config.exp_name!r} -> {config.output_dir}/{config.exp_name}")
    print(
        f"[roll] model {config.pretrain}; {config.max_steps} steps{cloning} of {config.train_rollout_batch_size} "
        f"trajectories ({train.num_env_groups} groups x {train.group_size}); estimator {config.adv_estimator}"
        f" ({kind}); backend {config.cluster.backend}"
    )
    if not config.print_baselines:
        return
    # with val_subset_size, also on the subset: the curve's episodes until the validation at max_steps
    subset = config.val_subset_size
    on_subset = config.model_copy(update={"val_batch_size": subset, "val_subset_size": None})
    try:
        found = {(tag, False): base for tag, base in tag_baselines(config).items()}
        if subset is not None:
            found |= {
                (tag, True): base for tag, base in tag_baselines(on_subset, validation_only=True).items()
            }
    except Exception as exc:  # baselines are a courtesy; never block a run on them
        print(f"[roll] (baselines unavailable: {exc})")
        return
    for (tag, of_subset), base in found.items():
        name = base.env if tag == base.env else f"{tag} ({base.env})"
        rates = ", ".join(f"{k} {v:.1%}" for k, v in base.success.items())
        where = scored_on(base, tag in config.val_env_manager.tags)
        where = f"val_subset_size's first {where.removeprefix('the ')}" if of_subset else where
        print(f"[roll] {name} baselines on {where}: {rates}. {base.note}")


def print_final_report(config: AgenticConfig, summary: RunSummary) -> None:
    """Validation success before and after, wall time and where the artefacts are."""
    print(f"[roll] done: {summary.steps} steps in {summary.wall_time_s / 60:.1f} min")
    if summary.val_history:
        (first_step, _), (last_step, last) = summary.val_history[0], summary.val_history[-1]
        every, subset = config.val_rollout_batch_size, config.val_subset_size
        both = any(k.startswith(SUBSET_PREFIX) for k in last)
        print(
            f"[roll] validation success (greedy, {f'the first {subset} of {every}' if subset else every} held-out"
            f" seeds): step {first_step}: {summary.curve_success(0):.3f} -> step {last_step}:"
            f" {summary.curve_success(-1):.3f}"
            + (f"; all {every} at step {last_step}: {summary.val_success(-1):.3f}" if both else "")
        )
    print(f"[roll] TensorBoard: tensorboard --logdir {summary.run_dir / 'tensorboard'}")
    print(f"[roll] metrics: {summary.run_dir / 'metrics.jsonl'}; learning curve: roll plot {summary.run_dir}")
    if summary.last_checkpoint:
        print(f"[roll] last checkpoint: {summary.last_checkpoint}")
