"""The vllm backend's pure helpers (no vllm needed): RPC tensor encoding, whole-layer chunks, checkpoint shapes,
the SamplingParams a GenerationParams becomes."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch
from roll_strategies import GenerationParams, StrategyError
from roll_strategies.infer.vllm_infer import (
    VLLMInferStrategy,
    checkpoint_tensor_shapes,
    engine_kwargs,
    layer_chunks,
)
from roll_strategies.infer.vllm_worker import decode_tensors, encode_tensors
from roll_strategies.sync.weights import tensor_shape, unique_named_tensors
from transformers import AutoModelForCausalLM


def test_encoding_round_trips_dtypes_and_shapes():
    tensors = [
        ("a", torch.randn(3, 4)),
        ("b", torch.randn(5).to(torch.bfloat16)),
        ("c", torch.arange(6, dtype=torch.int64).view(2, 3)),
    ]
    encoded = encode_tensors(tensors)
    assert all(isinstance(raw, bytes) for *_, raw in encoded)
    for (name, original), (name2, decoded) in zip(tensors, decode_tensors(encoded), strict=True):
        assert name == name2 and decoded.dtype == original.dtype and torch.equal(decoded, original)


def test_layer_chunks_never_split_a_layer(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tensors = {n: t.detach() for n, t in unique_named_tensors(model).items()}
    chunks = layer_chunks(tensors, chunk_bytes=1)  # every group alone
    layer_of = {n: ".".join(n.split(".")[:3]) for n in tensors if n.startswith("model.layers.")}
    for chunk in chunks:
        assert len({layer_of.get(n, n) for n, _ in chunk}) == 1
    assert sum(len(c) for c in chunks) == len(tensors)
    assert len(layer_chunks(tensors, chunk_bytes=1 << 30)) == 1
    assert checkpoint_tensor_shapes(tiny_model_dir) == {n: tensor_shape(t) for n, t in tensors.items()}


class _FakeSamplingParams:
    """Stands in for vllm.SamplingParams: records its arguments and applies vLLM's own checks on stops
    (vllm/sampling_params.py `_verify_args`: no empty stop string; stop strings need detokenize=True)."""

    def __init__(self, **kwargs: Any) -> None:
        stop = kwargs.get("stop") or []
        if any(not s for s in stop):
            raise ValueError("stop cannot contain an empty string.")
        if stop and not kwargs.get("detokenize", True):
            raise ValueError("stop strings are only supported when detokenize is True.")
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = _FakeSamplingParams  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)  # `_sampling_params` imports vllm lazily
    strategy = VLLMInferStrategy.__new__(VLLMInferStrategy)  # no engine: only the sampling arguments
    strategy.tokenizer = types.SimpleNamespace(eos_token_id=3)
    strategy.per_request_seed = True
    return strategy


def test_stop_strings_become_vllm_stop_with_the_stop_text_kept(fake_vllm):
    params = GenerationParams(max_new_tokens=9, temperature=0.8, stop_strings=("</answer>", "\n\n"))
    args = fake_vllm._sampling_params(params, seed=5).kwargs
    assert args["stop"] == ["</answer>", "\n\n"] and args["include_stop_str_in_output"] is True
    assert args["detokenize"] is True and args["skip_special_tokens"] is False
    assert args["spaces_between_special_tokens"] is False
    assert args["stop_token_ids"] == [3] and args["ignore_eos"] is True and args["logprobs"] == 0
    assert (args["max_tokens"], args["temperature"], args["seed"]) == (9, 0.8, 5)


def test_without_stop_strings_nothing_is_detokenized(fake_vllm):
    args = fake_vllm._sampling_params(GenerationParams(max_new_tokens=4, greedy=True), seed=1).kwargs
    assert args["detokenize"] is False and "stop" not in args and args["temperature"] == 0.0
    prompt_lp = fake_vllm._sampling_params(GenerationParams(max_new_tokens=1), 0, prompt_logprobs=0).kwargs
    assert prompt_lp["prompt_logprobs"] == 0


def test_empty_stop_string_never_reaches_vllm():
    with pytest.raises(StrategyError, match="non-empty"):
        GenerationParams(max_new_tokens=4, stop_strings=("",))


def _engine_kwargs(share_prefix: bool, **config: Any) -> dict[str, Any]:
    return engine_kwargs(
        "/m", dtype="bfloat16", seed=1, sleep_enabled=False, share_prefix=share_prefix, config=config
    )


def test_share_prefix_turns_on_vllm_prefix_caching():
    assert _engine_kwargs(True)["enable_prefix_caching"] is True
    assert _engine_kwargs(True, enable_prefix_caching=True)["enable_prefix_caching"] is True
    assert "enable_prefix_caching" not in _engine_kwargs(False)  # the engine's default stands
    assert _engine_kwargs(False, enable_prefix_caching=False)["enable_prefix_caching"] is False
    base = _engine_kwargs(False, max_model_len=512)
    assert base["model"] == "/m" and base["max_model_len"] == 512 and base["seed"] == 1
    assert base["logprobs_mode"] == "processed_logprobs" and base["enable_sleep_mode"] is False


def test_share_prefix_with_prefix_caching_off_is_refused():
    with pytest.raises(StrategyError, match="enable_prefix_caching"):
        _engine_kwargs(True, enable_prefix_caching=False)
