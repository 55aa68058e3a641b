"""From trajectories to training rows: one row per agent turn (that turn's prompt + response).

Rows are right-padded into tensors; `response_mask` is aligned with `input_ids` (True where the token
was sampled by the policy), so log-probs computed position by position can be masked directly.
The per-row ids (trajectory, group, step, anchor) feed every advantage estimator with one call shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from roll_algos import AdvantageInputs
from roll_rollout import Trajectory


@dataclass
class RowBatch:
    """Padded rows of a batch of trajectories. R rows, T tokens."""

    input_ids: torch.Tensor  # [R, T] long
    attention_mask: torch.Tensor  # [R, T] long
    response_mask: torch.Tensor  # [R, T] bool
    infer_log_probs: torch.Tensor  # [R, T] float, 0 off the response
    token_rewards: torch.Tensor  # [R, T] float: the turn's env reward on its last response token
    episode_scores: torch.Tensor  # [R]
    step_rewards: torch.Tensor  # [R]
    trajectory_ids: torch.Tensor  # [R] long
    group_ids: torch.Tensor  # [R] long
    step_ids: torch.Tensor  # [R] long
    anchor_ids: torch.Tensor  # [R] long
    tags: list[str]

    @property
    def num_rows(self) -> int:
        """R."""
        return int(self.input_ids.shape[0])

    def advantage_inputs(
        self,
        old_log_probs: torch.Tensor | None = None,
        ref_log_probs: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
    ) -> AdvantageInputs:
        """The estimator inputs of these rows."""
        return AdvantageInputs(
            response_mask=self.response_mask,
            token_rewards=self.token_rewards,
            episode_scores=self.episode_scores,
            step_rewards=self.step_rewards,
            trajectory_ids=self.trajectory_ids,
            group_ids=self.group_ids,
            step_ids=self.step_ids,
            anchor_ids=self.anchor_ids,
            values=values,
            old_log_probs=old_log_probs,
            ref_log_probs=ref_log_probs,
        )


def build_rows(trajectories: Sequence[Trajectory], pad_id: int) -> RowBatch:
    """One row per turn of every trajectory (trajectories without turns contribute nothing)."""
    rows = [(ti, t, k, turn) for ti, t in enumerate(trajectories) for k, turn in enumerate(t.turns)]
    if not rows:
        raise ValueError("no turns to train on: every trajectory is empty")
    width = max(len(turn.prompt_ids) + len(turn.response_ids) for *_, turn in rows)
    n = len(rows)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    response = torch.zeros((n, width), dtype=torch.bool)
    infer_lp = torch.zeros((n, width))
    token_rewards = torch.zeros((n, width))
    scalars = torch.zeros((n, 2))
    ids = torch.zeros((n, 4), dtype=torch.long)
    for r, (ti, traj, k, turn) in enumerate(rows):
        p, q = len(turn.prompt_ids), len(turn.response_ids)
        input_ids[r, : p + q] = torch.tensor(turn.prompt_ids + turn.response_ids, dtype=torch.long)
        attention[r, : p + q] = 1
        response[r, p : p + q] = True
        infer_lp[r, p : p + q] = torch.tensor(turn.log_probs)
        if q:
            token_rewards[r, p + q - 1] = turn.reward
        scalars[r] = torch.tensor([traj.score, turn.reward])
        ids[r] = torch.tensor([ti, traj.group_id, k, turn.anchor_id])
    return RowBatch(
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=response,
        infer_log_probs=infer_lp,
        token_rewards=token_rewards,
        episode_scores=scalars[:, 0].clone(),
        step_rewards=scalars[:, 1].clone(),
        trajectory_ids=ids[:, 0].clone(),
        group_ids=ids[:, 1].clone(),
        step_ids=ids[:, 2].clone(),
        anchor_ids=ids[:, 3].clone(),
        tags=[traj.tag for _, traj, _, _ in rows],
    )


def complete_groups(trajectories: Sequence[Trajectory]) -> tuple[list[Trajectory], int]:
    """Drop every group that has a failed trajectory (its advantages would be biased).

    Returns the kept trajectories and the number of failed ones.
    """
    failed_groups = {t.group_id for t in trajectories if t.error is not None}
    kept = [t for t in trajectories if t.group_id not in failed_groups]
    return kept, sum(t.error is not None for t in trajectories)
