"""A reference that takes the actor's weights (`kl_reference: rl_start`): the exact KL's frozen copy inside the
train worker (`reference_from_policy`) and the reference worker (`load_weights` of the actor's export) score rows
as a plain Hugging Face forward of the actor's weights saved at that moment, stay there while the actor trains
on, and come back bitwise from their safetensors file."""

from __future__ import annotations

import pytest
import torch
from roll_strategies import ActorTrainWorker, OptimizerSettings, ReferenceWorker
from transformers import AutoModelForCausalLM

LENGTHS = [(7, 3), (12, 5), (4, 2), (9, 6)]  # right-padded rows of prompt + response


def nll(log_probs, entropy, mb):
    return -log_probs[mb["response_mask"]].mean(), {}


def hf_log_probs(model_dir, b: dict[str, torch.Tensor]) -> torch.Tensor:
    """log p(token t | tokens < t) [B, T] by a model loaded from `model_dir` with Hugging Face's own loader, from
    its whole logits; 0 off the response."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    picked = torch.log_softmax(logits[:, :-1], -1).gather(-1, b["input_ids"][:, 1:, None])[..., 0]
    return torch.cat([torch.zeros((picked.shape[0], 1)), picked], 1) * b["response_mask"]


def _trained_worker(model_dir, b) -> ActorTrainWorker:
    """A train worker holding a frozen copy of `model_dir`, one step away from it (the cloned policy)."""
    worker = ActorTrainWorker(
        model_dir, optimizer=OptimizerSettings(learning_rate=1e-2), reference_model_path=model_dir
    )
    worker.train_step([b], nll, with_entropy=False)
    return worker


def test_the_held_reference_takes_the_actors_weights_and_keeps_them(tiny_model_dir, prompt_rows, tmp_path):
    b, m = prompt_rows(LENGTHS), prompt_rows(LENGTHS)["response_mask"]
    worker = _trained_worker(tiny_model_dir, b)
    before = worker.compute_reference_kl(b, 2).ref_log_probs  # the pretrained reference
    worker.reference_from_policy()
    worker.save_checkpoint(tmp_path / "actor")  # the actor's weights at that moment, as a model folder
    want = hf_log_probs(tmp_path / "actor", b)
    taken = worker.compute_reference_kl(b, 2)
    torch.testing.assert_close(taken.ref_log_probs[m], want[m], rtol=1e-5, atol=1e-5)
    assert float((taken.ref_log_probs - before)[m].abs().max()) > 1e-3  # not the pretrained reference
    torch.testing.assert_close(taken.kl_forward, torch.zeros_like(taken.kl_forward), rtol=0, atol=1e-6)

    worker.train_step([b], nll, with_entropy=False)  # the actor moves on, the reference stays
    later = worker.compute_reference_kl(b, 2)
    assert torch.equal(later.ref_log_probs, taken.ref_log_probs)
    assert float(later.kl_forward[m].mean()) > 1e-4

    worker.save_reference(tmp_path / "reference.safetensors")
    resumed = ActorTrainWorker(tiny_model_dir, reference_model_path=tiny_model_dir)
    resumed.load_reference(tmp_path / "reference.safetensors")
    assert torch.equal(resumed.compute_reference_kl(b, 2).ref_log_probs, taken.ref_log_probs)


@pytest.mark.parametrize("strategy", ["hf_train", "hf_infer"])
def test_the_reference_worker_takes_the_actors_export(tiny_model_dir, prompt_rows, tmp_path, strategy):
    b, m = prompt_rows(LENGTHS, 1), prompt_rows(LENGTHS, 1)["response_mask"]
    actor = _trained_worker(tiny_model_dir, b)
    reference = ReferenceWorker(tiny_model_dir, strategy_name=strategy)
    before = reference.compute_log_probs(b, 3)
    reference.load_weights(actor.export_weights())
    actor.save_checkpoint(tmp_path / "actor")
    want = hf_log_probs(tmp_path / "actor", b)
    taken = reference.compute_log_probs(b, 3)
    torch.testing.assert_close(taken[m], want[m], rtol=1e-5, atol=1e-5)
    assert float((taken - before)[m].abs().max()) > 1e-3

    actor.train_step([b], nll, with_entropy=False)
    assert torch.equal(reference.compute_log_probs(b, 3), taken)

    reference.save_reference(tmp_path / "reference.safetensors")
    resumed = ReferenceWorker(tiny_model_dir, strategy_name=strategy)
    resumed.load_reference(tmp_path / "reference.safetensors")
    assert torch.equal(resumed.compute_log_probs(b, 3), taken)
