"""Cross-field checks of `AgenticConfig`: no setting may be accepted and then do nothing.

A value that the run would silently ignore (a role's optimiser settings on a role that is never
trained, critic settings without a critic, an adaptive-KL horizon without a target) is reported as a
problem with the fix. `AgenticConfig`'s validator raises them all at once; `roll config` / `roll train`
print them one per line; the roles' own checks are `config.role_checks`. Backend names are checked against the installed extras in
`roll_pipeline.config.strategies.strategy_problems`. What depends on the advantage estimator is read from
its registered declaration (`roll_algos.EstimatorSpec`: needs_critic, options), never from its name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from roll_algos import (
    AlgosError,
    estimator_spec,
    gspo_clip_problem,
    policy_loss_spec,
    registered_estimators,
    registered_policy_losses,
    skipped_tokens_problem,
)
from roll_rollout.hosting.env_kinds import env_kind

from roll_pipeline.config.role_checks import (
    exact_kl_reference_problems,
    gpu_problems,
    rank_problems,
    role_problems,
    vllm_problems,
)
from roll_pipeline.config.tiny_recipe import is_set

if TYPE_CHECKING:
    from roll_pipeline.config.schema import AgenticConfig

__all__ = [
    "CRITIC_FIELDS",
    "ESTIMATOR_OPTION_FIELDS",
    "POLICY_LOSS_OPTION_FIELDS",
    "config_problems",
    "estimator_problem",
    "policy_loss_problem",
]


CRITIC_FIELDS = ("critic", "critic_warmup", "value_clip")
"""Top-level fields that only an estimator declaring `needs_critic` reads."""

ESTIMATOR_OPTION_FIELDS = (
    "lambd",
    "gigpo_step_weight",
    "gigpo_norm_mode",
    "gigpo_anchor_threshold",
    "gigpo_anchor_similarity",
)
"""Top-level fields passed to the estimator as the `AdvantageConfig` field of the same name; only an estimator
declaring it in its `options` reads it."""


def _registry_problem(lookup: Callable[[str], object], name: str) -> str | None:
    """The registry's error for `name` (the registered names and how to register one); None when registered."""
    try:
        lookup(name)
    except AlgosError as exc:
        return str(exc)
    return None


def estimator_problem(name: str) -> str | None:
    """Why `name` is no usable `adv_estimator` (None when it is registered)."""
    return _registry_problem(estimator_spec, name)


POLICY_LOSS_OPTION_FIELDS = {"dual_clip_loss": "dual_clip", "ratio_level": "ratio_level"}
"""Top-level field -> the `roll_algos.PolicyLossConfig` option it sets; only a policy loss declaring that option
reads it."""


def policy_loss_problem(name: str) -> str | None:
    """Why `name` is no usable `policy_loss` (None when it is registered)."""
    return _registry_problem(policy_loss_spec, name)


def _policy_loss_option_problems(cfg: AgenticConfig) -> list[str]:
    """Loss settings the configured `policy_loss` does not declare among its options (it would ignore them)."""
    spec = policy_loss_spec(cfg.policy_loss)
    options = POLICY_LOSS_OPTION_FIELDS
    unread = [f for f, option in options.items() if option not in spec.options and is_set(cfg, f)]
    if not unread:
        return []
    wanted = {options[f] for f in unread}
    readers = [n for n in registered_policy_losses() if wanted <= set(policy_loss_spec(n).options)]
    return [
        f"{', '.join(unread)} set, but policy_loss={cfg.policy_loss!r} does not read it (docs/algos/policy_loss.md);"
        f" drop {', '.join(unread)}, or set policy_loss to one that reads it: {'/'.join(readers)}"
    ]


def _readers(wanted: str) -> str:
    """`adv_estimator=a/b` for the registered estimators that declare `wanted` ('critic' or an option)."""
    names = [
        n
        for n in registered_estimators()
        if (estimator_spec(n).needs_critic if wanted == "critic" else wanted in estimator_spec(n).options)
    ]
    return f"adv_estimator={'/'.join(names)}" if names else "no registered adv_estimator"


def _estimator_problems(cfg: AgenticConfig) -> list[str]:
    problems = []
    spec = estimator_spec(cfg.adv_estimator)
    unused = [] if spec.needs_critic else [name for name in CRITIC_FIELDS if is_set(cfg, name)]
    if unused:
        readers = _readers("critic")
        problems.append(
            f"{', '.join(unused)} set, but only {readers} uses a critic (got {cfg.adv_estimator!r}); set"
            f" {readers} or remove them"
        )
    for name in ESTIMATOR_OPTION_FIELDS:
        if name not in spec.options and is_set(cfg, name):
            readers = _readers(name)
            problems.append(
                f"{name} set, but only {readers} reads it (got {cfg.adv_estimator!r}); set {readers} or"
                f" remove {name}"
            )
    exact = cfg.gigpo_anchor_threshold >= 1.0
    if "gigpo_anchor_similarity" in spec.options and exact and is_set(cfg, "gigpo_anchor_similarity"):
        problems.append(
            "gigpo_anchor_similarity set with gigpo_anchor_threshold=1 (exact anchors): no similarity is"
            " computed; set gigpo_anchor_threshold < 1 (e.g. 0.9) or drop gigpo_anchor_similarity"
        )
    if cfg.sample_shape == "trajectory":  # an agent's history is its own: its calls chain or train as steps
        cut = [
            t
            for t in cfg.train_env_manager.tags
            if cfg.custom_envs[t].max_history_turns is not None
            and not env_kind(cfg.custom_envs[t].env_type).agent_plays
        ]
        if cut:
            problems.append(
                f"sample_shape=trajectory trains each episode as one conversation, but custom_envs {cut} cut the"
                " history from prompts (max_history_turns is not null), so no single sequence holds what the"
                " policy saw at every turn; set their max_history_turns: null, or sample_shape=step"
            )
    return problems


def _loss_problems(cfg: AgenticConfig) -> list[str]:
    problems = []
    if cfg.target_kl is None and is_set(cfg, "kl_horizon"):
        problems.append(
            "kl_horizon set without target_kl: it only shapes the adaptive controller; set target_kl"
        )
    if cfg.target_kl is not None and not cfg.uses_reference:
        problems.append(
            "target_kl set, but no KL term is on for the controller to scale; set init_kl_coef > 0 (reward"
            " penalty) or use_kl_loss=true with kl_loss_coef > 0"
        )
    if cfg.kl_reference == "rl_start" and not cfg.uses_reference:
        problems.append(
            "kl_reference=rl_start sets the weights of the KL term's reference, but no KL term reads the"
            " reference; set use_kl_loss=true with kl_loss_coef > 0 (or init_kl_coef > 0), or drop kl_reference"
        )
    if not cfg.use_kl_loss and is_set(cfg, "kl_loss_coef"):
        problems.append("kl_loss_coef set with use_kl_loss=false: set use_kl_loss=true or drop kl_loss_coef")
    if cfg.skip_confident_by == "reference" and not (cfg.use_kl_loss and cfg.skip_confident_tokens):
        problems.append(
            "skip_confident_by=reference compares the reference model's probabilities, which the update sees"
            " only with use_kl_loss=true, and only matters with skip_confident_tokens set; set both, or drop it"
        )
    scoped = cfg.entropy_scope == "turn_max" or cfg.skip_confident_tokens
    if cfg.entropy_scope != "response" and not (scoped and cfg.entropy_loss_coef > 0):
        problems.append(
            f"entropy_scope={cfg.entropy_scope} scopes an entropy bonus (decision: to the tokens skip_confident_tokens"
            " keeps); set entropy_loss_coef > 0 (and skip_confident_tokens for decision), or drop entropy_scope"
        )
    sampling = cfg.actor_infer.generating_args
    if sampling.reshapes_sampling() and not cfg.recompute_old_log_probs:
        problems.append(
            "actor_infer samples with temperature (or temperature_schedule)/top_p/top_k, so its log-probs are of the reshaped distribution"
            " while the trainer's are of the model's own: with recompute_old_log_probs=false the PPO ratio would"
            " compare the two; set recompute_old_log_probs=true (tis_cap then reweights to the model's"
            " distribution), or sample with temperature 1, top_p 1, top_k 0"
        )
    if cfg.tis_cap is not None and not cfg.recompute_old_log_probs:
        problems.append(
            "tis_cap needs recompute_old_log_probs=true: without recomputation the old log-probs are the"
            " inference ones and every importance weight is 1; set both, or drop tis_cap"
        )
    if cfg.pg_clip_low is not None and cfg.pg_clip_high is not None and is_set(cfg, "pg_clip"):
        problems.append("pg_clip set while pg_clip_low and pg_clip_high override it on both sides; drop one")
    skipped = skipped_tokens_problem(cfg.policy_loss, cfg.ratio_level, cfg.skip_confident_tokens)
    clip = gspo_clip_problem(*cfg.clip_range)
    problems += [skipped] if skipped else []
    problems += [clip] if clip and cfg.policy_loss == "gspo" else []
    return problems


def _honoured_settings_problems(cfg: AgenticConfig) -> list[str]:
    """Settings that would be accepted and not honoured: a render count without a render folder, W&B's arguments
    with W&B off, and a tag's token budget above the sampler's (a turn stops at the smaller of the two)."""
    problems = []
    if cfg.render_save_dir is None and is_set(cfg, "render_episodes_per_tag"):
        problems.append(
            "render_episodes_per_tag set with render_save_dir=null: nothing is rendered; set render_save_dir"
            " (e.g. render_save_dir=renders) or drop render_episodes_per_tag"
        )
    if cfg.tracker_kwargs and "wandb" not in cfg.track_with:
        problems.append(
            f"tracker_kwargs {sorted(cfg.tracker_kwargs)} only reach W&B (wandb.init), which track_with"
            f" {cfg.track_with} leaves off; TensorBoard and metrics.jsonl are always written in the run folder."
            " Add wandb to track_with, or drop tracker_kwargs"
        )
    budget = cfg.actor_infer.generating_args.max_new_tokens
    for tag, env in cfg.custom_envs.items():
        default_turn = type(env).model_fields["max_tokens_per_step"].default
        if env.max_tokens_per_step > budget and env.max_tokens_per_step != default_turn:
            problems.append(
                f"custom_envs.{tag}.max_tokens_per_step={env.max_tokens_per_step} is above"
                f" actor_infer.generating_args.max_new_tokens={budget}, which caps every turn; raise"
                f" max_new_tokens to {env.max_tokens_per_step}, or lower max_tokens_per_step to {budget}"
            )
    return problems


def config_problems(cfg: AgenticConfig) -> list[str]:
    """Every cross-field problem of a config (empty when it is consistent)."""
    return (
        _honoured_settings_problems(cfg)
        + role_problems(cfg)
        + exact_kl_reference_problems(cfg)
        + rank_problems(cfg)
        + gpu_problems(cfg)
        + _estimator_problems(cfg)
        + _loss_problems(cfg)
        + _policy_loss_option_problems(cfg)
        + vllm_problems(cfg)
    )
