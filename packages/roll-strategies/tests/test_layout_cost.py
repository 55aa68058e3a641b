"""The rule that runs a micro-batch as a prefix tree only where it pays (`compute/layout_cost.py`), on hand-computed
counts, and `layout.layout` asking it: the tree where its nodes save more than its N x N mask costs, the padded or packed
rows where not."""

from __future__ import annotations

import pytest
import torch
from forward_helpers import SHAPE
from roll_strategies.compute import layout_cost
from roll_strategies.compute.forward import lm_outputs
from roll_strategies.compute.layout import layout
from roll_strategies.compute.layout_cost import (
    Work,
    model_pair_weight,
    packed_work,
    padded_work,
    pair_weight,
    tree_pays,
    tree_work,
)
from roll_strategies.errors import StrategyError
from transformers import Qwen2Config, Qwen2ForCausalLM


def test_the_work_of_each_layout_by_hand():
    assert padded_work([3, 5, 4]) == Work(3 * 5, 3 * 25)
    assert padded_work([]) == Work(0, 0)
    # best-fit in rows of 8: 5 + 3 | 4 + 2 + 1, two rows of 8 tokens, 64 pairs each
    assert packed_work([5, 4, 3, 2, 1], 8) == Work(16, 128)
    assert packed_work([9, 2], 8) == Work(18, 162)  # rows widened to the longest sequence, as forward packs
    assert tree_work([10]) == Work(10, 100)
    assert tree_work([6, 9]) == Work(18, 162)  # tree rows [2, 9]: the shorter one padded
    assert Work(10, 100).cost(0.5) == 60.0


def test_the_issues_case_runs_dense_and_a_shared_prompt_runs_as_a_tree():
    w = 2e-3  # about the tiny Qwen2's pair weight
    # 8 x (16 shared + 480 own): 3,856 nodes and 14.9M pairs against 3,968 tokens and 2.0M pairs
    assert not tree_pays([16 + 8 * 480], [496] * 8, None, w)
    # 8 x (384 + 16): 512 nodes, 0.26M pairs against 3,200 tokens, 1.28M pairs
    assert tree_pays([384 + 8 * 16], [400] * 8, None, w)
    # the crossover of 8 x (64 + 192): 1,600 + 2.56M w against 2,048 + 0.52M w, at w = 448 / 2.04M
    cross = 448 / (1_600**2 - 8 * 256**2)
    assert tree_pays([1_600], [256] * 8, None, cross * 0.99)
    assert not tree_pays([1_600], [256] * 8, None, cross * 1.01)
    # packed rows of 512: 4 rows (2 x 256 each), 2,048 tokens and 1.05M pairs: the tree pays up to 448 / 1.51M
    assert tree_pays([1_600], [256] * 8, 512, cross * 1.3)
    assert not tree_pays([1_600], [256] * 8, 512, cross * 1.4)
    assert tree_pays([10], [10], None, 0.0) is False  # nothing shared: equal costs, no tree
    with pytest.raises(StrategyError, match="pair weight >= 0"):
        tree_pays([10], [10], None, -1.0)


def test_the_pair_weight_is_the_flop_ratio_times_the_measured_cost():
    assert pair_weight(2, 128, 1_000) == pytest.approx(layout_cost.PAIR_FLOP_COST * 4 * 2 * 128 / 2_000)
    model = Qwen2ForCausalLM(Qwen2Config(**SHAPE))
    # per layer: q 32x32+32, k and v 32x16+16 each, o 32x32, MLP 3 x 32x64, two norms of 32; the final norm 32
    body = 2 * (1056 + 2 * 528 + 1024 + 3 * 2048 + 64) + 32
    assert sum(p.numel() for p in model.model.layers.parameters()) + 32 == body
    assert model_pair_weight(model) == pytest.approx(pair_weight(2, 32, body))
    with pytest.raises(StrategyError, match="set share_prefix=false"):
        model_pair_weight(torch.nn.Linear(2, 2))


def _rows(shared: int, own: int, count: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(1, 60, (shared,), generator=gen)
    ids = torch.stack(
        [torch.cat([prompt, torch.randint(1, 60, (own,), generator=gen)]) for _ in range(count)]
    )
    needed = torch.zeros_like(ids, dtype=torch.bool)
    needed[:, -2:] = True
    return ids, torch.ones_like(ids), needed


def test_layout_runs_the_tree_only_where_it_pays():
    long_own = _rows(2, 60, 4)  # 242 nodes, 58.6k pairs against 248 tokens, 15.4k pairs
    long_shared = _rows(60, 2, 4)  # 68 nodes against 248 tokens
    for w, (ids, mask, needed), tree in (
        (1e-3, long_own, False),
        (0.0, long_own, True),
        (1e-3, long_shared, True),
    ):
        run, *_ = layout(ids, mask, needed, None, 0, True, pair_weight=w)
        assert (run.attention_mask.dim() == 4) is tree, (w, tree)
        assert run.input_ids.shape == ((1, 242 if w == 0 else 68) if tree else (4, 62))
    ids, mask, needed = long_own
    run, *_ = layout(ids, mask, needed, 128, 0, True, pair_weight=1e-3)
    assert run.attention_mask is None and run.input_ids.shape == (2, 128)  # packed: 2 rows of 2 x 62


def test_a_model_whose_tree_does_not_pay_gets_the_dense_outputs():
    config = Qwen2Config(**{**SHAPE, "num_hidden_layers": 1}, attn_implementation="sdpa")
    model = Qwen2ForCausalLM(config).eval()
    ids, mask, needed = _rows(2, 60, 4)
    seen: list[tuple[int, ...]] = []
    model.register_forward_pre_hook(
        lambda _m, _a, kw: seen.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    with torch.no_grad():
        dense = lm_outputs(model, ids, mask, needed).log_probs
        seen.clear()  # the head's readout probe and the dense forward
        shared = lm_outputs(model, ids, mask, needed, share_prefix=True).log_probs
    assert seen == [(4, 62)]  # the rows, not the tree's [1, 242]
    torch.testing.assert_close(shared, dense, rtol=0, atol=0)
