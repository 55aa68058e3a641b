"""The exact KL (`full`, `full_forward`) computed where both models are: an ActorTrainWorker holding a frozen
copy of the reference, against the old formula (both models' whole logits, log_softmax over the vocabulary),
with hf_train and deepspeed_train."""

from __future__ import annotations

import pytest
import torch
from roll_strategies import ActorTrainWorker, HFTrainStrategy, OptimizerSettings, ReferenceWorker

LR = 1e-2


LENGTHS = [(7, 3), (12, 5), (4, 2), (16, 4), (9, 6)]  # right-padded rows of prompt + response, mixed lengths


def with_advantages(b: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    return {**b, "adv": torch.randn(b["input_ids"].shape, generator=torch.Generator().manual_seed(seed))}


def nll(log_probs, entropy, mb):
    return -log_probs[mb["response_mask"]].mean(), {}


def whole_vocabulary(model, ref_model, b, *, grad: bool = False):
    """The old computation: (log pi, KL(pi || ref), KL(ref || pi), log ref) [B, T] from both models' whole
    [B, T, V] logits, log_softmax over the vocabulary, shifted by one; zero off the response."""
    m = b["response_mask"]
    with torch.set_grad_enabled(grad):
        logp = torch.log_softmax(
            model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1
        )
    with torch.no_grad():
        logq = torch.log_softmax(
            ref_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1
        )
    logp, logq, targets = logp[:, :-1], logq[:, :-1], b["input_ids"][:, 1:, None]
    pad = torch.zeros((m.shape[0], 1))
    out = [
        logp.gather(-1, targets)[..., 0],
        (logp.exp() * (logp - logq)).sum(-1),
        (logq.exp() * (logq - logp)).sum(-1),
        logq.gather(-1, targets)[..., 0],
    ]
    return [torch.cat([pad, x], 1) * m for x in out]


def test_compute_reference_kl_equals_the_whole_vocabulary_formula(tiny_model_dir, prompt_rows):
    worker = ActorTrainWorker(
        tiny_model_dir, optimizer=OptimizerSettings(learning_rate=LR), reference_model_path=tiny_model_dir
    )
    b = prompt_rows(LENGTHS)
    same = worker.compute_reference_kl(b, 2)  # the reference is the initial weights
    torch.testing.assert_close(same.kl, torch.zeros_like(same.kl), rtol=0, atol=1e-6)
    worker.train_step([b], nll, with_entropy=False)  # move the policy away from the reference
    got = worker.compute_reference_kl(b, 2)
    _, kl, kl_forward, ref_lp = whole_vocabulary(worker.strategy.model, worker.reference_model, b)
    m = b["response_mask"]
    torch.testing.assert_close(got.kl, kl, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got.kl_forward, kl_forward, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got.ref_log_probs, ref_lp, rtol=1e-5, atol=1e-5)
    assert float(got.kl[m].mean()) > 1e-3  # the step moved the policy measurably
    # the reference log-probs are the reference role's own
    want = ReferenceWorker(tiny_model_dir).compute_log_probs(b, 3)
    torch.testing.assert_close(got.ref_log_probs[m], want[m], rtol=1e-5, atol=1e-5)


def kl_loss(kind: str, exact: bool, model=None, ref_model=None):
    """pg-like term + 0.5 * mean exact KL: from the strategy's `full_kl*` (exact) or the whole-vocabulary formula."""

    def loss_fn(log_probs, entropy, mb):
        m = mb["response_mask"]
        if exact:
            kl = mb["full_kl" if kind == "full" else "full_kl_forward"]
        else:
            _, fwd_pi, fwd_ref, _ = whole_vocabulary(model, ref_model, mb, grad=True)
            kl = fwd_pi if kind == "full" else fwd_ref
        loss = -(log_probs * mb["adv"])[m].mean() + 0.5 * kl[m].mean()
        return loss, {"kl": float(kl[m].mean().detach())}

    return loss_fn


def _steps(worker_or_strategy, b, loss_fn, **kwargs) -> list[dict[str, float]]:
    mbs = [dict(b)]
    return [worker_or_strategy.train_step(mbs, loss_fn, with_entropy=True, **kwargs) for _ in range(2)]


@pytest.mark.parametrize("kind", ["full", "full_forward"])
def test_train_step_exact_kl_equals_the_whole_vocabulary_loss(tiny_model_dir, kind, prompt_rows):
    """Two steps whose loss holds the exact KL: the worker's chunked KL (with grad) and a loss computing it from
    whole logits give the same losses, KL values, gradient norms and weights."""
    b = with_advantages(prompt_rows(LENGTHS, 1), seed=2)
    worker = ActorTrainWorker(
        tiny_model_dir, optimizer=OptimizerSettings(learning_rate=LR), reference_model_path=tiny_model_dir
    )
    worker.train_step([b], nll, with_entropy=False)  # start away from the reference (KL and its grad > 0)
    plain = HFTrainStrategy(tiny_model_dir, optimizer=OptimizerSettings(learning_rate=LR))
    plain.train_step([b], nll, with_entropy=False)
    frozen = HFTrainStrategy(tiny_model_dir, trainable=False).model
    got = _steps(worker, b, kl_loss(kind, exact=True), with_full_kl=True)
    want = _steps(plain, b, kl_loss(kind, exact=False, model=plain.model, ref_model=frozen))
    for ours, theirs in zip(got, want, strict=True):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-5, abs=1e-7)
        assert ours["kl"] == pytest.approx(theirs["kl"], rel=1e-4, abs=1e-7)
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)
    assert got[0]["kl"] > 1e-3
    for (name, p), q in zip(worker.strategy.model.named_parameters(), plain.model.parameters(), strict=True):
        # Adam divides by the gradient scale, so float noise on near-zero gradients moves weights ~1e-5
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.deepspeed
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("stage", [0, 3])
def test_deepspeed_train_step_exact_kl_follows_hf_train(tiny_model_dir, stage, prompt_rows):
    """deepspeed_train runs the same chunked exact KL (inside its engine's forward, so ZeRO's backward hooks
    see it): the same losses, KL values and gradient norms as hf_train."""
    b = with_advantages(prompt_rows(LENGTHS, 3), seed=4)
    config = {"zero_optimization": {"stage": stage}}
    results = []
    for name, extra in (("hf_train", {}), ("deepspeed_train", {"strategy_config": config})):
        worker = ActorTrainWorker(
            tiny_model_dir,
            strategy_name=name,
            optimizer=OptimizerSettings(learning_rate=LR),
            reference_model_path=tiny_model_dir,
            **extra,
        )
        worker.train_step([b], nll, with_entropy=False)
        steps = _steps(worker, b, kl_loss("full_forward", exact=True), with_full_kl=True)
        results.append((steps, worker.compute_reference_kl(b, 2)))
    (hf, hf_kl), (ds, ds_kl) = results
    for ours, theirs in zip(ds, hf, strict=True):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-5, abs=1e-7)
        assert ours["kl"] == pytest.approx(theirs["kl"], rel=1e-4, abs=1e-7)
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)
    assert hf[0]["kl"] > 1e-3
    torch.testing.assert_close(ds_kl.kl_forward, hf_kl.kl_forward, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ds_kl.ref_log_probs, hf_kl.ref_log_probs, rtol=1e-5, atol=1e-6)
