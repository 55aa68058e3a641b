"""Sequence packing: variable-length sequences into rows of a fixed token capacity, and back.

`pack_sequences` places each sequence whole in one row (best-fit decreasing by default, first-fit
decreasing on request), returning input ids, position ids that restart at 0 for each sequence,
segment ids (1, 2, ... per sequence in a row, 0 on padding), flash-attention style `cu_seqlens`, and
the placement of every sequence so that per-token outputs can be unpacked (`unpack`, `unpack_padded`).
`packed_attention_mask` builds the block-diagonal causal mask for attention implementations that
take a 4D additive mask (eager / sdpa).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from roll_algos.errors import AlgosError, check_shape

__all__ = [
    "PackedBatch",
    "pack_lengths",
    "pack_sequences",
    "packed_attention_mask",
    "unpack",
    "unpack_padded",
]


class PackedBatch(NamedTuple):
    """N sequences packed into R rows of C tokens.

    Attributes:
        input_ids: [R, C] long, pad_id after the last sequence of a row.
        position_ids: [R, C] long, 0..len-1 within each sequence, 0 on padding.
        segment_ids: [R, C] long, 1, 2, ... for the sequences of a row in order, 0 on padding.
        cu_seqlens: [N + 1] int32 boundaries of the sequences in the flat stream
            `input_ids[segment_ids > 0]` (row-major), as flash-attention's varlen kernels take.
        max_seqlen: the longest sequence.
        seq_row: [N] long, row of each input sequence (input order).
        seq_offset: [N] long, first column of each input sequence in its row.
        seq_length: [N] long, length of each input sequence.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    seq_row: torch.Tensor
    seq_offset: torch.Tensor
    seq_length: torch.Tensor

    @property
    def padding_fraction(self) -> float:
        """Fraction of the R x C slots that hold padding."""
        total = self.input_ids.numel()
        return 1.0 - float(self.seq_length.sum()) / total if total else 0.0


def pack_lengths(lengths: Sequence[int], capacity: int, algorithm: str = "bfd") -> list[list[int]]:
    """Bins of sequence indices whose lengths sum to at most `capacity`.

    Args:
        lengths: N sequence lengths (each 0 < L <= capacity).
        capacity: tokens per row.
        algorithm: `bfd` (best-fit decreasing: the fullest row that still fits) or `ffd` (first-fit
            decreasing: the first row that fits). Both use at most 11/9 OPT + 6/9 rows.
    Returns:
        rows, each a list of indices into lengths, in placement order (longest first).
    """
    if capacity <= 0:
        raise AlgosError(f"pack: capacity must be > 0, got {capacity}.")
    if algorithm not in {"bfd", "ffd"}:
        raise AlgosError(f"pack: algorithm must be 'bfd' or 'ffd', got {algorithm!r}.")
    arr = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if arr.size and (arr.max() > capacity or arr.min() <= 0):
        bad = int(arr.max()) if arr.max() > capacity else int(arr.min())
        raise AlgosError(
            f"pack: every length must be in [1, capacity={capacity}], got {bad}. "
            "Raise the capacity to the longest sequence, or drop/truncate that sequence."
        )
    order = np.argsort(-arr, kind="stable")
    rows: list[list[int]] = []
    if algorithm == "ffd":
        remaining = np.zeros(0, dtype=np.int64)
        for i in order:
            fits = np.flatnonzero(remaining >= arr[i])
            if fits.size:
                r = int(fits[0])
            else:
                r = len(rows)
                rows.append([])
                remaining = np.append(remaining, capacity)
            rows[r].append(int(i))
            remaining[r] -= arr[i]
        return rows
    free: list[tuple[int, int]] = []  # sorted (remaining, row)
    for i in order:
        need = int(arr[i])
        k = bisect.bisect_left(free, (need, -1))
        if k < len(free):
            rem, r = free.pop(k)
        else:
            rem, r = capacity, len(rows)
            rows.append([])
        rows[r].append(int(i))
        bisect.insort(free, (rem - need, r))
    return rows


def pack_sequences(
    sequences: Sequence[Sequence[int] | torch.Tensor],
    capacity: int,
    pad_id: int = 0,
    algorithm: str = "bfd",
) -> PackedBatch:
    """Pack N token sequences into rows of `capacity` tokens (see `pack_lengths` for the algorithms).

    Args:
        sequences: N 1D sequences of token ids (lists or tensors), each 1 <= len <= capacity.
        capacity: C, tokens per row.
        pad_id: id written on padding.
        algorithm: `bfd` or `ffd`.
    Returns:
        `PackedBatch` (rows in creation order; sequences of a row longest first).
    """
    seqs = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    lengths = [int(s.shape[0]) for s in seqs]
    rows = pack_lengths(lengths, capacity, algorithm)
    n, r = len(seqs), len(rows)
    input_ids = torch.full((r, capacity), pad_id, dtype=torch.long)
    position_ids = torch.zeros((r, capacity), dtype=torch.long)
    segment_ids = torch.zeros((r, capacity), dtype=torch.long)
    seq_row = torch.zeros(n, dtype=torch.long)
    seq_offset = torch.zeros(n, dtype=torch.long)
    bounds = [0]
    for row, members in enumerate(rows):
        offset = 0
        for seg, i in enumerate(members, start=1):
            length = lengths[i]
            input_ids[row, offset : offset + length] = seqs[i]
            position_ids[row, offset : offset + length] = torch.arange(length)
            segment_ids[row, offset : offset + length] = seg
            seq_row[i], seq_offset[i] = row, offset
            offset += length
            bounds.append(bounds[-1] + length)
    return PackedBatch(
        input_ids=input_ids,
        position_ids=position_ids,
        segment_ids=segment_ids,
        cu_seqlens=torch.tensor(bounds, dtype=torch.int32),
        max_seqlen=max(lengths, default=0),
        seq_row=seq_row,
        seq_offset=seq_offset,
        seq_length=torch.tensor(lengths, dtype=torch.long),
    )


def unpack(values: torch.Tensor, packed: PackedBatch) -> list[torch.Tensor]:
    """Per-token outputs [R, C, ...] of a packed forward -> N tensors [L_i, ...] in input order."""
    check_shape(
        "values",
        values,
        list(packed.input_ids.shape) + [None] * (values.dim() - 2),
        hint="Pass a per-token output of the packed rows.",
    )
    return [
        values[int(r), int(o) : int(o) + int(n)]
        for r, o, n in zip(packed.seq_row, packed.seq_offset, packed.seq_length, strict=True)
    ]


def unpack_padded(values: torch.Tensor, packed: PackedBatch, pad_value: float = 0.0) -> torch.Tensor:
    """Per-token outputs [R, C, ...] -> [N, L_max, ...] right-padded with pad_value (vectorised gather)."""
    check_shape(
        "values",
        values,
        list(packed.input_ids.shape) + [None] * (values.dim() - 2),
        hint="Pass a per-token output of the packed rows.",
    )
    n, lmax = packed.seq_length.shape[0], packed.max_seqlen
    cols = torch.arange(lmax, device=values.device)
    valid = cols.unsqueeze(0) < packed.seq_length.to(values.device).unsqueeze(1)
    col_idx = (packed.seq_offset.to(values.device).unsqueeze(1) + cols).clamp(max=values.shape[1] - 1)
    row_idx = packed.seq_row.to(values.device).unsqueeze(1).expand(n, lmax)
    out = values[row_idx, col_idx]
    fill = torch.full_like(out, pad_value)
    shape = (n, lmax) + (1,) * (values.dim() - 2)
    return torch.where(valid.reshape(shape), out, fill)


def packed_attention_mask(segment_ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Block-diagonal causal additive mask [R, 1, C, C]: 0 where key <= query in the same sequence,
    the dtype's minimum elsewhere. Padding positions attend only to themselves (no NaN rows).
    """
    check_shape("segment_ids", segment_ids, [None, None], hint="Pass PackedBatch.segment_ids [R, C].")
    c = segment_ids.shape[1]
    same = segment_ids.unsqueeze(2) == segment_ids.unsqueeze(1)
    causal = torch.ones(c, c, dtype=torch.bool, device=segment_ids.device).tril()
    pad = segment_ids == 0
    allowed = same & causal & ~pad.unsqueeze(1)
    allowed = allowed | torch.diag_embed(pad)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segment_ids.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.unsqueeze(1)
