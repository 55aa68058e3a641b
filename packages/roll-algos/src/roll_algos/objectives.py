"""The objectives a train worker runs: the actor's PPO-family loss, the critic's value loss and the
per-token KL to the reference policy.

Small picklable callables (they travel to the train workers, which import roll_algos and nothing of the
orchestrator or the rollout); all the maths is in this package's `losses`, `kl` and `rewards`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from roll_algos.errors import AlgosError
from roll_algos.gspo import gspo_clip_problem
from roll_algos.kl import kl_penalty
from roll_algos.losses import aggregate_loss, value_loss
from roll_algos.micro_batch import MicroBatch
from roll_algos.policy_losses import (
    DEFAULT_POLICY_LOSS,
    PolicyLossConfig,
    PolicyLossInputs,
    check_policy_loss_config,
    compute_policy_loss,
)

__all__ = [
    "ENTROPY_SCOPES",
    "FULL_KL_KINDS",
    "ActorLoss",
    "CriticLoss",
    "skipped_tokens_problem",
    "token_kl",
    "turn_max_entropy",
    "turn_peak_tokens",
    "turns_not_greedy",
]

ENTROPY_SCOPES = ("response", "decision", "turn_max")
"""The tokens an entropy bonus can cover (`ActorLoss.entropy_scope`)."""

FULL_KL_KINDS = ("full", "full_forward")
"""The `kl_penalty` kinds computed exactly over the vocabulary where both models' logits are (the train
worker holds a frozen reference for them); the others estimate the KL from the sampled tokens' log-probs."""


def token_kl(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    kind: str,
    *,
    exact: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate [R, T] (full_forward: KL(ref || pi)), 0 off the response.

    `kind` is a roll_algos `KLEstimator`; the `FULL_KL_KINDS` take `exact`, the [R, T] per-token KL in that
    kind's direction computed over the vocabulary by whoever holds both models' logits (`kl_penalty` with
    logits, or a train worker's chunked pass); the sampled kinds read `log_probs` and `ref_log_probs`.
    """
    mask = response_mask.bool()
    if kind not in FULL_KL_KINDS:
        return torch.where(mask, kl_penalty(log_probs, ref_log_probs, kind), torch.zeros_like(log_probs))
    if exact is None or exact.shape != mask.shape:
        raise ValueError(
            f"token_kl(kind={kind!r}) needs `exact`, the per-token exact KL [R, T] of shape {tuple(mask.shape)}, "
            f"got {None if exact is None else tuple(exact.shape)}; compute it where both models' logits are"
        )
    return torch.where(mask, exact, torch.zeros_like(exact))


def skipped_tokens_problem(
    policy_loss: str, ratio_level: str, skip_confident_tokens: float | None
) -> str | None:
    """What is wrong with leaving confident tokens out of a ratio that averages over tokens, or None.

    GSPO's ratio (and PPO's `sequence` / `segment` ratios) is the exp of the mean log-ratio over a sequence's
    (a turn's) tokens. `skip_confident_tokens` hands the loss only the decision tokens, so that mean would be
    over the kept tokens alone: another ratio than the length-normalised one the method defines.
    """
    if skip_confident_tokens is None:
        return None
    if policy_loss == "gspo":
        averaged = "gspo's sequence ratio"
    elif ratio_level in ("sequence", "segment"):
        averaged = f"ratio_level={ratio_level}'s ratio"
    else:
        return None
    return (
        f"skip_confident_tokens={skip_confident_tokens:g} with {averaged}: that ratio is the mean log-ratio over"
        " every token of the sequence (turn), and skipping confident tokens would average it over the kept ones"
        " only, which is not the method's length normalisation; set skip_confident_tokens=null, or use"
        " ratio_level=token with policy_loss=ppo"
    )


def _turns(
    mask: torch.Tensor, segment_ids: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The response tokens of `mask` [B, T] (not empty) as (rows, cols) and each one's turn index, with the
    number of turns: a turn is a row's tokens of one `segment_ids` value (None: each row is one turn)."""
    rows, cols = mask.bool().nonzero(as_tuple=True)
    seg = torch.zeros_like(rows) if segment_ids is None else segment_ids[rows, cols].long()
    keys, index = torch.unique(rows * (int(seg.max()) + 1) + seg, return_inverse=True)
    return rows, cols, index, keys.numel()


def _turn_max(values: torch.Tensor, mask: torch.Tensor, segment_ids: torch.Tensor | None) -> torch.Tensor:
    """Each turn's largest value of `values` [B, T] over its response tokens (`mask`, not empty), [turns]."""
    rows, cols, index, turns = _turns(mask, segment_ids)
    peak = torch.full((turns,), float("-inf"), device=values.device)
    return peak.scatter_reduce(0, index, values.detach()[rows, cols].float(), "amax")


def turn_peak_tokens(
    entropy: torch.Tensor, mask: torch.Tensor, segment_ids: torch.Tensor | None
) -> torch.Tensor:
    """[B, T] bool: each turn's response token of largest `entropy` (the first of a tie), one per turn.

    Where a turn decides (its move) once the format tokens are near-certain; unlike the tokens
    `skip_confident_tokens` keeps, it stays in however sure the policy grows of its choice.
    """
    peaks = torch.zeros_like(mask, dtype=torch.bool)
    if not bool(mask.bool().any()):
        return peaks
    rows, cols, index, turns = _turns(mask, segment_ids)
    values = entropy.detach()[rows, cols].float()
    peak = torch.full((turns,), float("-inf"), device=values.device).scatter_reduce(0, index, values, "amax")
    position = torch.arange(rows.numel(), device=values.device)
    tied = values == peak[index]
    first = torch.full((turns,), rows.numel(), device=values.device)
    first = first.scatter_reduce(0, index[tied], position[tied], "amin")
    peaks[rows[first], cols[first]] = True
    return peaks


def turn_max_entropy(entropy: torch.Tensor, mask: torch.Tensor, segment_ids: torch.Tensor | None) -> float:
    """The mean over turns of each turn's largest per-token entropy: the entropy where a turn decides.

    A turn is a row's response tokens of one `segment_ids` value (None: each row is one turn). An answer's
    format tokens are near-certain once learnt, so a mean over every token falls with them; a turn's most
    uncertain token is its choice (a move), and this stays high while the policy still explores its choices.
    """
    if not bool(mask.bool().any()):
        return 0.0
    return float(_turn_max(entropy, mask, segment_ids).mean())


def turns_not_greedy(greedy: torch.Tensor, mask: torch.Tensor, segment_ids: torch.Tensor | None) -> float:
    """The share of turns whose sampled response is not what greedy decoding would have written: turns with
    a token that is not its distribution's argmax (`greedy` [B, T]: 1.0 where it is). Each token is judged
    given the sampled tokens before it, so a turn counts from its first departure on, once; 0 when nothing
    is sampled off the argmax (the samples of a group then agree wherever their observations do)."""
    if not bool(mask.bool().any()):
        return 0.0
    return float(_turn_max(1.0 - greedy, mask, segment_ids).mean())


def _valid_rows(mask: torch.Tensor) -> int:
    return int(mask.any(dim=-1).sum())


def _coverage(term_mask: torch.Tensor, mask: torch.Tensor, agg_mode: str) -> float:
    """The loss units of a term's tokens `term_mask` over the micro-batch's (`mask`, its response tokens): tokens
    for token-mean, rows with a token otherwise. A term aggregated over `term_mask` times this is the term
    aggregated over the micro-batch's own units, the units its `loss_scale` shares out."""
    if agg_mode == "token-mean":
        return float(term_mask.sum()) / max(float(mask.sum()), 1.0)
    return _valid_rows(term_mask) / max(_valid_rows(mask), 1)


@dataclass(frozen=True)
class ActorLoss:
    """loss = pg_loss + kl_loss_coef * KL(pi || ref) - entropy_loss_coef * entropy.

    pg_loss is the registered policy loss named `policy_loss` (`ppo`, the default; `gspo`; a plugin's:
    `roll_algos.register_policy_loss`), run through `compute_policy_loss`; an unknown name, or a
    `dual_clip` / `ratio_level` the loss does not read, is refused when the objective is built.
    Expects micro-batches with `response_mask`, `old_log_probs`, `advantages`, `loss_scale`;
    `segment_ids` (the turn of each response token) for `ratio_level="segment"`; `ref_log_probs` when
    `kl_loss_coef > 0` (or `full_kl` / `full_kl_forward`, the exact KL added by the strategy from its frozen
    reference, when `kl_penalty` is `full` / `full_forward`); and `rollout_log_probs` (the sampler's) when `tis_cap` is set: each token's policy
    loss is then weighted by min(exp(old - rollout), tis_cap). `ratio_level`: `token` (PPO), `segment`
    (one ratio per turn), `sequence` (GSPO: one per training row). `dual_clip` caps the loss of negative
    advantages at -A * c. `seq-mean-token-sum-norm` divides each row's token sum by `norm_constant` (a
    fixed length, Dr. GRPO) before the mean over rows. With `skip_confident_tokens = p`, the
    policy-gradient term leaves out the response tokens the old policy drew with probability >= p (format
    tokens such as an answer tag): they carry no decision, and their tiny, sign-noisy gradients, which
    AdamW scales up to full steps, drown the decision tokens' signal in the embeddings a small model
    shares. The KL and entropy terms still cover every response token. `skip_confident_by="reference"`
    compares the reference model's probability of the token (`ref_log_probs`) instead of the sampler's.
    `entropy_scope="decision"` aggregates the entropy bonus over those decision tokens only, so it keeps
    the choices exploring without flattening the answer format; `entropy_scope="turn_max"` over each turn's
    token of largest entropy (`turn_peak_tokens`), which stays covered once the sampler is sure of it. A term over fewer tokens than the response's
    (the decision tokens) is divided by the micro-batch's loss units all the same (response tokens for
    token-mean, rows with a response otherwise; `_coverage`), a skipped token or row counting 0: those are the
    units `loss_scale` shares out, so the mini-batch's loss does not depend on how its rows were cut into
    micro-batches.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    agg_mode: str = "seq-mean-token-mean"
    ratio_level: str = "token"
    kl_loss_coef: float = 0.0
    kl_penalty: str = "k3"
    entropy_loss_coef: float = 0.0
    skip_confident_tokens: float | None = None
    skip_confident_by: str = "sampler"
    entropy_scope: str = "response"
    tis_cap: float | None = None
    norm_constant: float = 1.0
    policy_loss: str = DEFAULT_POLICY_LOSS

    def __post_init__(self) -> None:
        if self.entropy_scope not in ENTROPY_SCOPES:
            raise AlgosError(f"entropy_scope must be one of {ENTROPY_SCOPES}, got {self.entropy_scope!r}")
        check_policy_loss_config(self.policy_loss, self._loss_config(None))
        skipped = skipped_tokens_problem(self.policy_loss, self.ratio_level, self.skip_confident_tokens)
        if skipped is not None:
            raise AlgosError(skipped)
        if self.policy_loss == "gspo" and (clip := gspo_clip_problem(self.clip_low, self.clip_high)):
            warnings.warn(clip, stacklevel=2)

    def _norm(self, mask: torch.Tensor) -> float:
        """Divisor of seq-mean-token-sum-norm: norm_constant per row with a valid token (a mean over rows)."""
        return self.norm_constant * max(_valid_rows(mask), 1)

    def _aggregate(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return aggregate_loss(x, mask, self.agg_mode, self._norm(mask))

    def _loss_config(self, pg_mask: torch.Tensor | None) -> PolicyLossConfig:
        """The policy loss's settings; `norm_constant` from the micro-batch's decision tokens `pg_mask`."""
        return PolicyLossConfig(
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            dual_clip=self.dual_clip,
            agg_mode=self.agg_mode,
            ratio_level=self.ratio_level,
            tis_cap=self.tis_cap,
            norm_constant=None if pg_mask is None else self._norm(pg_mask),
        )

    def __call__(
        self, log_probs: torch.Tensor, entropy: torch.Tensor | None, mb: MicroBatch
    ) -> tuple[torch.Tensor, dict[str, float]]:
        mask = mb["response_mask"]
        pg_mask = self._decision_tokens(mask, mb)
        inputs = PolicyLossInputs(
            log_probs,
            mb["old_log_probs"],
            mb["advantages"],
            pg_mask,
            segment_ids=mb.get("segment_ids") if self.ratio_level == "segment" else None,
            rollout_log_probs=mb.get("rollout_log_probs") if self.tis_cap is not None else None,
        )
        pg = compute_policy_loss(self.policy_loss, inputs, self._loss_config(pg_mask))
        loss = pg.loss * _coverage(pg_mask, mask, self.agg_mode)
        metrics = {
            "actor/pg_loss": float(loss.detach()),
            "actor/pg_clipfrac": float(pg.clip_frac),
            "actor/approxkl": float(pg.approx_kl),
            "actor/ratio_mean": float(pg.ratio_mean),
            "actor/ratio_max": float(pg.ratio_max),
            "actor/pg_token_frac": float(pg_mask.sum() / mask.sum().clamp(min=1)),
        }
        if self.dual_clip is not None:
            metrics["actor/dual_clipfrac"] = float(pg.dual_clip_frac)
        if self.tis_cap is not None:
            metrics["actor/tis_weight_mean"] = float(pg.tis_weight_mean)
        if self.kl_loss_coef > 0:
            kl = self._aggregate(self._kl(log_probs, mb), mask)
            loss = loss + self.kl_loss_coef * kl
            metrics["actor/kl_loss"] = float(kl.detach())
        if entropy is not None:
            scope = self._entropy_tokens(entropy, mask, pg_mask, mb.get("segment_ids"))
            ent = self._aggregate(entropy, scope)
            loss = loss - self.entropy_loss_coef * ent * _coverage(scope, mask, self.agg_mode)
            metrics["actor/entropy"] = float(ent.detach())
            metrics["actor/entropy/turn_max"] = turn_max_entropy(entropy, mask, mb.get("segment_ids"))
        if "greedy" in mb:  # the strategy's argmax column (it comes with the entropy)
            metrics["actor/sampled_not_greedy"] = turns_not_greedy(mb["greedy"], mask, mb.get("segment_ids"))
        metrics["actor/loss"] = float(loss.detach())
        return loss, metrics

    def _kl(self, log_probs: torch.Tensor, mb: MicroBatch) -> torch.Tensor:
        """Per-token KL(pi || ref) of the loss term, with gradient."""
        if self.kl_penalty in FULL_KL_KINDS:
            key = "full_kl" if self.kl_penalty == "full" else "full_kl_forward"
            if key not in mb:
                raise ValueError(
                    f"kl_penalty={self.kl_penalty!r} needs the exact KL `{key}` in the micro-batch, got none: run"
                    " the train step with with_full_kl=True on an ActorTrainWorker holding the reference"
                    " (reference_model_path)"
                )
            return mb[key]
        return kl_penalty(log_probs, mb["ref_log_probs"], kind=self.kl_penalty)

    def _entropy_tokens(
        self,
        entropy: torch.Tensor,
        mask: torch.Tensor,
        pg_mask: torch.Tensor,
        segment_ids: torch.Tensor | None,
    ) -> torch.Tensor:
        """The response tokens the entropy bonus covers (`entropy_scope`)."""
        if self.entropy_scope == "decision":
            return pg_mask
        if self.entropy_scope == "turn_max":
            return turn_peak_tokens(entropy, mask, segment_ids)
        return mask

    def _decision_tokens(self, mask: torch.Tensor, mb: MicroBatch) -> torch.Tensor:
        """The response tokens the policy-gradient term trains on."""
        if self.skip_confident_tokens is None:
            return mask
        if self.skip_confident_by == "reference":
            if "ref_log_probs" not in mb:
                raise ValueError("skip_confident_by='reference' needs `ref_log_probs` in the micro-batch")
            judged = mb["ref_log_probs"]
        else:
            judged = mb["old_log_probs"]
        return mask & (judged < math.log(self.skip_confident_tokens))


@dataclass(frozen=True)
class CriticLoss:
    """0.5 * token-mean of (V - R)^2 over the response tokens, clipped around the old values by
    `clip_range` when set (`roll_algos.value_loss`). Micro-batches carry `old_values` and `returns` [B, T]."""

    clip_range: float | None = None

    def __call__(self, values: torch.Tensor, mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
        out = value_loss(
            values,
            mb["old_values"],
            mb["returns"],
            mb["response_mask"],
            clip_range=self.clip_range,
            agg_mode="token-mean",
        )
        return out.loss, {
            "critic/vf_loss": float(out.loss.detach()),
            "critic/vf_clipfrac": float(out.clip_frac),
            "critic/vpred_mean": float(out.value_mean),
        }
