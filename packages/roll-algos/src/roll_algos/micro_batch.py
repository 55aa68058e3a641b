"""`MicroBatch`: one forward / backward of a train step, every key the pipeline sets (roll_pipeline.trainer) and a
strategy or a loss (`ActorLoss`, `CriticLoss`, a `roll_strategies.protocols.LossFn`) reads, named once."""

from __future__ import annotations

from typing import TypedDict

import torch

__all__ = ["MicroBatch"]


class MicroBatch(TypedDict, total=False):
    """One micro-batch of B rows x T tokens; every key is optional to the type, each reader checks its own.

    Attributes:
        input_ids: [B, T] token ids, padded on the right.
        attention_mask: [B, T] 1 on real tokens.
        response_mask: [B, T] bool, the tokens trained on (the strategies compute outputs there only).
        segment_ids: [B, T] the turn of each response token (`ratio_level="segment"`, the turn-max entropy).
        old_log_probs: [B, T] log-probs of the policy that produced the advantages.
        advantages: [B, T] per-token advantages.
        ref_log_probs: [B, T] the reference policy's log-probs (the KL loss, `skip_confident_by="reference"`).
        rollout_log_probs: [B, T] the sampler's log-probs (truncated importance sampling, `tis_cap`).
        old_values: [B, T] the critic's values when the experience was made (the value clip).
        returns: [B, T] the critic's targets.
        loss_scale: this micro-batch's share of the mini-batch's loss units, all ranks together (float or a
            0-dim tensor; absent: 1 / the micro-batches of all ranks).
        pack_capacity: run the forward packed into rows of that many tokens (int or a 0-dim tensor).
        share_prefix: true runs the forward as a prefix tree, false padded / packed (bool or a 0-dim tensor;
            absent: the strategy's setting).
        reference_model: a frozen reference causal LM the train worker adds in its own process (never sent
            between processes); the strategy then adds `full_kl` and `full_kl_forward`.
        full_kl: [B, T] the exact KL(pi || ref) over the vocabulary, with grad (added by the strategy).
        full_kl_forward: [B, T] the exact KL(ref || pi), with grad (added by the strategy).
        greedy: [B, T] 1.0 where the sampled token is the policy's argmax, 0.0 elsewhere (added by the strategy
            with the entropy; `actor/sampled_not_greedy`).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    segment_ids: torch.Tensor
    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    ref_log_probs: torch.Tensor
    rollout_log_probs: torch.Tensor
    old_values: torch.Tensor
    returns: torch.Tensor
    loss_scale: torch.Tensor | float
    pack_capacity: torch.Tensor | int
    share_prefix: torch.Tensor | bool
    reference_model: torch.nn.Module
    full_kl: torch.Tensor
    full_kl_forward: torch.Tensor
    greedy: torch.Tensor
