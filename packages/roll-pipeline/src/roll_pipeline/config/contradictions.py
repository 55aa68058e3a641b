"""Settings that run but work against each other: `roll config`, `roll train` and `roll sweep` print each as a
warning with its fix and go on (a setting that would do nothing at all is a problem of `checks.py`, refused).

- half-precision sampling (`actor_infer.model_args.dtype` bfloat16, float16 or auto) with an asynchronous rollout
  and `recompute_old_log_probs=false`: the PPO ratio starts from the sampler's rounded log-probs, not the
  trainer's (the field's own description says to recompute for bf16);
- stop strings that do not follow the answer format of a played tag's env (`roll_envs.AnswerFormat`): an
  answer that closes with text no stop string matches runs on to eos or the token cap, and a stop string
  that closes a format no played tag answers in waits for text that never comes;
- a training tag whose env penalises a move (`hole_penalty`, `refused_move_penalty`: any `*_penalty` of its
  config) more than an answer that is no move (`format_penalty`): such an answer is then the safe one, and a
  policy can learn to stop answering (SmolLM2 on FrozenLake with `hole_penalty: 1.0` and `format_penalty: 0`:
  valid answers 1.00 -> 0.00 in three RL steps, greedy success 0.766 -> 0.000).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roll_pipeline.config.schema import AgenticConfig

__all__ = ["ANSWER_ENDS", "answer_formats", "config_warnings"]

HALF_PRECISION = ("bfloat16", "float16")
"""Weight dtypes whose log-probs differ between the sampler and the trainer by rounding alone."""

ANSWER_ENDS = {"tags": "</answer>", "tool_call": "</tool_call>"}
"""The text that closes an answer, per `roll_envs.AnswerFormat` that has one (a `boxed` or `raw` answer has
none: eos or the token cap ends its response)."""


def _precision_warnings(cfg: AgenticConfig) -> list[str]:
    dtype = cfg.actor_infer.model_args.dtype
    vllm = cfg.actor_infer.strategy_args.strategy_name == "vllm"  # checks.py refuses it without recompute
    if (
        dtype not in (*HALF_PRECISION, "auto")
        or cfg.async_generation_ratio == 0
        or cfg.recompute_old_log_probs
        or vllm
    ):
        return []
    return [
        f"actor_infer samples in {dtype}{' (bfloat16 where the device computes it natively)' if dtype == 'auto' else ''} with async_generation_ratio={cfg.async_generation_ratio} and"
        f" recompute_old_log_probs=false: the PPO ratio starts from the sampler's {dtype} log-probs, which differ"
        " from the trainer's by rounding even for the same weights, and the clip bounds that noise along with the"
        " staleness; set recompute_old_log_probs=true (tis_cap can then correct for the staleness), or"
        " async_generation_ratio=0, or actor_infer.model_args.dtype=float32"
    ]


def _env_configs(cfg: AgenticConfig, tags: Iterable[str]) -> dict[str, Any]:
    """The env config of each of `tags` as the run builds it; a tag whose env type is not a registered env with
    a config (an agent tag, a plugin that fails to load) is left out: preflight reports those."""
    import roll_envs
    from roll_envs.config import build_config

    configs = {}
    for tag in dict.fromkeys(tags):
        entry = cfg.custom_envs[tag]
        try:
            spec = roll_envs.spec(entry.env_type)
            model = spec.config_model()
            if model is None:
                continue
            configs[tag] = build_config(model, {**spec.defaults, **entry.env_config}, {}, env_name=spec.id)
        except roll_envs.RollEnvsError:
            continue
    return configs


def answer_formats(cfg: AgenticConfig) -> dict[str, str]:
    """The answer format (`roll_envs.AnswerFormat` value) of each tag the run plays, train and validation
    (`_env_configs`)."""
    formats = {}
    for tag, env_config in _env_configs(
        cfg, [*cfg.train_env_manager.tags, *cfg.val_env_manager.tags]
    ).items():
        fmt = getattr(env_config, "answer_format", "tags")
        formats[tag] = str(getattr(fmt, "value", fmt))
    return formats


def _free_no_op_warnings(cfg: AgenticConfig) -> list[str]:
    warnings = []
    for tag, env_config in _env_configs(cfg, cfg.train_env_manager.tags).items():
        fields = env_config.model_dump()
        penalties = {
            name: value
            for name, value in fields.items()
            if name.endswith("_penalty") and name != "format_penalty" and isinstance(value, int | float)
        }
        if "format_penalty" not in fields or not penalties:
            continue
        worst, format_penalty = max(penalties.values()), fields["format_penalty"]
        if worst > format_penalty:
            named = ", ".join(
                f"{name}={value}" for name, value in penalties.items() if value > format_penalty
            )
            warnings.append(
                f"custom_envs.{tag} ({cfg.custom_envs[tag].env_type}) trains with {named} but"
                f" format_penalty={format_penalty}: an answer that is no move costs less than a penalised move,"
                f" so the policy can learn to stop answering; set format_penalty: {worst} (or more) in"
                f" custom_envs.{tag}.env_config"
            )
    return warnings


def _matches(end: str, stops: Iterable[str]) -> bool:
    """Whether a stop string ends a response at `end` (it holds it, e.g. `'</tool_call>\\n'`)."""
    return any(end in stop for stop in stops)


def _stop_string_warnings(cfg: AgenticConfig) -> list[str]:
    stops = cfg.actor_infer.generating_args.stop_strings
    where = "actor_infer.generating_args.stop_strings"
    formats = answer_formats(cfg)
    if not formats:
        return []
    used = set(formats.values())
    unused = [(fmt, end) for fmt, end in ANSWER_ENDS.items() if fmt not in used and _matches(end, stops)]
    missing = {fmt: end for fmt, end in ANSWER_ENDS.items() if fmt in used and not _matches(end, stops)}
    fixed = [s for s in stops if not any(end in s for _, end in unused)] + list(missing.values())
    fix = f"set {where}={fixed}" + (" (a boxed or raw answer has no closing text: eos ends it)" * (not fixed))
    warnings = [
        f"custom_envs.{tag} ({cfg.custom_envs[tag].env_type}) answers in {fmt} format, which {missing[fmt]!r}"
        f" closes, but {where}={stops} has no stop string for it: each of its responses runs on past the answer"
        f" to eos or the token cap; {fix}"
        for tag, fmt in formats.items()
        if fmt in missing
    ]
    played = ", ".join(f"{tag}: {fmt}" for tag, fmt in formats.items())
    warnings += [
        f"{where}={stops} stop at {end!r}, which closes {fmt} answers, but no played tag answers in {fmt} format"
        f" ({played}): it ends no answer, and it cuts a response that writes it for another reason; {fix}"
        for fmt, end in unused
    ]
    return warnings


def config_warnings(cfg: AgenticConfig) -> list[str]:
    """Every pair of settings of a valid config that work against each other, each with its fix (empty when
    none do)."""
    return _precision_warnings(cfg) + _stop_string_warnings(cfg) + _free_no_op_warnings(cfg)
