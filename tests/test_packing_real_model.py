"""roll_algos packing with a real transformers causal LM: packed and unpacked per-token log-probs agree.

The model is a tiny Qwen2 built from a fixed seed (no download). Two packed paths are checked, for the
eager and sdpa attention implementations:
- a 4D block-diagonal causal mask from `packed_attention_mask` plus position ids restarting per sequence;
- position ids only (transformers derives the per-sequence mask from where positions restart; it does
  so only without a KV cache, hence use_cache=False).
"""

from __future__ import annotations

import pytest
import torch
from roll_algos import log_probs_from_logits, pack_sequences, packed_attention_mask, unpack

transformers = pytest.importorskip("transformers")

LENGTHS = [5, 9, 3, 12, 7, 4, 16, 2, 6]
CAPACITY = 16


def tiny_model(attn: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    config._attn_implementation = attn
    return transformers.Qwen2ForCausalLM(config).eval()


def next_token_log_probs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """[R, C] log p(x_{t+1} | x_<=t) at position t (last column 0)."""
    lp = log_probs_from_logits(logits[:, :-1], input_ids[:, 1:])
    return torch.nn.functional.pad(lp, (0, 1))


@pytest.fixture(scope="module")
def sequences() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 64, (n,), generator=g) for n in LENGTHS]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("path", ["4d_mask", "position_ids"])
def test_packed_log_probs_equal_unpacked(sequences, attn, path):
    model = tiny_model(attn)
    with torch.no_grad():
        reference = [
            next_token_log_probs(model(input_ids=s.unsqueeze(0)).logits, s.unsqueeze(0))[0, : len(s) - 1]
            for s in sequences
        ]
        packed = pack_sequences(sequences, CAPACITY)
        assert packed.input_ids.shape[0] < len(sequences)  # really packed
        # use_cache=False matters for the position-ids path: transformers only derives the packed mask
        # when no KV cache is in play (eval forwards create one by default)
        kwargs = {"position_ids": packed.position_ids, "use_cache": False}
        if path == "4d_mask":
            kwargs["attention_mask"] = packed_attention_mask(packed.segment_ids, dtype=torch.float32)
        logits = model(input_ids=packed.input_ids, **kwargs).logits
        lp = next_token_log_probs(logits, packed.input_ids)
    for seq, ref, got in zip(sequences, reference, unpack(lp, packed), strict=True):
        # the last position of each sequence predicts the next sequence's first token: dropped
        torch.testing.assert_close(got[: len(seq) - 1], ref, rtol=0, atol=1e-5)


def test_packing_changes_nothing_only_with_the_right_mask(sequences):
    """Control: without restarting positions or a block mask, packed log-probs differ (the test has teeth)."""
    model = tiny_model("eager")
    with torch.no_grad():
        packed = pack_sequences(sequences, CAPACITY)
        s = sequences[int(torch.nonzero(packed.seq_offset > 0)[0])]
        i = next(i for i, t in enumerate(sequences) if t is s)
        ref = next_token_log_probs(model(input_ids=s.unsqueeze(0)).logits, s.unsqueeze(0))[0, : len(s) - 1]
        wrong = next_token_log_probs(model(input_ids=packed.input_ids).logits, packed.input_ids)
    assert (unpack(wrong, packed)[i][: len(s) - 1] - ref).abs().max() > 1e-3
