"""Sequence packing: invariants on random inputs, row count vs a brute-force optimum, masks, unpacking."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_algos import AlgosError, pack_sequences, packed_attention_mask, unpack, unpack_padded
from roll_algos.packing import pack_lengths

SETTINGS = settings(max_examples=50, deadline=None)


def sequences_for(lengths: list[int]) -> list[list[int]]:
    return [[100 * i + j + 1 for j in range(n)] for i, n in enumerate(lengths)]


def optimal_rows(lengths: list[int], capacity: int) -> int:
    """Brute force: smallest number of bins, trying every assignment (tiny inputs only)."""
    for bins in range(1, len(lengths) + 1):
        for assign in itertools.product(range(bins), repeat=len(lengths)):
            loads = [0] * bins
            for n, b in zip(lengths, assign, strict=True):
                loads[b] += n
            if max(loads) <= capacity:
                return bins
    return len(lengths)


@SETTINGS
@given(
    lengths=st.lists(st.integers(1, 16), min_size=1, max_size=25),
    capacity=st.integers(16, 40),
    algorithm=st.sampled_from(["bfd", "ffd"]),
)
def test_pack_invariants(lengths, capacity, algorithm):
    seqs = sequences_for(lengths)
    packed = pack_sequences(seqs, capacity, pad_id=-7, algorithm=algorithm)
    r, c = packed.input_ids.shape
    assert c == capacity and r >= math.ceil(sum(lengths) / capacity)
    # every sequence recovered exactly, with positions 0..n-1 and one segment id
    for i, piece in enumerate(unpack(packed.input_ids, packed)):
        assert piece.tolist() == seqs[i]
    for i, piece in enumerate(unpack(packed.position_ids, packed)):
        assert piece.tolist() == list(range(lengths[i]))
    for piece in unpack(packed.segment_ids, packed):
        assert len(set(piece.tolist())) == 1 and piece[0] > 0
    # slots not covered by a sequence are padding: pad id, segment 0, position 0
    covered = torch.zeros(r, c, dtype=torch.bool)
    for row, off, n in zip(packed.seq_row, packed.seq_offset, packed.seq_length, strict=True):
        assert not covered[row, off : off + n].any()
        covered[row, off : off + n] = True
    assert (packed.segment_ids > 0).equal(covered)
    assert (packed.input_ids[~covered] == -7).all() and (packed.position_ids[~covered] == 0).all()
    # cu_seqlens delimit the sequences in the flat, unpadded stream
    flat = packed.input_ids[packed.segment_ids > 0]
    cu = packed.cu_seqlens.tolist()
    assert cu[0] == 0 and cu[-1] == flat.numel() == sum(lengths)
    pieces = sorted(tuple(flat[a:b].tolist()) for a, b in itertools.pairwise(cu))
    assert pieces == sorted(tuple(s) for s in seqs)
    assert packed.max_seqlen == max(lengths)
    assert packed.padding_fraction == pytest.approx(1 - sum(lengths) / (r * c))


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 10), min_size=1, max_size=7), algorithm=st.sampled_from(["bfd", "ffd"])
)
def test_pack_row_count_within_the_ffd_bound(lengths, algorithm):
    opt = optimal_rows(lengths, 10)
    rows = pack_lengths(lengths, 10, algorithm)
    assert opt <= len(rows) <= 11 * opt / 9 + 6 / 9


def test_pack_hand_computed():
    # capacity 10, lengths 6 5 4 3 2: FFD -> [6, 4], [5, 3, 2]; BFD the same here
    for algorithm in ("ffd", "bfd"):
        assert pack_lengths([6, 5, 4, 3, 2], 10, algorithm) == [[0, 2], [1, 3, 4]]
    # rows [7] (3 free) and [5, 4] (1 free), then a 1: FFD takes the first row that fits, BFD the fullest
    assert pack_lengths([7, 5, 4, 1], 10, "ffd") == [[0, 3], [1, 2]]
    assert pack_lengths([7, 5, 4, 1], 10, "bfd") == [[0], [1, 2, 3]]


def test_pack_errors():
    with pytest.raises(AlgosError, match="capacity"):
        pack_sequences([[1] * 5], 4)
    with pytest.raises(AlgosError, match="algorithm"):
        pack_sequences([[1]], 4, algorithm="nf")


def test_unpack_padded_matches_unpack():
    packed = pack_sequences(sequences_for([3, 5, 2, 4]), 8)
    values = torch.randn(*packed.input_ids.shape, 3)
    dense = unpack_padded(values, packed, pad_value=-1.0)
    assert dense.shape == (4, 5, 3)
    for i, piece in enumerate(unpack(values, packed)):
        assert torch.equal(dense[i, : len(piece)], piece)
        assert (dense[i, len(piece) :] == -1.0).all()


def test_packed_attention_mask_matches_loops():
    packed = pack_sequences(sequences_for([3, 2, 4, 1]), 6)
    seg = packed.segment_ids
    mask = packed_attention_mask(seg)
    r, c = seg.shape
    assert mask.shape == (r, 1, c, c)
    low = torch.finfo(torch.float32).min
    for b in range(r):
        for q in range(c):
            for k in range(c):
                # padding queries see only themselves; others: same segment, causal
                allowed = q == k if seg[b, q] == 0 else (seg[b, q] == seg[b, k] and k <= q)
                assert mask[b, 0, q, k] == (0.0 if allowed else low)
