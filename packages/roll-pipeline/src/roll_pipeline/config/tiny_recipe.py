"""The builtin tiny models' training recipe: what differs from `AgenticConfig`'s defaults, which are set for
pretrained instruct models (docs/config.md#defaults).

A tiny model of a few hundred thousand parameters, warmed up on bare observations, learns with a large
learning rate, the exact forward KL at a strong coefficient, 16-token turns, no instruction and its format
tokens left out of the policy gradient (docs/tiny_model_findings.md). Hydra sees this as the config
`roll_tiny` (the schema defaults with this recipe on top): `roll train` with no config file composes it, and
the YAML files of examples/tiny-cpu-agentic start from it (`defaults: [roll_tiny, _self_]`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roll_pipeline.config.schema import AgenticConfig

TINY_MODEL = "builtin:tiny-frozen-lake-sighted"
"""The model of `roll train` with no config file."""

_TINY_TRAINING = {
    "learning_rate": 1.0e-3,
    "warmup_steps": 50,
    "adam_beta2": 0.98,
    "per_device_train_batch_size": 64,
    "gradient_accumulation_steps": 3,
}
TINY_RECIPE: dict[str, Any] = {
    "exp_name": "frozen_lake_tiny",
    "pretrain": TINY_MODEL,
    "kl_penalty": "full_forward",  # keeps the moves exploring (docs/training.md)
    "kl_loss_coef": 1.0,
    "skip_confident_tokens": 0.99,  # format tokens out of the policy gradient (shared embeddings)
    "demonstration_learning_rate": 1.0e-3,  # the tiny models' one rate
    # each role only what it reads (config.checks refuses the rest); a critic (gae) sets its own
    "actor_train": {"training_args": _TINY_TRAINING, "infer_batch_size": 128},
    "actor_infer": {"generating_args": {"max_new_tokens": 16}, "infer_batch_size": 128},
    "reference": {"infer_batch_size": 128},
    # "": the observation alone, as the builtin models are warmed up (models.recipes.NO_INSTRUCTION)
    "custom_envs": {"FrozenLake": {"env_instruction": "", "max_tokens_per_step": 16}},
}
"""Overrides of `AgenticConfig`'s defaults for the builtin tiny models (merged key by key)."""


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` merged in, mappings key by key (neither argument is modified)."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def field_default(cfg: AgenticConfig, name: str) -> object:
    """The schema default of a top-level field (without building a whole AgenticConfig, whose validator asks)."""
    return type(cfg).model_fields[name].get_default(call_default_factory=True)


def is_set(cfg: AgenticConfig, name: str) -> bool:
    """Whether a top-level field differs from both bases a config starts from: the schema default and this
    recipe (`roll_tiny`), so a field one base sets is not taken for the user's."""
    value = getattr(cfg, name)
    return value != field_default(cfg, name) and (name not in TINY_RECIPE or value != TINY_RECIPE[name])
