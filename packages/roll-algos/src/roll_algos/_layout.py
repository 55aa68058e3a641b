"""Internal: order rows and response tokens along their trajectory, and dense backward scans.

The pipeline trains on rows (one row per agent turn). Token-level estimators need each trajectory's
response tokens as one sequence in turn order (turn k's tokens, then turn k+1's), skipping prompt
tokens. `token_layout` builds that order once; `to_dense` / `from_dense` move [B, T] tensors to a
left-aligned [N, L] matrix (N trajectories, L = longest trajectory) and back, so every backward scan
is a loop over L vectorised across trajectories.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Layout(NamedTuple):
    """Positions of M items (tokens or rows) in a dense [N, L] trajectory matrix."""

    items: torch.Tensor  # [M] index of the item in its source (flat token index or row index), ordered
    traj: torch.Tensor  # [M] dense trajectory index 0..N-1 of each ordered item
    pos: torch.Tensor  # [M] position inside its trajectory's sequence
    lengths: torch.Tensor  # [N] items per trajectory
    num_traj: int
    max_len: int


def _from_order(items: torch.Tensor, tidx: torch.Tensor, num: int) -> Layout:
    """Layout of items already ordered by (trajectory, ...); tidx [M] their dense trajectory index."""
    lengths = torch.bincount(tidx, minlength=num)
    starts = torch.cumsum(lengths, 0) - lengths
    pos = torch.arange(tidx.shape[0], device=tidx.device) - starts[tidx]
    max_len = int(lengths.max()) if num else 0
    return Layout(items, tidx, pos, lengths, num, max_len)


def row_layout(trajectory_ids: torch.Tensor, step_ids: torch.Tensor) -> Layout:
    """Rows ordered by (trajectory, step, row index); items are row indices [B]."""
    b = trajectory_ids.shape[0]
    device = trajectory_ids.device
    uniq, tidx = torch.unique(trajectory_ids, return_inverse=True)
    num = int(uniq.shape[0])
    rows = torch.arange(b, device=device)
    if b == 0:
        return _from_order(rows, tidx, num)
    step = step_ids.long() - step_ids.min()
    span = int(step.max()) + 1
    if num * span * b < 2**62:  # one sort on a composite key
        order = torch.sort(tidx * (span * b) + step * b + rows).indices
    else:  # successive stable sorts (no overflow)
        order = torch.sort(step, stable=True).indices
        order = order[torch.sort(tidx[order], stable=True).indices]
    return _from_order(order, tidx[order], num)


def token_layout(response_mask: torch.Tensor, trajectory_ids: torch.Tensor, step_ids: torch.Tensor) -> Layout:
    """Response tokens ordered by (trajectory, step, row, column); items are flat indices into [B, T].

    No sort over tokens: each row's tokens land at (start of the row in row order) + (rank in the row).
    """
    b, t = response_mask.shape
    rl = row_layout(trajectory_ids, step_ids)
    counts = response_mask.sum(1)
    ordered_counts = counts[rl.items]
    row_start = torch.empty_like(counts)
    row_start[rl.items] = torch.cumsum(ordered_counts, 0) - ordered_counts
    flat = response_mask.reshape(-1).nonzero().squeeze(1)
    rows = flat // max(t, 1)
    rank_in_row = (torch.cumsum(response_mask.long(), 1) - 1).reshape(-1)[flat]
    dest = row_start[rows] + rank_in_row
    items = torch.empty_like(flat)
    items[dest] = flat
    row_tidx = torch.empty(b, dtype=torch.long, device=response_mask.device)
    row_tidx[rl.items] = rl.traj
    return _from_order(items, row_tidx[items // max(t, 1)], rl.num_traj)


def to_dense(values: torch.Tensor, layout: Layout) -> torch.Tensor:
    """[B, T] (token layout) or [B] (row layout) -> [N, L], zero-padded at the end of each trajectory."""
    dense = torch.zeros(layout.num_traj, layout.max_len, dtype=values.dtype, device=values.device)
    dense[layout.traj, layout.pos] = values.reshape(-1)[layout.items]
    return dense


def from_dense(dense: torch.Tensor, layout: Layout, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    """Inverse of `to_dense`: scatter [N, L] back to `shape`, zero where no item maps."""
    out = torch.zeros(shape, dtype=dense.dtype, device=dense.device)
    out.view(-1)[layout.items] = dense[layout.traj, layout.pos]
    return out


def valid_dense(layout: Layout, device: torch.device | None = None) -> torch.Tensor:
    """[N, L] bool: True at real items."""
    pos = torch.arange(layout.max_len, device=device)
    return pos.unsqueeze(0) < layout.lengths.to(device).unsqueeze(1)


BLOCK = 64


def discounted_reverse_cumsum(x: torch.Tensor, discount: float, block: int = BLOCK) -> torch.Tensor:
    """y_t = sum_{k >= t} discount^(k - t) x_k along dim 1 of [N, L] (zero padding contributes nothing).

    Blocked: within a block of `block` columns y = x @ M with M[j, t] = discount^(j - t) (j >= t); blocks
    are chained backwards by y_t += discount^(end + 1 - t) * y_{end + 1}. Only powers up to `block`
    appear, so it stays stable for any length, and the Python loop runs L / block times, not L.
    """
    n, length = x.shape
    out = torch.zeros_like(x)
    if length == 0:
        return out
    k = min(block, length)
    idx = torch.arange(k, device=x.device)
    expo = (idx.unsqueeze(1) - idx.unsqueeze(0)).to(x.dtype)  # j - t
    base = torch.tensor(discount, dtype=x.dtype, device=x.device)
    matrix = torch.where(
        expo >= 0, base.pow(expo.clamp(min=0)), torch.zeros((), dtype=x.dtype, device=x.device)
    )
    carry_pow = base.pow((k - idx).to(x.dtype))  # discount^(end + 1 - t) within a full block
    carry = torch.zeros(n, dtype=x.dtype, device=x.device)
    for start in range(((length - 1) // k) * k, -1, -k):
        end = min(start + k, length)
        width = end - start
        y = x[:, start:end] @ matrix[:width, :width]
        y = y + carry.unsqueeze(1) * carry_pow[k - width :]
        out[:, start:end] = y
        carry = y[:, 0]
    return out


def discounted_returns(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t+1} along dim 1 of a left-aligned, zero-padded [N, L] matrix."""
    return discounted_reverse_cumsum(rewards, gamma)


def gae_dense(
    rewards: torch.Tensor, values: torch.Tensor, valid: torch.Tensor, gamma: float, lambd: float
) -> torch.Tensor:
    """GAE advantages on [N, L]: delta_t = r_t + gamma V_{t+1} - V_t, A_t = delta_t + gamma lambd A_{t+1}.

    V after the last valid item is 0 (the episode ended); padding gives A = 0.
    """
    v = values * valid
    next_v = torch.nn.functional.pad(v[:, 1:], (0, 1))
    delta = (rewards + gamma * next_v - v) * valid
    return discounted_reverse_cumsum(delta, gamma * lambd) * valid
