"""Whether a model honours a layout: `packing_supported` and `prefix_sharing_supported` run a model once on
a few rows both ways (padded, and packed or as a prefix tree) and compare, rows longer than the model's
shortest attention window so that a layout letting a token see past its window is caught. The answer is
cached on the model object. `check_prefix_sharing` is a strategy's refusal of `share_prefix` where the tree is
not exact.

The probe runs in float32 whatever the model's dtype: a half-precision model is cast up for it and back
(bfloat16 and float16 values are exact in float32, so the weights come back bit for bit; the peak is the
float32 copy). In bfloat16 the two layouts' other matmul shapes round differently by more than any fixed
tolerance on a trained model's log-probs, so a probe there could refuse an exact layout (seen on a cloned
SmolLM2) or pass an inexact one; in float32 an exact layout agrees to ~1e-4 (8 layers of SmolLM2's width), one that
lets a token see past its window differs by orders of magnitude more.

The tolerance is also relative to how much the context moves the model's outputs (the padded outputs once
more with each row's first token changed): a layout's error is at most a thousandth of that. A small random
instance (preflight's, a test's tiny model) has outputs that barely depend on their context, so a layout
that lets tokens see other rows changes them by little in absolute terms (1.7e-4 on a mask-blind
architecture, whose context moves its outputs by 4.3e-3), while an exact one agrees to float32 rounding
(4.8e-7 beside 0.195 on a tiny Qwen2).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from roll_strategies.compute.attention_windows import attention_windows, describe_windows
from roll_strategies.compute.forward import lm_outputs, value_outputs
from roll_strategies.errors import StrategyError

__all__ = ["check_prefix_sharing", "packing_supported", "prefix_sharing_supported"]

_PROBE_TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-8}
_SHARE_OF_CONTEXT_EFFECT = 1e-3
_EXACT_IN_FLOAT32 = (torch.bfloat16, torch.float16)


def _probe_length(model: nn.Module) -> int:
    """The longest probe row: 7 tokens, or 3 more than the shortest attention window, so that a layout
    which lets a token see past its window gives other outputs (a window under 7 tokens bites anyway)."""
    try:
        windows = [w for w in attention_windows(model).values() if w is not None]
    except StrategyError:  # a layer type no mask reproduces: the layout's own forward refuses it
        windows = []
    return max(7, min(windows, default=0) + 3)


@contextmanager
def _in_float32(model: nn.Module) -> Iterator[None]:
    """`model`'s half-precision parameters and buffers in float32 inside the block, each given back its own
    dtype after it (a buffer kept in float32, such as rotary frequencies, is left as it is)."""
    halves = [t for t in (*model.parameters(), *model.buffers()) if t.dtype in _EXACT_IN_FLOAT32]
    dtypes = [t.dtype for t in halves]
    for t in halves:
        t.data = t.data.float()
    try:
        yield
    finally:
        for t, dtype in zip(halves, dtypes, strict=True):
            t.data = t.data.to(dtype)


def _probe(model: nn.Module, value_model: bool, cached: str, prefix: int, **layout: Any) -> bool:
    """Whether `model`'s outputs on three rows (the first `prefix` tokens shared, the longest
    `_probe_length`) under `layout` equal the padded ones; cached on the model as `cached`."""
    if getattr(model, cached, None) is not None:
        return bool(getattr(model, cached))
    param = next(model.parameters())
    dtype = param.dtype
    if dtype in _EXACT_IN_FLOAT32:
        with _in_float32(model):
            return _probe(model, value_model, cached, prefix, **layout)
    vocab = int(getattr(model.config, "vocab_size", 64) or 64)
    gen = torch.Generator().manual_seed(0)
    width = _probe_length(model)
    high = max(3, min(vocab, 200))
    seqs = [torch.randint(1, high, (n,), generator=gen) for n in (width - 2, width, width - 1)]
    seqs = [torch.cat([seqs[0][:prefix], s[prefix:]]) for s in seqs]
    ids = torch.zeros((3, width), dtype=torch.long)
    mask = torch.zeros((3, width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : len(s)], mask[r, : len(s)] = s, 1
    needed = mask.bool().clone()
    needed[:, 0] = False
    ids, mask, needed = ids.to(param.device), mask.to(param.device), needed.to(param.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            outputs = value_outputs if value_model else lambda *rows, **kw: lm_outputs(*rows, **kw).log_probs
            padded = outputs(model, ids, mask, needed)
            other_context = ids.clone()
            other_context[:, 0] = ids[:, 0] % (high - 1) + 1  # another token in [1, high)
            context_effect = (padded - outputs(model, other_context, mask, needed)).abs().max().item()
            laid_out = outputs(model, ids, mask, needed, **layout)
        tolerance = min(_PROBE_TOLERANCE.get(dtype, 1e-4), _SHARE_OF_CONTEXT_EFFECT * context_effect)
        ok = bool((padded - laid_out).abs().max().item() <= tolerance)
    except Exception:  # a model that rejects the layout's inputs cannot run it
        ok = False
    finally:
        model.train(was_training)
    setattr(model, cached, ok)
    return ok


def packing_supported(model: nn.Module, value_model: bool = False) -> bool:
    """Whether a packed forward of `model` equals per-sequence forwards (attention stays in each sequence).

    Probes once per model object with sequences longer than its shortest window; cached on the model.
    """
    return _probe(model, value_model, "_roll_packing_supported", 0, pack_capacity=2 * _probe_length(model))


def prefix_sharing_supported(model: nn.Module, value_model: bool = False) -> bool:
    """Whether a prefix-tree forward of `model` (4D additive masks, one per attention window, position
    ids = depth) equals per-sequence forwards. Probes once per model object with rows sharing a prefix and
    longer than the model's shortest window (`_probe_length`); cached on the model.
    """
    # pair_weight 0: the tree runs whatever it would cost (the rule must not turn the probe into a dense run)
    return _probe(model, value_model, "_roll_prefix_sharing_supported", 3, share_prefix=True, pair_weight=0.0)


def check_prefix_sharing(
    model: torch.nn.Module, share_prefix: bool, model_path: str | Path, value_model: bool = False
) -> bool:
    """`share_prefix`, after checking that `model` gives per-sequence outputs from a prefix-tree forward
    (`probes.prefix_sharing_supported`); a `StrategyError` naming the fix where it does not."""
    if share_prefix and not prefix_sharing_supported(model, value_model=value_model):
        raise StrategyError(
            f"Expected a model whose forward honours a prefix tree's 4D additive attention masks (one per "
            f"attention window) for share_prefix=true, got {type(model).__name__} from {model_path} "
            f"({describe_windows(model)}), whose prefix-tree outputs differ from per-sequence ones (or which "
            "rejects the masks, e.g. flash-attention, or one forward mask for layers of several windows); "
            "set share_prefix=false for this role."
        )
    return share_prefix
