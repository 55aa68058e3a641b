"""From trajectories to training samples, in one of two shapes, plus the per-turn view the estimators use.

- `step`: one row per agent turn, that turn's prompt + response (GiGPO's step-wise training);
- `trajectory`: one row per episode (StarPO): the whole conversation as the policy saw it. Each turn's
  prompt must extend the previous turn's prompt + response token for token (prompts that keep the
  whole history), so the row is the last turn's prompt + response, every turn's response sits at the
  column where its own prompt ends, and the observations in between are masked. The row is built from
  the exact sampled ids: nothing is re-tokenised, and a trajectory whose prompts do not chain is an error,
  except an `openai_agent` episode whose calls do not chain (`UNCHAINED_METRIC` is 1: its template or agent
  re-rendered the history): its calls train as one step row each in the same batch, as no one sequence
  holds them.

Advantages are computed on the *turn view*: one compact row per turn holding only its response tokens,
the row model of every estimator in roll_algos (a turn's token sequence, step rewards, anchors). Both
sample shapes hold the same response tokens, so `to_train` / `to_turns` move per-token tensors (values,
log-probs, advantages) between the views exactly; which shape trains never changes what an estimator
computes, and every estimator works with either shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

import torch
from roll_algos import AdvantageInputs, MicroBatch
from roll_rollout import Trajectory
from roll_rollout.hosting.agent_turns import UNCHAINED_METRIC

SampleShape = Literal["step", "trajectory"]


class SampleError(ValueError):
    """Trajectories cannot be turned into samples of the requested shape (the message says why and the fix)."""


@dataclass
class TurnView:
    """One compact row per turn (N turns, Q = longest response): the estimators' inputs."""

    response_mask: torch.Tensor  # [N, Q] bool
    token_rewards: torch.Tensor  # [N, Q]: the turn's env reward on its last response token
    episode_scores: torch.Tensor  # [N]
    step_rewards: torch.Tensor  # [N]
    trajectory_ids: torch.Tensor  # [N] long
    group_ids: torch.Tensor  # [N] long
    step_ids: torch.Tensor  # [N] long
    anchor_ids: torch.Tensor  # [N] long
    anchor_texts: list[str] | None = None  # [N] the observation each anchor id hashes (`Turn.state_key`)


@dataclass
class Samples:
    """Training rows of a batch (R rows, T tokens) and the turn view of the same response tokens."""

    shape: SampleShape
    input_ids: torch.Tensor  # [R, T] long, right-padded
    attention_mask: torch.Tensor  # [R, T] long
    response_mask: torch.Tensor  # [R, T] bool: the sampled tokens (trained)
    segment_ids: torch.Tensor  # [R, T] long: 1 + turn index on response tokens, 0 elsewhere
    infer_log_probs: torch.Tensor  # [R, T] the sampler's log-probs, 0 off the response
    row_trajectory: torch.Tensor  # [R] long: index of the row's trajectory in the batch
    turns: TurnView
    tags: list[str]  # per row
    _train_index: torch.Tensor  # [M] flat positions in [R, T] of the M response tokens
    _turn_index: torch.Tensor  # [M] flat positions in [N, Q] of the same tokens

    @property
    def num_rows(self) -> int:
        """R."""
        return int(self.input_ids.shape[0])

    @property
    def row_groups(self) -> torch.Tensor:
        """[R] long: the group id of each row's trajectory (a group's rows share their first prompt)."""
        group_of = torch.zeros(int(self.row_trajectory.max()) + 1, dtype=torch.long)
        group_of[self.turns.trajectory_ids] = self.turns.group_ids
        return group_of[self.row_trajectory]

    @property
    def lengths(self) -> torch.Tensor:
        """[R] real tokens per row."""
        return self.attention_mask.sum(dim=1)

    def to_train(self, x: torch.Tensor) -> torch.Tensor:
        """A per-token tensor of the turn view [N, Q] -> the training rows [R, T] (0 off the response)."""
        out = x.new_zeros(self.input_ids.shape)
        out.view(-1)[self._train_index] = x.reshape(-1)[self._turn_index]
        return out

    def to_turns(self, x: torch.Tensor) -> torch.Tensor:
        """A per-token tensor of the training rows [R, T] -> the turn view [N, Q] (0 off the response)."""
        out = x.new_zeros(self.turns.response_mask.shape)
        out.view(-1)[self._turn_index] = x.reshape(-1)[self._train_index]
        return out

    def tensors(self) -> MicroBatch:
        """What a forward pass over the rows needs (a new micro-batch of every row: the updates add their keys)."""
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "response_mask": self.response_mask,
        }

    def advantage_inputs(
        self,
        values: torch.Tensor | None = None,
        old_log_probs: torch.Tensor | None = None,
        ref_log_probs: torch.Tensor | None = None,
    ) -> AdvantageInputs:
        """Estimator inputs on the turn view (whose fields are those of `AdvantageInputs` but the per-token
        tensors, which are given in the training rows' layout)."""

        def view(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else self.to_turns(x)

        return AdvantageInputs(
            **{f.name: getattr(self.turns, f.name) for f in fields(self.turns)},
            values=view(values),
            old_log_probs=view(old_log_probs),
            ref_log_probs=view(ref_log_probs),
        )


def _check_chain(traj: Trajectory, index: int) -> None:
    """Each turn's prompt must start with the previous turn's prompt + response, token for token."""
    for k in range(1, len(traj.turns)):
        prev, turn = traj.turns[k - 1], traj.turns[k]
        head = len(prev.prompt_ids) + len(prev.response_ids)
        if turn.prompt_ids[:head] != prev.prompt_ids + prev.response_ids:
            raise SampleError(
                f"sample_shape=trajectory: trajectory {index} (env {traj.env_id}, tag {traj.tag!r}) has a turn {k}"
                " whose prompt does not extend turn"
                f" {k - 1}'s prompt + response, so no single sequence holds what the policy saw at both turns"
                " (prompts that drop history: max_history_turns is not null). Set custom_envs.<tag>."
                "max_history_turns: null, or sample_shape=step."
            )


def _layout(
    trajectories: Sequence[Trajectory], shape: SampleShape
) -> tuple[list[list[int]], list[int], list[str], list[tuple[int, int]]]:
    """(training rows, each row's trajectory, each row's tag, (row, first response column) of every turn)."""
    rows: list[list[int]] = []
    row_traj, tags, place = [], [], []
    for ti, traj in enumerate(trajectories):
        one_row = shape == "trajectory" and bool(traj.turns) and not traj.metrics.get(UNCHAINED_METRIC)
        if one_row:
            _check_chain(traj, ti)
        ends = traj.turns[-1:] if one_row else traj.turns  # the turns whose prompt + response is a row
        place += [(len(rows) + (0 if one_row else k), len(t.prompt_ids)) for k, t in enumerate(traj.turns)]
        rows += [t.prompt_ids + t.response_ids for t in ends]
        row_traj += [ti] * len(ends)
        tags += [traj.tag] * len(ends)
    return rows, row_traj, tags, place


def build_samples(trajectories: Sequence[Trajectory], pad_id: int, shape: SampleShape = "step") -> Samples:
    """Samples of `shape` from whole trajectories (trajectories without turns contribute nothing)."""
    if shape not in ("step", "trajectory"):
        raise SampleError(f"Expected sample shape 'step' or 'trajectory', got {shape!r}.")
    turns = [(ti, t, k, turn) for ti, t in enumerate(trajectories) for k, turn in enumerate(t.turns)]
    if not turns:
        raise SampleError("no turns to train on: every trajectory is empty")
    rows, row_traj, tags, place = _layout(trajectories, shape)
    width = max(len(r) for r in rows)
    n_rows, n_turns = len(rows), len(turns)
    q_max = max(1, max(len(turn.response_ids) for *_, turn in turns))
    input_ids = torch.full((n_rows, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n_rows, width), dtype=torch.long)
    for r, ids in enumerate(rows):
        input_ids[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention[r, : len(ids)] = 1
    response = torch.zeros((n_rows, width), dtype=torch.bool)
    segments = torch.zeros((n_rows, width), dtype=torch.long)
    infer_lp = torch.zeros((n_rows, width))
    turn_mask = torch.zeros((n_turns, q_max), dtype=torch.bool)
    token_rewards = torch.zeros((n_turns, q_max))
    scalars = torch.zeros((n_turns, 2))
    ids = torch.zeros((n_turns, 4), dtype=torch.long)
    train_index, turn_index = [], []
    for n, ((ti, traj, k, turn), (r, col)) in enumerate(zip(turns, place, strict=True)):
        q = len(turn.response_ids)
        response[r, col : col + q] = True
        segments[r, col : col + q] = k + 1
        infer_lp[r, col : col + q] = torch.tensor(turn.log_probs)
        turn_mask[n, :q] = True
        if q:
            token_rewards[n, q - 1] = turn.reward
        scalars[n] = torch.tensor([traj.score, turn.reward])
        ids[n] = torch.tensor([ti, traj.group_id, k, turn.anchor_id])
        train_index += range(r * width + col, r * width + col + q)
        turn_index += range(n * q_max, n * q_max + q)
    return Samples(
        shape=shape,
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=response,
        segment_ids=segments,
        infer_log_probs=infer_lp,
        row_trajectory=torch.tensor(row_traj, dtype=torch.long),
        turns=TurnView(
            response_mask=turn_mask,
            token_rewards=token_rewards,
            episode_scores=scalars[:, 0].clone(),
            step_rewards=scalars[:, 1].clone(),
            trajectory_ids=ids[:, 0].clone(),
            group_ids=ids[:, 1].clone(),
            step_ids=ids[:, 2].clone(),
            anchor_ids=ids[:, 3].clone(),
            anchor_texts=[turn.state_key for *_, turn in turns],
        ),
        tags=tags,
        _train_index=torch.tensor(train_index, dtype=torch.long),
        _turn_index=torch.tensor(turn_index, dtype=torch.long),
    )
