"""Behaviour cloning, registered as the policy loss `sft`: the negative log-likelihood of the response tokens,
whatever their advantage. roll-pipeline's `demonstration_steps` train the actor with it on the envs'
demonstrations before the RL steps (docs/algos/policy_loss.md#sft).
"""

from __future__ import annotations

import torch

from roll_algos.losses import PolicyLossOutput, aggregate_loss
from roll_algos.policy_losses import PolicyLossConfig, PolicyLossInputs, register_policy_loss

__all__ = ["sft"]


@register_policy_loss("sft")
def sft(inputs: PolicyLossInputs, config: PolicyLossConfig) -> PolicyLossOutput:
    """Negative log-likelihood (behaviour cloning): l_t = -log pi(y_t) on the response tokens.

        loss = aggregate(l)

    aggregated by `config.agg_mode` over `response_mask` [B, T] (`seq-mean-token-mean`, the default, averages
    each row's tokens, then the rows). Advantages, the clip range, the rollout log-probs and every
    `POLICY_LOSS_OPTIONS` are not read: every response token is a target. The diagnostics compare the
    current log-probs with `old_log_probs` as PPO's do (the ratio is reported, never used); the clip
    fractions are 0. Tokens off the mask are never read, so -inf log-probs on padding give no NaN.
    """
    inputs.check("sft", config)
    mask = inputs.response_mask.bool()
    zeros = torch.zeros_like(inputs.log_probs)
    nll = torch.where(mask, -inputs.log_probs, zeros)
    loss = aggregate_loss(nll, mask, config.agg_mode, config.norm_constant)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        log_ratio = torch.where(mask, inputs.log_probs.detach() - inputs.old_log_probs, zeros)
        ratio = torch.exp(log_ratio.clamp(-20.0, 20.0))
        none = torch.zeros((), dtype=loss.dtype, device=loss.device)
        any_valid = bool(mask.any())
        return PolicyLossOutput(
            loss=loss,
            clip_frac=none,
            clip_frac_low=none,
            clip_frac_high=none,
            dual_clip_frac=none,
            approx_kl=-log_ratio.sum() / n,
            ratio_mean=torch.where(mask, ratio, zeros).sum() / n,
            ratio_max=ratio[mask].max() if any_valid else ratio.new_ones(()),
            ratio_min=ratio[mask].min() if any_valid else ratio.new_ones(()),
            tis_weight_mean=torch.ones((), dtype=loss.dtype, device=loss.device),
        )
