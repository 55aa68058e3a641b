"""DeepSpeed config of the `deepspeed_train` strategy from a role's `strategy_config` (pure; no deepspeed import).

`strategy_config` uses DeepSpeed's own JSON keys, as upstream ROLL's `deepspeed_zero*.yaml` do
(`zero_optimization.stage`, `zero_optimization.offload_optimizer`, `bf16.enabled`, `gradient_clipping`,
`train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`, ...). "auto" values are filled from the
role's own arguments, so defaults live in one place:

- `bf16.enabled: auto` follows the role's dtype; `gradient_clipping: auto` is its max_grad_norm;
- batch sizes: one `train_step` call is one optimiser step over the micro-batches it is given (the
  same contract as hf_train), so DeepSpeed runs with caller-owned accumulation
  (`managed_gradient_accumulation: false`); `train_micro_batch_size_per_gpu` and
  `gradient_accumulation_steps` only feed DeepSpeed's sample counters and default to 1;
- the optimiser and the lr schedule are the strategy's own (AdamW + linear warm-up, as hf_train), so
  `optimizer` / `scheduler` blocks are refused rather than silently ignored.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from roll_strategies.errors import StrategyError

__all__ = ["build_deepspeed_config", "zero_stage"]

_REFUSED = {
    "optimizer": "the optimiser is the strategy's AdamW, set by learning_rate / weight_decay / betas / eps",
    "scheduler": "the lr schedule is the strategy's warm-up (warmup_steps) times the caller's lr_scale",
    "fp16": "fp16 needs loss scaling this strategy does not do; use bf16 (dtype bfloat16) or float32",
}


def zero_stage(config: Mapping[str, Any]) -> int:
    """The ZeRO stage of a DeepSpeed config (0 when it has no zero_optimization block)."""
    stage = (config.get("zero_optimization") or {}).get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise StrategyError(
            f"Expected zero_optimization.stage in 0, 1, 2, 3, got {stage!r}; fix the role's strategy_config."
        )
    return int(stage)


def _auto(value: Any, default: Any) -> Any:
    return default if value is None or value == "auto" else value


def build_deepspeed_config(
    strategy_config: Mapping[str, Any],
    *,
    dtype: str,
    max_grad_norm: float,
    world_size: int = 1,
) -> dict[str, Any]:
    """The dict `deepspeed.initialize(config=...)` gets, with "auto" values resolved and our invariants set.

    Raises `StrategyError` for blocks this strategy owns (optimizer, scheduler), for fp16, for
    `managed_gradient_accumulation: true`, and for a bf16 setting that contradicts `dtype`.
    """
    config = copy.deepcopy(dict(strategy_config))
    for key, why in _REFUSED.items():
        block = config.get(key)
        if block is not None and not (key == "fp16" and _auto(block.get("enabled"), False) is False):
            raise StrategyError(
                f"Expected no {key!r} block in deepspeed_train's strategy_config, got {block!r}: {why}. Remove it."
            )
    config.pop("fp16", None)
    if config.get("managed_gradient_accumulation", False):
        raise StrategyError(
            "Expected managed_gradient_accumulation false (or absent) in strategy_config, got true: each "
            "train_step call is one optimiser step over its micro-batches. Remove the key."
        )
    bf16 = dtype in ("bfloat16", "bf16")
    if dtype not in ("float32", "fp32", "bfloat16", "bf16"):
        raise StrategyError(f"Expected dtype float32 or bfloat16 for deepspeed_train, got {dtype!r}.")
    wanted = _auto((config.get("bf16") or {}).get("enabled"), bf16)
    if bool(wanted) != bf16:
        raise StrategyError(
            f"Expected bf16.enabled to agree with the role's dtype {dtype!r}, got bf16.enabled={wanted!r}; set "
            "bf16.enabled to auto (or drop it) and choose the precision with model_args.dtype."
        )
    config["bf16"] = {**(config.get("bf16") or {}), "enabled": bf16}
    zero = {k: v for k, v in (config.get("zero_optimization") or {}).items() if v != "auto"}
    zero.setdefault("stage", 2)
    config["zero_optimization"] = zero
    zero_stage(config)
    micro = int(_auto(config.get("train_micro_batch_size_per_gpu"), 1))
    accumulation = int(_auto(config.get("gradient_accumulation_steps"), 1))
    config.update(
        train_micro_batch_size_per_gpu=micro,
        gradient_accumulation_steps=accumulation,
        train_batch_size=micro * accumulation * world_size,
        gradient_clipping=float(_auto(config.get("gradient_clipping"), max_grad_norm)),
        managed_gradient_accumulation=False,
        zero_allow_untested_optimizer=True,
    )
    # A torch optimiser with offload_optimizer: DeepSpeed would otherwise insist on its CPU Adam (a C++ build).
    config.setdefault("zero_force_ds_cpu_optimizer", False)
    config.setdefault("steps_per_print", 1 << 30)
    config.setdefault("wall_clock_breakdown", False)
    return config
