"""Roll's name for a ROLL key, for the errors of `roll config` / `roll train` (`config.compose`): an override or a
config file that uses a ROLL key gets roll's key, or the reason roll has none, instead of a far-fetched
did-you-mean."""

from __future__ import annotations

import fnmatch

from roll_pipeline.roll_keys.rules import match_rule

__all__ = ["hint_for"]

_HINT_TARGETS = {
    "custom_envs.*.max_steps": "custom_envs.{0}.max_actions_per_traj",
    "custom_envs.*.env_manager_cls": "sample_shape (trajectory: ROLL's TrajEnvManager, step: its StepEnvManager)",
    "custom_envs.*.history_length": "custom_envs.{0}.max_history_turns (history_length - 1)",
    "custom_envs.*.agent_system_template": "custom_envs.{0}.env_instruction (the system prompt)",
    "generating_args": "actor_infer.generating_args",
    "reward_normalization": "norm_mean_type (mean_std / mean / none)",
    "step_reward_gamma": "gamma (per env step for gigpo / step_reinforce)",
    "step_reward_weight": "gigpo_step_weight",
    "enable_old_logprobs_recompute": "recompute_old_log_probs",
    "add_token_level_kl": "init_kl_coef (> 0 turns the reward penalty on)",
    "use_pg_clip_range": "pg_clip_low / pg_clip_high",
    "prompt_length": "sequence_length",
    "response_length": "sequence_length",
    "max_tokens_per_step": "custom_envs.TAG.max_tokens_per_step (per env tag)",
    "max_actions_per_traj": "custom_envs.TAG.max_actions_per_traj (per env tag)",
}


def hint_for(keys: tuple[str, ...]) -> str | None:
    """For a key roll does not know: a sentence naming roll's key when `keys` is a ROLL key, or saying why
    roll has none; None when `keys` is no ROLL key this table knows."""
    dotted = ".".join(keys)
    for pattern, target in _HINT_TARGETS.items():
        if fnmatch.fnmatchcase(dotted, pattern) or (len(keys) > 1 and keys[-1] == pattern):
            return f"a ROLL key; roll's is {target.format(*keys[1:2])}"
    found = match_rule(keys)
    if found is None or "*" in found[0].pattern.rsplit(".", 1)[-1]:
        return None  # a catch-all rule (`x.*`) says nothing about a key roll does not know
    rule, captures = found
    if rule.kind == "rename" and rule.target != dotted:
        return f"a ROLL key; roll's is '{rule.target.format(*captures)}'"
    if rule.kind == "drop":
        return f"a ROLL key roll has no use for: {rule.reason}"
    if rule.kind in ("unsupported", "approximate"):
        return f"a ROLL key roll does not support: {rule.reason}"
    return None
