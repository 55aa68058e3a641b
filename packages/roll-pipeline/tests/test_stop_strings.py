"""Stop strings reach the inference strategy as text, whatever their length, and end each response served by
the policy server at the sampled token that completes one (reference: decode every prefix of the ids the
same server samples without stop strings)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.runtime.policy_server import PolicyServer
from roll_rollout import GenerateRequest, SamplingSettings


@pytest.fixture(scope="module")
def model():
    return resolve_pretrain("builtin:tiny-frozen-lake")


def _requests(tokenizer, n: int) -> list[GenerateRequest]:
    rng = random.Random(3)
    out = []
    for key in range(n):
        grid = "\n".join("".join(rng.choice("_PGO") for _ in range(4)) for _ in range(4))
        messages = [{"role": "user", "content": f"{grid}\nDecide your next action."}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        out.append(GenerateRequest(ids, SamplingSettings(max_new_tokens=12, temperature=1.5), sample_key=key))
    return out


def _text(tokenizer, ids) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def test_a_multi_token_stop_string_ends_each_response_at_its_first_match(model):
    free_server = PolicyServer(model, seed=0, num_threads=1)
    tokenizer = free_server.worker.strategy.tokenizer
    requests = _requests(tokenizer, 8)
    free = free_server._generate_batch(requests)
    stop = _text(tokenizer, free[0].output_ids[:2])  # e.g. "<answer>Left": two tokens
    assert len(tokenizer.encode(stop, add_special_tokens=False)) == 2
    stopped = PolicyServer(model, seed=0, num_threads=1, stop_strings=[stop])._generate_batch(requests)
    eos = tokenizer.eos_token_id
    cut_short = 0
    for full, out in zip(free, stopped, strict=True):
        ids = full.output_ids
        end = next(
            (k for k in range(1, len(ids) + 1) if ids[k - 1] == eos or stop in _text(tokenizer, ids[:k])),
            None,
        )
        assert out.output_ids == ids[: end or len(ids)]
        assert out.finish_reason == ("stop" if end else "length")
        np.testing.assert_allclose(out.log_probs, full.log_probs[: len(out.output_ids)], atol=1e-5)
        cut_short += len(out.output_ids) < len(ids)
    assert cut_short >= 1 and stopped[0].output_ids == free[0].output_ids[:2]


def test_an_empty_stop_string_is_refused_before_the_model_loads():
    with pytest.raises(ValueError, match="non-empty strings"):
        PolicyServer("/no/such/model", stop_strings=["</answer>", ""])
