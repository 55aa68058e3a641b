"""Prefix trees on models whose layers do not all attend to every previous token: sliding-window layers
(a Qwen2 whose every layer slides, a Gemma3 mixing sliding and full layers, a Mistral) in float32, rows
longer than the window, log-probs, the loss and every parameter's gradient within 1e-5 of the dense
forward; a micro-batch's unrelated groups as rows of their own; the support probe's reach past a window.
"""

from __future__ import annotations

import prefix_ranks as rows
import pytest
import test_prefix_tree as trees
import torch
from forward_helpers import SHAPE as TINY_SHAPE
from forward_helpers import columns
from roll_strategies import StrategyError
from roll_strategies.compute.attention_windows import EVERY_LAYER, attention_windows, describe_windows
from roll_strategies.compute.layout import layout
from roll_strategies.compute.probes import prefix_sharing_supported
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2ForTokenClassification,
)

WINDOW = 8
SHAPE = {**TINY_SHAPE, "max_position_embeddings": 256}


def windowed(kind: str, window: int | None = WINDOW, attn: str = "sdpa") -> torch.nn.Module:
    """A tiny random model with a sliding window: every Qwen2 / Mistral layer, Gemma3's layers 0 and 2."""
    torch.manual_seed(0)
    if kind == "qwen2":
        slide = {} if window is None else {"use_sliding_window": True, "max_window_layers": 0}
        config = Qwen2Config(**SHAPE, sliding_window=window, **slide, attn_implementation=attn)
        return Qwen2ForCausalLM(config).float()
    if kind == "mistral":
        return MistralForCausalLM(
            MistralConfig(**SHAPE, sliding_window=window, attn_implementation=attn)
        ).float()
    config = Gemma3TextConfig(
        **{**SHAPE, "num_hidden_layers": 4},
        head_dim=8,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention"] * 2,
        attn_implementation=attn,
    )
    return Gemma3ForCausalLM(config).float()


def long_group(seed: int = 0, left: bool = False) -> dict[str, torch.Tensor]:
    """Two groups of rows 3-4 windows long sharing a prompt longer than the window, and a lone row."""
    gen = torch.Generator().manual_seed(seed)
    a = rows._group(gen, rows._tokens(gen, 12), [18, 25, 9])
    b = rows._group(gen, rows._tokens(gen, 5), [20, 14])
    lone = rows._group(gen, rows._tokens(gen, 3), [21])
    return rows.pad(a + b + lone, left)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("kind", ["qwen2", "gemma3", "mistral"])
def test_windowed_tree_outputs_and_gradients_equal_dense(kind, attn):
    model = windowed(kind, attn=attn)
    trees.assert_same(model, long_group(0))
    trees.assert_same(model, rows.step_wise(1, left=True))


def test_a_windowed_critic_and_a_reference_of_other_windows_equal_dense():
    """Values of a sliding-window critic; the exact KL to a reference whose layers attend to everything
    (its own masks, not the policy's windowed ones)."""
    torch.manual_seed(0)
    config = Qwen2Config(
        **SHAPE,
        sliding_window=WINDOW,
        use_sliding_window=True,
        max_window_layers=0,
        num_labels=1,
        classifier_dropout=0.0,
    )
    critic = Qwen2ForTokenClassification(config).float()
    torch.nn.init.normal_(critic.score.weight, std=0.5)  # a nonzero head, so values carry signal
    trees.assert_same(critic, long_group(3), value=True)
    reference = windowed("qwen2", window=None).requires_grad_(False)
    torch.nn.init.normal_(reference.lm_head.weight, std=0.5)  # another model than the policy
    trees.assert_same(windowed("qwen2"), long_group(4), reference=reference)


def test_the_window_is_what_transformers_dense_mask_lets_a_token_see():
    """A window of w: a token sees itself and w - 1 tokens before it (kv > q - w), not w before it."""
    windows = {w: windowed("qwen2", window=w) for w in (WINDOW - 1, WINDOW, WINDOW + 1)}
    b = long_group(2)
    dense = {w: trees.outputs_and_grads(m, b, False)[0]["log_probs"] for w, m in windows.items()}
    assert (dense[WINDOW] - dense[WINDOW + 1]).abs().max() > 1e-3  # one token more changes the outputs
    trees.assert_same(windows[WINDOW], b)


def test_windows_are_read_per_layer_type():
    assert attention_windows(windowed("qwen2")) == {"sliding_attention": WINDOW}
    assert attention_windows(windowed("qwen2", window=None)) == {"full_attention": None}
    assert attention_windows(windowed("mistral")) == {EVERY_LAYER: WINDOW}
    assert attention_windows(windowed("gemma3")) == {"sliding_attention": WINDOW, "full_attention": None}
    too_long = windowed("mistral", window=SHAPE["max_position_embeddings"])
    assert attention_windows(too_long) == {EVERY_LAYER: None}  # a window no position reaches masks nothing
    assert describe_windows(windowed("gemma3")) == (
        "layers 0, 2 (sliding_attention) attend to a window of 8 tokens; "
        "layers 1, 3 (full_attention) attend to all previous tokens"
    )


def test_a_mixed_model_gets_a_mask_per_layer_type_and_a_uniform_one_a_tensor():
    b = long_group(0)
    args = (*columns(b), None, 0, True)
    mixed, *_ = layout(*args, model=windowed("gemma3"))
    assert set(mixed.attention_mask) == {"sliding_attention", "full_attention"}
    sliding, full = mixed.attention_mask["sliding_attention"], mixed.attention_mask["full_attention"]
    assert ((sliding == 0) <= (full == 0)).all() and bool(((sliding == 0) < (full == 0)).any())
    uniform, *_ = layout(*args, model=windowed("mistral"))
    assert isinstance(uniform.attention_mask, torch.Tensor)


def test_unrelated_groups_are_rows_of_their_own():
    """Each root's subtree is one right-padded row with its own mask; `sizes` counts each row's nodes."""
    b = long_group(0)
    args = (*columns(b), None, 0, True)
    run, *_ = layout(*args, model=windowed("qwen2", window=None))
    lengths = b["attention_mask"].sum(1).tolist()
    assert sorted(run.tree.sizes) == [3 + 21, 5 + 20 + 14, 12 + 18 + 25 + 9]
    assert run.input_ids.shape == (3, max(run.tree.sizes)) and run.attention_mask.shape == (3, 1, 64, 64)
    assert sum(run.tree.sizes) < sum(lengths)


class _OneMask(torch.nn.Module):
    """A causal LM that applies one mask to every layer: a dict of masks is more than it takes."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        if isinstance(attention_mask, dict):
            attention_mask = attention_mask["full_attention"]
        return self.inner(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs
        )


def test_the_probe_reaches_past_the_window():
    for kind in ("qwen2", "gemma3", "mistral"):
        assert prefix_sharing_supported(windowed(kind)), kind
    assert not prefix_sharing_supported(_OneMask(windowed("gemma3")))


def test_an_unsupported_windowed_model_is_refused_naming_its_layers():
    from roll_strategies.compute.probes import check_prefix_sharing

    model = _OneMask(windowed("gemma3"))
    with pytest.raises(StrategyError, match=r"layers 0, 2 \(sliding_attention\).*share_prefix=false"):
        check_prefix_sharing(model, True, "gemma3-dir")


def _rounding_apart(dtype: torch.dtype) -> torch.nn.Module:
    """An exact Llama (every layer full attention) in `dtype` whose padded and prefix-tree log-probs round
    apart by ~0.1 in bfloat16: 8 layers of SmolLM2's width, a head 5x as large (log-probs up to ~64)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=576,
        num_hidden_layers=8,
        num_attention_heads=9,
        num_key_value_heads=3,
        intermediate_size=1536,
        initializer_range=0.1,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(5.0)
    return model.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_probe_answers_in_float32_for_a_half_precision_model(dtype):
    exact = _rounding_apart(dtype)
    saved = {name: (t.dtype, t.clone()) for name, t in [*exact.named_parameters(), *exact.named_buffers()]}
    assert prefix_sharing_supported(exact)  # exact in float32, though its half-precision outputs differ
    restored = dict([*exact.named_parameters(), *exact.named_buffers()])
    for name, (dtype_before, value) in saved.items():  # rotary frequencies stay float32, weights come back
        assert restored[name].dtype == dtype_before and torch.equal(restored[name], value), name
    assert not prefix_sharing_supported(_OneMask(windowed("gemma3").to(dtype)))
