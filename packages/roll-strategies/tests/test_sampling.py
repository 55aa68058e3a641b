"""Keyed sampling: a row's tokens follow from its key and its logits, whatever shares its batch, and the
sampler draws from the warped distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from roll_strategies import GenerationParams, HFInferStrategy, StrategyError
from roll_strategies.infer.sampling import KeyedSampler, mix_key, row_keys, step_uniforms

IDS = torch.zeros((1, 1), dtype=torch.long)


def _pick(sampler: KeyedSampler, scores: torch.Tensor) -> list[int]:
    out = sampler(IDS.expand(scores.shape[0], 1), scores.clone())
    assert torch.isfinite(out).sum(dim=-1).tolist() == [1] * scores.shape[0]  # one token left per row
    return out.argmax(dim=-1).tolist()


def test_uniforms_are_a_function_of_key_and_step_only():
    keys = np.array([1, 2, 3, 2**63 + 5], dtype=np.uint64)
    u = step_uniforms(keys, 7)
    assert ((u >= 0) & (u < 1)).all()
    assert step_uniforms(keys[::-1].copy(), 7).tolist() == u[::-1].tolist()  # order-free
    assert step_uniforms(keys[1:2], 7).tolist() == [u[1]]  # batch-free
    assert step_uniforms(keys, 8).tolist() != u.tolist()
    assert mix_key((1, 2)) != mix_key((2, 1)) and 0 <= mix_key((1, 2)) < 2**63


def test_frequencies_follow_the_softmax():
    logits = torch.tensor([0.0, 1.0, 2.0, -1.0])
    n = 20_000
    sampler = KeyedSampler(range(n), temperature=1.0, top_k=0, top_p=1.0)
    counts = np.bincount(_pick(sampler, logits.expand(n, 4)), minlength=4)
    expected = torch.softmax(logits, dim=0).numpy() * n
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))  # 5 sigma: a failure is a real bias


def test_temperature_top_k_and_top_p_are_applied_before_the_draw():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    n = 4000
    top2 = _pick(KeyedSampler(range(n), temperature=1.0, top_k=2, top_p=1.0), logits.expand(n, 4))
    assert set(top2) == {0, 1}
    nucleus = _pick(KeyedSampler(range(n), temperature=1.0, top_k=0, top_p=0.5), logits.expand(n, 4))
    assert set(nucleus) == {0}  # p(0) = 0.64 >= 0.5 on its own
    cold = _pick(KeyedSampler(range(n), temperature=0.05, top_k=0, top_p=1.0), logits.expand(n, 4))
    assert np.mean(np.array(cold) == 0) > 0.99


def test_a_row_draws_the_same_token_alone_or_in_any_batch():
    torch.manual_seed(0)
    scores = torch.randn(6, 50)
    keys = [11, 22, 33, 44, 55, 66]
    together = _pick(KeyedSampler(keys, temperature=0.8, top_k=20, top_p=0.9), scores)
    for row, key in enumerate(keys):
        alone = _pick(KeyedSampler([key], temperature=0.8, top_k=20, top_p=0.9), scores[row : row + 1])
        assert alone == [together[row]]
    order = [5, 3, 1, 0, 2, 4]
    shuffled = _pick(
        KeyedSampler([keys[i] for i in order], temperature=0.8, top_k=20, top_p=0.9), scores[order]
    )
    assert shuffled == [together[i] for i in order]


def test_row_keys_need_one_key_per_prompt():
    assert row_keys(1, 0, 2, None) != row_keys(1, 1, 2, None)  # without keys the call counter moves
    assert row_keys(1, 0, 2, [5, 6]) == row_keys(1, 9, 2, [5, 6])  # with keys it does not matter
    with pytest.raises(StrategyError, match="one sample key per prompt"):
        row_keys(1, 0, 2, [5])


def test_keyed_generation_does_not_depend_on_the_batch(tiny_model_dir):
    strategy = HFInferStrategy(tiny_model_dir, seed=3)
    rng = np.random.default_rng(0)
    prompts = [
        rng.integers(3, strategy.vocab_size, size=12).tolist() for _ in range(4)
    ]  # one length: no padding
    params = GenerationParams(max_new_tokens=6, temperature=1.0)
    batched = strategy.generate(prompts, params, sample_keys=[1, 2, 3, 4])
    reordered = strategy.generate(prompts[::-1], params, sample_keys=[4, 3, 2, 1])[::-1]
    alone = [
        strategy.generate([p], params, sample_keys=[k])[0] for p, k in zip(prompts, [1, 2, 3, 4], strict=True)
    ]
    assert (
        [o.output_ids for o in batched] == [o.output_ids for o in reordered] == [o.output_ids for o in alone]
    )
    assert strategy.generate(prompts, params, sample_keys=[9, 2, 3, 4])[1:] == batched[1:]
