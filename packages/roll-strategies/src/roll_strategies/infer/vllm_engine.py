"""What the vllm strategy prepares for its engine, plain code testable without vllm: the engine's arguments
(`engine_kwargs`, and `with_max_num_seqs` for a role's batch size), the checkpoint's tensor shapes the weight
receiver expects (`checkpoint_tensor_shapes`), and the whole-layer chunks of each weight-loading RPC
(`layer_chunks`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from roll_strategies.errors import ModelNotFoundError, StrategyError

__all__ = ["OUR_KEYS", "checkpoint_tensor_shapes", "engine_kwargs", "layer_chunks", "with_max_num_seqs"]

OUR_KEYS = frozenset({"sleep_level", "update_chunk_bytes", "per_request_seed"})
"""The strategy_config keys roll reads itself; the others go to vLLM's `AsyncEngineArgs`."""


def layer_chunks(
    tensors: Mapping[str, torch.Tensor], chunk_bytes: int
) -> list[list[tuple[str, torch.Tensor]]]:
    """Named tensors grouped by layer ("model.layers.N." or the module path), in chunks of about
    `chunk_bytes` that never split a group (a group larger than that is one chunk)."""
    groups: dict[str, list[tuple[str, torch.Tensor]]] = {}
    for name, tensor in tensors.items():
        parts = name.split(".")
        key = ".".join(parts[:3]) if parts[:2] == ["model", "layers"] else ".".join(parts[:-1])
        groups.setdefault(key, []).append((name, tensor))
    chunks: list[list[tuple[str, torch.Tensor]]] = [[]]
    size = 0
    for group in groups.values():
        group_bytes = sum(t.numel() * t.element_size() for _, t in group)
        if chunks[-1] and size + group_bytes > chunk_bytes:
            chunks.append([])
            size = 0
        chunks[-1].extend(group)
        size += group_bytes
    return [c for c in chunks if c]


def checkpoint_tensor_shapes(model_path: str | Path) -> dict[str, tuple[int, ...]]:
    """{name: shape} of every tensor in a model folder's safetensors files (read from the headers only)."""
    files = sorted(Path(model_path).glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(model_path, "no *.safetensors file")
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open has keys(), no iteration)
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    return shapes


def engine_kwargs(
    model_path: str | Path,
    *,
    dtype: str,
    seed: int,
    sleep_enabled: bool,
    share_prefix: bool,
    config: Mapping[str, Any],
) -> dict[str, Any]:
    """vLLM `AsyncEngineArgs` arguments (a plain dict: testable without vllm); `config`: the strategy_config
    without roll's own keys, given last so it overrides the defaults. `share_prefix` sets
    `enable_prefix_caching`; without it the engine's default stands."""
    prefix = {"enable_prefix_caching": True} if share_prefix else {}
    asked = config.get("enable_prefix_caching")
    if share_prefix and asked is not None and not asked:
        raise StrategyError(
            "Expected enable_prefix_caching unset or true with share_prefix=True, got enable_prefix_caching="
            "false in strategy_config; drop one of the two (share_prefix=false keeps the engine's default)."
        )
    return {
        "model": str(model_path),
        "dtype": dtype,
        "seed": seed,
        "logprobs_mode": "processed_logprobs",
        "worker_extension_cls": "roll_strategies.infer.vllm_worker.RollWorkerExtension",
        "enable_sleep_mode": sleep_enabled,
        "disable_log_stats": True,
        **prefix,
        **config,
    }


def with_max_num_seqs(strategy_config: Mapping[str, Any] | None, infer_batch_size: int) -> dict[str, Any]:
    """A vllm `strategy_config` with vLLM's `max_num_seqs` (the most requests the engine runs at once) set to the
    role's `infer_batch_size`, unless the config names its own (a config check refuses the two disagreeing)."""
    config = dict(strategy_config or {})
    config.setdefault("max_num_seqs", int(infer_batch_size))
    return config
