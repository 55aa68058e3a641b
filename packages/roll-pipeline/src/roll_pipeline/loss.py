"""The actor loss the pipeline hands to the train strategy: PPO-clip + KL loss - entropy bonus.

A small picklable callable (it travels to the train worker); all the maths is roll_algos'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from roll_algos import aggregate_loss, kl_penalty, policy_loss


@dataclass(frozen=True)
class ActorLoss:
    """loss = pg_loss + kl_loss_coef * KL(pi || ref) - entropy_loss_coef * entropy.

    Expects micro-batches with `response_mask`, `old_log_probs`, `advantages`, `loss_scale`,
    `ref_log_probs` when `kl_loss_coef > 0`, and `rollout_log_probs` (the sampler's) when `tis_cap` is
    set: each token's policy loss is then weighted by min(exp(old - rollout), tis_cap). With `skip_confident_tokens = p`, the policy-gradient term
    leaves out the response tokens the old policy drew with probability >= p (format tokens such as an
    answer tag): they carry no decision, and their tiny, sign-noisy gradients, which AdamW scales up
    to full steps, drown the decision tokens' signal in the embeddings a small model shares. The KL
    and entropy terms still cover every response token.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    agg_mode: str = "seq-mean-token-mean"
    kl_loss_coef: float = 0.0
    kl_penalty: str = "k3"
    entropy_loss_coef: float = 0.0
    skip_confident_tokens: float | None = None
    tis_cap: float | None = None

    @property
    def needs_entropy(self) -> bool:
        """Whether the strategy must compute the entropy."""
        return True

    def __call__(
        self, log_probs: torch.Tensor, entropy: torch.Tensor | None, mb: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        mask = mb["response_mask"]
        pg_mask = self._decision_tokens(mask, mb["old_log_probs"])
        pg = policy_loss(
            log_probs,
            mb["old_log_probs"],
            mb["advantages"],
            pg_mask,
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            dual_clip=self.dual_clip,
            agg_mode=self.agg_mode,
            rollout_log_probs=mb.get("rollout_log_probs") if self.tis_cap is not None else None,
            tis_cap=self.tis_cap,
        )
        loss = pg.loss
        metrics = {
            "actor/pg_loss": float(pg.loss.detach()),
            "actor/pg_clipfrac": float(pg.clip_frac),
            "actor/approxkl": float(pg.approx_kl),
            "actor/ratio_mean": float(pg.ratio_mean),
            "actor/ratio_max": float(pg.ratio_max),
            "actor/pg_token_frac": float(pg_mask.sum() / mask.sum().clamp(min=1)),
        }
        if self.tis_cap is not None:
            metrics["actor/tis_weight_mean"] = float(pg.tis_weight_mean)
        if self.kl_loss_coef > 0 and "ref_log_probs" in mb:
            kl = aggregate_loss(
                kl_penalty(log_probs, mb["ref_log_probs"], kind=self.kl_penalty), mask, self.agg_mode
            )
            loss = loss + self.kl_loss_coef * kl
            metrics["actor/kl_loss"] = float(kl.detach())
        if entropy is not None:
            ent = aggregate_loss(entropy, mask, self.agg_mode)
            loss = loss - self.entropy_loss_coef * ent
            metrics["actor/entropy"] = float(ent.detach())
        metrics["actor/loss"] = float(loss.detach())
        return loss, metrics

    def _decision_tokens(self, mask: torch.Tensor, old_log_probs: torch.Tensor) -> torch.Tensor:
        """The response tokens the policy-gradient term trains on."""
        if self.skip_confident_tokens is None:
            return mask
        return mask & (old_log_probs < math.log(self.skip_confident_tokens))
