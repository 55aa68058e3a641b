"""Entropy and label log-probs from logits against loop references and extreme values."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_algos import entropy_from_logits, log_probs_from_logits


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10**6), scale=st.sampled_from([0.1, 1.0, 30.0]))
def test_entropy_matches_reference(seed, scale):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 3, 7, generator=g, dtype=torch.float64) * scale
    out = entropy_from_logits(logits)
    for i in range(2):
        for j in range(3):
            z = logits[i, j].tolist()
            m = max(z)
            e = [math.exp(x - m) for x in z]
            p = [x / sum(e) for x in e]
            assert float(out[i, j]) == pytest.approx(-sum(q * math.log(q) for q in p if q > 0), abs=1e-9)


def test_entropy_extremes():
    logits = torch.tensor(
        [[[1e4, 0.0, -1e4], [0.0, 0.0, 0.0], [0.0, -float("inf"), 0.0]]], requires_grad=True
    )
    out = entropy_from_logits(logits)
    out.sum().backward()
    assert torch.isfinite(logits.grad).all()
    assert torch.allclose(out.detach(), torch.tensor([[0.0, math.log(3), math.log(2)]]), atol=1e-6)
    bf = entropy_from_logits(torch.zeros(1, 1, 4, dtype=torch.bfloat16))
    assert bf.dtype == torch.float32 and float(bf) == pytest.approx(math.log(4), abs=1e-6)


def test_log_probs_from_logits():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 9, dtype=torch.float64)
    labels = torch.randint(0, 9, (2, 4))
    expected = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(log_probs_from_logits(logits, labels), expected)
