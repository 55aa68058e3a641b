from __future__ import annotations

import pytest
import torch
from roll_strategies import StrategyError, token_log_probs
from transformers import AutoModelForCausalLM


def _slow_reference(model, ids: list[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) with a fresh forward pass per prefix (no padding, no cache)."""
    out = [0.0]
    with torch.no_grad():
        for t in range(1, len(ids)):
            logits = model(input_ids=torch.tensor([ids[:t]])).logits[0, -1]
            out.append(torch.log_softmax(logits.float(), -1)[ids[t]].item())
    return out


def test_token_log_probs_match_slow_reference_with_left_and_right_padding(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randint(8, 200, (n,), generator=gen).tolist() for n in (9, 5, 7)]
    width = 10
    ids = torch.zeros((3, width), dtype=torch.long)
    mask = torch.zeros((3, width), dtype=torch.long)
    ids[0, :9], mask[0, :9] = torch.tensor(rows[0]), 1  # right padded
    ids[1, -5:], mask[1, -5:] = torch.tensor(rows[1]), 1  # left padded
    ids[2, 2:9], mask[2, 2:9] = torch.tensor(rows[2]), 1  # both sides
    with torch.no_grad():
        lp, ent = token_log_probs(model, ids, mask, with_entropy=True)
    assert lp.shape == ent.shape == (3, width)
    for row, (start, seq) in enumerate(zip((0, 5, 2), rows, strict=True)):
        ref = torch.tensor(_slow_reference(model, seq))
        torch.testing.assert_close(lp[row, start : start + len(seq)], ref, atol=1e-5, rtol=0)
        assert lp[row, start] == 0 and ent[row, start] == 0
    assert torch.all(lp[mask == 0] == 0) and torch.all(ent[mask == 0] == 0)
    assert torch.all(ent[:, 1:][mask[:, 1:].bool() & mask[:, :-1].bool()] > 0)


def test_gradients_flow_and_shapes_are_checked(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.randint(8, 200, (2, 6))
    lp, ent = token_log_probs(model, ids, torch.ones_like(ids), with_entropy=False)
    assert ent is None
    lp.sum().backward()
    assert model.model.embed_tokens.weight.grad is not None
    with pytest.raises(StrategyError, match="same shape"):
        token_log_probs(model, ids, torch.ones((2, 5)), with_entropy=False)


def test_needed_positions_skip_the_prompt_and_match_the_slow_reference(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    gen = torch.Generator().manual_seed(1)
    rows = [torch.randint(8, 200, (n,), generator=gen).tolist() for n in (9, 7)]
    ids = torch.zeros((2, 9), dtype=torch.long)
    mask = torch.zeros((2, 9), dtype=torch.long)
    needed = torch.zeros((2, 9), dtype=torch.bool)
    for row, seq in enumerate(rows):  # right padded; the "response" is each row's last 3 tokens
        ids[row, : len(seq)], mask[row, : len(seq)] = torch.tensor(seq), 1
        needed[row, len(seq) - 3 : len(seq)] = True
    with torch.no_grad():
        lp, ent = token_log_probs(model, ids, mask, with_entropy=True, needed=needed)
    for row, seq in enumerate(rows):
        ref = torch.tensor(_slow_reference(model, seq))
        torch.testing.assert_close(lp[row][needed[row]], ref[-3:], atol=1e-5, rtol=0)
        assert torch.all(ent[row][needed[row]] > 0)
    assert torch.all(lp[:, :4] == 0)  # before the first needed column (4): never computed
    with pytest.raises(StrategyError, match="needed"):
        token_log_probs(model, ids, mask, with_entropy=False, needed=needed[:, :5])


def test_vocab_stats_marks_the_targets_that_are_the_argmax_in_every_chunking():
    from roll_strategies.compute.logprobs import vocab_stats

    # 4 positions over 3 tokens: the argmaxes are 0, 2, 1, 1 (by hand)
    logits = torch.tensor([[3.0, 1.0, 0.0], [0.0, 1.0, 2.0], [0.5, 4.0, -1.0], [0.0, 0.1, 0.0]])
    targets = torch.tensor([0, 1, 1, 2])
    for chunk in (3, 6, 1 << 20):  # one position a chunk, two, all
        stats = vocab_stats(logits, lambda x: x, 3, targets, with_entropy=True, chunk_elements=chunk)
        assert stats.greedy.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert vocab_stats(logits, lambda x: x, 3, targets, with_entropy=False).greedy is None


def test_lm_outputs_greedy_matches_the_models_own_argmax(tiny_model_dir):
    from roll_strategies import lm_outputs

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = torch.randint(8, 200, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        argmax = model(input_ids=ids).logits.argmax(-1)  # the prediction of the token after each position
        ids[0, 3] = argmax[0, 2]  # one target that is surely the argmax
        argmax = model(input_ids=ids).logits.argmax(-1)
        needed = torch.zeros_like(ids, dtype=torch.bool)
        needed[:, 2:] = True
        out = lm_outputs(model, ids, torch.ones_like(ids), needed, with_entropy=True)
    expected = torch.zeros(ids.shape)
    expected[:, 2:] = (ids[:, 2:] == argmax[:, 1:-1]).float()
    assert out.greedy[0, 3] == 1.0
    torch.testing.assert_close(out.greedy, expected)
