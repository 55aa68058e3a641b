"""The vllm backend's pure helpers (no vllm needed): RPC tensor encoding, whole-layer chunks, checkpoint shapes."""

from __future__ import annotations

import torch
from roll_strategies.vllm_infer import checkpoint_tensor_shapes, layer_chunks
from roll_strategies.vllm_worker import decode_tensors, encode_tensors
from roll_strategies.weights import tensor_shape, unique_named_tensors
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
