"""vLLM's sleep levels, the one table of them: the vllm strategy reads it, and so do the pipeline's config checks.

It imports nothing but the package's errors (no vllm), so `roll_pipeline.config.colocation` checks a role's
`sleep_level` against it without the vllm extra.
"""

from __future__ import annotations

from roll_strategies.errors import StrategyError

__all__ = ["DEFAULT_SLEEP_LEVEL", "SLEEP_LEVELS", "sleep_unavailable"]

SLEEP_LEVELS = (0, 1, 2)
"""vllm's strategy_config `sleep_level`: 0 never sleeps; 1 offloads the weights to the CPU (the KV cache is
dropped); 2 drops the weights too (the next weight sync reloads them)."""
DEFAULT_SLEEP_LEVEL = 1
"""vllm's `sleep_level` when strategy_config leaves it out."""


def sleep_unavailable(device_type: str, sleep_level: int, platform_has_sleep_mode: bool) -> str | None:
    """Why an engine cannot sleep (None: it can): `sleep_level` 0, or no sleep mode on this platform/device."""
    if sleep_level not in SLEEP_LEVELS:
        raise StrategyError(
            f"Expected strategy_config sleep_level in {SLEEP_LEVELS} (0: never sleep, 1: offload the weights, "
            f"2: drop them), got {sleep_level!r}."
        )
    if sleep_level == 0:
        return "sleep_level is 0"
    if not platform_has_sleep_mode or device_type != "cuda":
        return (
            f"vLLM has no sleep mode on this platform (device {device_type!r}; the CPU build ignores sleep): the "
            "engine keeps its weights and KV cache while the trainer runs"
        )
    return None
