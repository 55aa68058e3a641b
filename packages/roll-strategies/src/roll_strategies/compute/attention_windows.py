"""How far back each layer of a model attends, read from its config, for the prefix tree's masks.

A Hugging Face model passes a 4D attention mask unchanged to every layer, sliding-window layers included,
so a tree forward must build the window into the mask itself. Models with `config.layer_types` (Qwen2,
Gemma 2/3, GPT-OSS, ...) take a dict of masks keyed by layer type; models without it (Mistral, Phi-3)
apply one mask to every layer, windowed when `config.sliding_window` is set. Whether a model's forward
really takes what is built here is not assumed: `probes.prefix_sharing_supported` probes it with rows
longer than the shortest window.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from roll_strategies.errors import StrategyError

__all__ = ["EVERY_LAYER", "attention_windows", "describe_windows"]

EVERY_LAYER = "every_layer"
"""The key of `attention_windows` for a model without `layer_types`: one mask goes to every layer."""

_FULL, _SLIDING = "full_attention", "sliding_attention"


def _text_config(model: nn.Module) -> Any:
    """The config of the language model inside `model` (a DeepSpeed engine wraps it as `.module`)."""
    inner = getattr(model, "module", model)
    config = getattr(inner, "config", None) or getattr(model, "config", None)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _window(config: Any) -> int | None:
    """`config.sliding_window` as the window a token sees (itself included); None where it cannot bite: a
    window at least `max_position_embeddings` long masks nothing at any position the model is built for."""
    window = getattr(config, "sliding_window", None)
    if window is None:
        return None
    if not isinstance(window, int) or window < 1:
        raise StrategyError(f"Expected config.sliding_window to be a positive int or None, got {window!r}.")
    longest = getattr(config, "max_position_embeddings", None)
    return None if isinstance(longest, int) and window >= longest else window


def attention_windows(model: nn.Module) -> dict[str, int | None]:
    """Per layer type of `model`, how many positions a token attends to (itself included; None: all).

    {`EVERY_LAYER`: window} for a model without `config.layer_types`; a `StrategyError` for a layer type
    a prefix tree cannot reproduce with a mask (chunked or linear attention)."""
    config = _text_config(model)
    if config is None:
        return {EVERY_LAYER: None}
    layer_types = getattr(config, "layer_types", None)
    if not isinstance(layer_types, list | tuple):
        return {EVERY_LAYER: _window(config)}
    unknown = sorted(set(layer_types) - {_FULL, _SLIDING})
    if unknown:
        raise StrategyError(
            f"Expected every layer to be {_FULL} or {_SLIDING} for a prefix-tree forward, got {unknown} "
            f"layers in {type(model).__name__}; set share_prefix=false."
        )
    window = _window(config)
    return {t: window if t == _SLIDING else None for t in dict.fromkeys(layer_types)}


def describe_windows(model: nn.Module) -> str:
    """The model's layers by attention window, for an error message, e.g. 'layers 0, 2 (sliding_attention)
    attend to a window of 32 tokens; layers 1, 3 (full_attention) attend to all previous tokens'."""
    config = _text_config(model)
    try:
        windows = attention_windows(model)
    except StrategyError as err:
        return str(err)
    layer_types = getattr(config, "layer_types", None)
    count = int(getattr(config, "num_hidden_layers", 0) or 0)
    types = list(layer_types) if isinstance(layer_types, list | tuple) else [EVERY_LAYER] * count
    parts = []
    for layer_type, window in windows.items():
        ids = ", ".join(str(i) for i, t in enumerate(types) if t == layer_type)
        span = "all previous tokens" if window is None else f"a window of {window} tokens"
        parts.append(f"layers {ids} ({layer_type}) attend to {span}")
    return "; ".join(parts)
