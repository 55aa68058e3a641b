"""CUDA parity: every estimator and loss gives the CPU result on a CUDA device (skipped without one)."""

from __future__ import annotations

import pytest
import torch
from roll_algos import AdvantageConfig, AdvantageEstimator, compute_advantages, kl_penalty, policy_loss

pytestmark = pytest.mark.gpu


def to(inputs, device):
    return type(inputs)(*(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs))


@pytest.mark.parametrize("name", list(AdvantageEstimator))
def test_estimators_match_cpu_on_cuda(make_rows, name):
    inp = make_rows(5, num_groups=3, max_turns=4)
    cfg = AdvantageConfig(gamma=0.9, lambd=0.95, kl_coef=0.05)
    cpu = compute_advantages(name, inp, cfg)
    gpu = compute_advantages(name, to(inp, "cuda"), cfg)
    assert gpu.advantages.device.type == "cuda"
    torch.testing.assert_close(gpu.advantages.cpu(), cpu.advantages, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(gpu.returns.cpu(), cpu.returns, rtol=1e-6, atol=1e-6)


def test_gigpo_similar_anchors_match_cpu_on_cuda(make_rows):
    inp = make_rows(7, num_groups=3, max_turns=4, num_anchors=4)
    inp = inp._replace(anchor_texts=[f"room {int(a) % 3} door {int(a)}" for a in inp.anchor_ids])
    cfg = AdvantageConfig(gamma=0.9, gigpo_anchor_threshold=0.3)
    cpu = compute_advantages("gigpo", inp, cfg)
    gpu = compute_advantages("gigpo", to(inp, "cuda"), cfg)
    torch.testing.assert_close(gpu.advantages.cpu(), cpu.advantages, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("level", ["token", "segment", "sequence"])
def test_policy_loss_matches_cpu_on_cuda(make_rows, level):
    inp = make_rows(6)
    lp = inp.old_log_probs + 0.1 * torch.randn_like(inp.old_log_probs)
    adv = torch.randn_like(lp)
    args = (inp.old_log_probs, adv, inp.response_mask)
    cpu = policy_loss(
        lp, *args, ratio_level=level, dual_clip=3.0, rollout_log_probs=inp.ref_log_probs, tis_cap=2.0
    )
    gpu = policy_loss(
        lp.cuda(),
        *(a.cuda() for a in args),
        ratio_level=level,
        dual_clip=3.0,
        rollout_log_probs=inp.ref_log_probs.cuda(),
        tis_cap=2.0,
    )
    for a, b in zip(cpu, gpu, strict=True):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(
        kl_penalty(lp.cuda(), inp.ref_log_probs.cuda()).cpu(), kl_penalty(lp, inp.ref_log_probs)
    )
