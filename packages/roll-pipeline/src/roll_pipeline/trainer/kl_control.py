"""KL to the reference policy: per-token estimates, the reward penalty, and the coefficient controller.

A run has up to two KL terms: a reward penalty (`init_kl_coef`: r_t - beta * KL_t) and a loss term
(`use_kl_loss`, `kl_loss_coef`). `KLControl` owns both coefficients. With `target_kl` it runs the adaptive
controller of Ziegler et al. (roll_algos `AdaptiveKLController`) on a common scale factor s (1 at the
start): after each step, s <- s (1 + clip(KL / target - 1, -0.2, 0.2) * n / horizon) with KL the mean
per-token estimate of the step's batch and n its trajectories; both coefficients are their configured
value times s. Without `target_kl` the scale stays 1 (`FixedKLController`).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from roll_algos import AdaptiveKLController, FixedKLController

from roll_pipeline.trainer.samples import TurnView

__all__ = ["KLControl", "kl_reward_penalty"]


class KLControl:
    """The KL coefficients in use and the controller that scales them (see the module docstring)."""

    def __init__(self, reward_coef: float, loss_coef: float, target: float | None, horizon: int) -> None:
        self.base_reward_coef = reward_coef
        self.base_loss_coef = loss_coef
        self.controller: FixedKLController | AdaptiveKLController = (
            FixedKLController(1.0) if target is None else AdaptiveKLController(1.0, target, horizon)
        )

    @property
    def scale(self) -> float:
        """The controller's factor s on both coefficients."""
        return float(self.controller.value)

    @property
    def reward_coef(self) -> float:
        """beta of the reward penalty now."""
        return self.base_reward_coef * self.scale

    @property
    def loss_coef(self) -> float:
        """Coefficient of the KL loss term now."""
        return self.base_loss_coef * self.scale

    def update(self, measured_kl: float, n_trajectories: int) -> None:
        """Adapt the scale to the KL measured on a step of `n_trajectories` (no-op when fixed)."""
        self.controller.update(measured_kl, n_trajectories)

    def metrics(self) -> dict[str, float]:
        """The coefficients in use."""
        return {"critic/kl_coef": self.reward_coef, "actor/kl_loss_coef": self.loss_coef}

    def state(self) -> dict[str, float]:
        """What a checkpoint keeps."""
        return {"kl_scale": self.scale}

    def load_state(self, state: dict[str, float]) -> None:
        """Restore `state()`."""
        self.controller.value = float(state.get("kl_scale", 1.0))


def kl_reward_penalty(turns: TurnView, kl_turns: torch.Tensor, coef: float) -> TurnView:
    """The turn view with KL folded into every reward an estimator reads.

    token_rewards_t -= coef * KL_t; step_rewards -= coef * (the turn's summed KL); episode_scores -= coef *
    (the trajectory's summed KL). `kl_turns` [N, Q] is in the turn view.
    """
    penalty = coef * kl_turns * turns.response_mask.to(kl_turns.dtype)
    per_turn = penalty.sum(dim=1)
    per_traj = torch.zeros(int(turns.trajectory_ids.max()) + 1, dtype=per_turn.dtype).index_add_(
        0, turns.trajectory_ids, per_turn
    )
    return replace(
        turns,
        token_rewards=turns.token_rewards - penalty,
        step_rewards=turns.step_rewards - per_turn,
        episode_scores=turns.episode_scores - per_traj[turns.trajectory_ids],
    )
