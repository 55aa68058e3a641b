"""KL divergence between the policy and the reference: per-token estimators and coefficient controllers.

Per-token estimators of KL(pi || ref) from sampled tokens, with log_ratio = log pi - log ref:
- `kl`:   log_ratio                                   (k1, unbiased, high variance, can be negative)
- `abs`:  |log_ratio|
- `mse`:  0.5 * log_ratio ** 2                         (k2)
- `k3`:   exp(-log_ratio) + log_ratio - 1              (Schulman's low-variance, unbiased, >= 0),
          clamped to [-10, 10] for safety against a runaway ratio
- `full`: sum_v pi(v) (log pi(v) - log ref(v)) over the vocabulary: exact, needs both logits [B, T, V].
- `full_forward`: sum_v ref(v) (log ref(v) - log pi(v)), the exact KL(ref || pi), the other direction. Its
          gradient on a logit is pi(v) - ref(v): a token the policy has given up (pi -> 0) is pulled back
          in proportion to the reference's probability of it, where KL(pi || ref)'s pull vanishes with pi
          (and k3's is clamped away once ref / pi > ~11.5). Mass-covering: it keeps exploring what the
          reference deems plausible.

Controllers decide the coefficient beta: `FixedKLController` keeps it; `AdaptiveKLController` follows
Ziegler et al. (2019): e = clip(KL / target - 1, -0.2, 0.2), beta <- beta * (1 + e * n_steps / horizon).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import torch

from roll_algos.errors import AlgosError, check_same_shape, check_shape

__all__ = [
    "AdaptiveKLController",
    "FixedKLController",
    "KLEstimator",
    "apply_kl_penalty",
    "full_kl_from_logits",
    "kl_penalty",
]

K3_CLAMP = 10.0


class KLEstimator(StrEnum):
    """Per-token KL estimators (see the module docstring for the formulas)."""

    KL = "kl"
    ABS = "abs"
    MSE = "mse"
    K3 = "k3"
    FULL = "full"
    FULL_FORWARD = "full_forward"


def full_kl_from_logits(
    logits: torch.Tensor, ref_logits: torch.Tensor, *, forward: bool = False
) -> torch.Tensor:
    """Exact KL(pi || ref) per position over the vocabulary (`forward`: KL(ref || pi)).
    logits, ref_logits: [B, T, V] -> [B, T]."""
    check_shape("logits", logits, [None, None, None], hint="Pass the full-vocabulary logits [B, T, V].")
    check_same_shape("logits", logits, ref_logits=ref_logits)
    logp = torch.log_softmax(logits.float(), dim=-1)
    logq = torch.log_softmax(ref_logits.float(), dim=-1)
    if forward:
        return (logq.exp() * (logq - logp)).sum(-1)
    return (logp.exp() * (logp - logq)).sum(-1)


def kl_penalty(
    log_probs: torch.Tensor | None,
    ref_log_probs: torch.Tensor | None,
    kind: KLEstimator | str = KLEstimator.K3,
    *,
    logits: torch.Tensor | None = None,
    ref_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate [B, T].

    Args:
        log_probs: [B, T] log pi of the sampled tokens (unused by `full`).
        ref_log_probs: [B, T] log ref of the same tokens (unused by `full`).
        kind: `kl`, `abs`, `mse`, `k3`, `full` or `full_forward` (KL(ref || pi)).
        logits, ref_logits: [B, T, V], required by the `full` kinds only.
    Returns:
        [B, T] float (mask it or aggregate it with `aggregate_loss`). Differentiable in log_probs / logits.
    """
    try:
        kind = KLEstimator(kind)
    except ValueError:
        valid = [k.value for k in KLEstimator]
        raise AlgosError(f"kl_penalty kind: expected one of {valid}, got {kind!r}.") from None
    if kind in (KLEstimator.FULL, KLEstimator.FULL_FORWARD):
        if logits is None or ref_logits is None:
            raise AlgosError(
                f"kl_penalty(kind={kind.value!r}): expected logits and ref_logits [B, T, V], got None. "
                "Pass both, or use kind='k3' with per-token log-probs."
            )
        return full_kl_from_logits(logits, ref_logits, forward=kind is KLEstimator.FULL_FORWARD)
    if log_probs is None or ref_log_probs is None:
        raise AlgosError(
            f"kl_penalty(kind={kind.value!r}): expected log_probs and ref_log_probs [B, T], got None."
        )
    check_same_shape("log_probs", log_probs, ref_log_probs=ref_log_probs)
    log_ratio = log_probs - ref_log_probs
    if kind is KLEstimator.KL:
        return log_ratio
    if kind is KLEstimator.ABS:
        return log_ratio.abs()
    if kind is KLEstimator.MSE:
        return 0.5 * log_ratio.square()
    k3 = torch.exp(-log_ratio) + log_ratio - 1.0
    return k3.clamp(-K3_CLAMP, K3_CLAMP)


def apply_kl_penalty(
    token_rewards: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    coef: float,
    kind: KLEstimator | str = KLEstimator.K3,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KL as a reward penalty: r_t - coef * KL_t on the response tokens.

    Args:
        token_rewards, log_probs, ref_log_probs: [B, T]; response_mask: [B, T] bool.
    Returns:
        (penalised rewards [B, T], mean KL over the valid tokens (scalar) to feed a controller).
    """
    check_same_shape(
        "token_rewards",
        token_rewards,
        log_probs=log_probs,
        ref_log_probs=ref_log_probs,
        response_mask=response_mask,
    )
    kl = kl_penalty(log_probs, ref_log_probs, kind) * response_mask.to(token_rewards.dtype)
    mean_kl = kl.sum() / response_mask.sum().clamp(min=1)
    return token_rewards - coef * kl, mean_kl


@dataclass
class FixedKLController:
    """A constant KL coefficient. `update` is a no-op (kept for the controller call shape)."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> float:
        """Return the (unchanged) coefficient."""
        return self.value


@dataclass
class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019) steering the measured KL towards `target`.

    Attributes:
        value: current coefficient beta (init_kl_coef).
        target: target KL per token.
        horizon: steps over which a persistent error multiplies beta by about e^0.2.
        clip: bound of the proportional error (0.2 in the paper).
    """

    value: float
    target: float
    horizon: float
    clip: float = 0.2

    def __post_init__(self) -> None:
        if self.target <= 0 or self.horizon <= 0:
            raise AlgosError(
                f"AdaptiveKLController: target and horizon must be > 0, got {self.target} and {self.horizon}. "
                "Use FixedKLController for a constant coefficient."
            )

    def update(self, current_kl: float, n_steps: int) -> float:
        """Update beta from the KL measured over the last `n_steps` samples; return the new beta."""
        error = min(max(current_kl / self.target - 1.0, -self.clip), self.clip)
        self.value *= 1.0 + error * n_steps / self.horizon
        return self.value
