"""Padded and packed forwards on the real tiny model: same log-probs, entropy, exact KL and gradients.

The padded path is checked against `token_log_probs` (the independent reference already used for the
old / reference log-probs), the packed path against the padded one, and the exact KL against a direct
sum over the vocabulary of two models' softmaxes. The vocabulary-chunked head (`vocab_stats`) is checked
against the whole [positions, vocabulary] log-softmax: values and gradients, with many chunks.
"""

from __future__ import annotations

import copy

import pytest
import roll_strategies.compute.logprobs as logprobs_module
import torch
from forward_helpers import DropsInput, columns
from roll_algos import entropy_from_logits
from roll_strategies import HFTrainStrategy, OptimizerSettings, lm_outputs, packing_supported, token_log_probs
from roll_strategies.compute.forward import PACK_CAPACITY_KEY, REFERENCE_KEY, reference_kl
from roll_strategies.compute.logprobs import vocab_stats


def rl_rows(seed: int = 0, left_pad: bool = False) -> dict[str, torch.Tensor]:
    """Rows of prompt + response of mixed lengths (right padding, or left padding)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [(7, 3), (12, 5), (4, 2), (20, 4), (9, 1), (15, 6)]
    width = max(p + q for p, q in lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    resp = torch.zeros_like(ids, dtype=torch.bool)
    for r, (p, q) in enumerate(lengths):
        start = width - p - q if left_pad else 0
        ids[r, start : start + p + q] = torch.randint(8, 200, (p + q,), generator=gen)
        mask[r, start : start + p + q] = 1
        resp[r, start + p : start + p + q] = True
    return {"input_ids": ids, "attention_mask": mask, "response_mask": resp}


@pytest.fixture(scope="module")
def model(warm_model_dir):
    return HFTrainStrategy(warm_model_dir, trainable=False).model


@pytest.mark.parametrize("left_pad", [False, True])
def test_padded_path_equals_token_log_probs(model, left_pad):
    b = rl_rows(1, left_pad)
    with torch.no_grad():
        ref, ref_ent = token_log_probs(model, b["input_ids"], b["attention_mask"], with_entropy=True)
        out = lm_outputs(model, *columns(b), with_entropy=True)
    m = b["response_mask"]
    torch.testing.assert_close(out.log_probs[m], ref[m], rtol=0, atol=1e-5)
    torch.testing.assert_close(out.entropy[m], ref_ent[m], rtol=0, atol=1e-5)
    assert bool((out.log_probs[~m] == 0).all())


@pytest.mark.parametrize("capacity", [20, 32, 64])
def test_packed_path_equals_padded(model, capacity):
    b = rl_rows(2)
    with torch.no_grad():
        padded = lm_outputs(model, *columns(b), with_entropy=True)
        packed = lm_outputs(model, *columns(b), with_entropy=True, pack_capacity=capacity)
    torch.testing.assert_close(packed.log_probs, padded.log_probs, rtol=0, atol=1e-5)
    torch.testing.assert_close(packed.entropy, padded.entropy, rtol=0, atol=1e-5)


def test_packed_gradients_equal_padded_gradients(warm_model_dir):
    """The done-when check at the forward level: d(loss)/d(every parameter) equal within float tolerance."""
    b = rl_rows(3)
    weights = torch.randn(b["input_ids"].shape, generator=torch.Generator().manual_seed(0))

    def grads(pack_capacity):
        model = HFTrainStrategy(warm_model_dir, trainable=False).model.requires_grad_(True)
        out = lm_outputs(model, *columns(b), with_entropy=True, pack_capacity=pack_capacity)
        loss = (out.log_probs * weights).sum() - 0.1 * out.entropy.sum()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    padded, packed = grads(None), grads(32)
    assert padded.keys() == packed.keys()
    for name in padded:
        torch.testing.assert_close(packed[name], padded[name], rtol=1e-4, atol=1e-6, msg=name)
    assert max(float(g.abs().max()) for g in padded.values()) > 1e-3  # the gradients are not all zero


def perturbed(model: torch.nn.Module, scale: float = 0.05, seed: int = 0) -> torch.nn.Module:
    """A frozen copy of `model` with every weight moved a little: a reference that differs from it."""
    ref_model = copy.deepcopy(model).requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ref_model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return ref_model


def whole_vocabulary_kl(model, ref_model, b):
    """The old computation, independent of the chunked code: both models' full logits, log_softmax over the
    whole vocabulary, shifted by one, summed over the vocabulary position by position."""
    m = b["response_mask"]
    with torch.no_grad():
        logp = torch.log_softmax(
            model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1
        )
        logq = torch.log_softmax(
            ref_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1
        )
    want = {k: torch.zeros(m.shape) for k in ("kl", "kl_forward", "ref_log_probs")}
    for r, c in m.nonzero().tolist():
        p, q = logp[r, c - 1], logq[r, c - 1]
        want["kl"][r, c] = float((p.exp() * (p - q)).sum())
        want["kl_forward"][r, c] = float((q.exp() * (q - p)).sum())
        want["ref_log_probs"][r, c] = float(q[b["input_ids"][r, c]])
    return want


@pytest.mark.parametrize("capacity", [None, 40])
def test_full_kl_is_the_exact_sum_over_the_vocabulary(model, capacity, monkeypatch):
    monkeypatch.setattr(logprobs_module, "LOGITS_CHUNK_ELEMENTS", 5 * model.config.vocab_size)  # 5 positions
    ref_model = perturbed(model)
    b = rl_rows(4)
    m = b["response_mask"]
    with torch.no_grad():
        out = lm_outputs(model, *columns(b), reference=ref_model, pack_capacity=capacity)
    want = whole_vocabulary_kl(model, ref_model, b)
    torch.testing.assert_close(out.full_kl, want["kl"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.full_kl_forward, want["kl_forward"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.ref_log_probs, want["ref_log_probs"], rtol=1e-5, atol=1e-5)
    assert float(out.full_kl[m].min()) >= 0 and float(out.full_kl[m].mean()) > 1e-4


def test_reference_kl_equals_the_whole_vocabulary_computation(model, monkeypatch):
    """The experience step's worker path (micro-batches of rows, chunks of positions) against the old formula."""
    monkeypatch.setattr(logprobs_module, "LOGITS_CHUNK_ELEMENTS", 3 * model.config.vocab_size)
    ref_model = perturbed(model, seed=1)
    b = rl_rows(6, left_pad=True)
    got = reference_kl(model, ref_model, b, micro_batch_size=4, device="cpu")
    want = whole_vocabulary_kl(model, ref_model, b)
    torch.testing.assert_close(got.kl, want["kl"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.kl_forward, want["kl_forward"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.ref_log_probs, want["ref_log_probs"], rtol=1e-5, atol=1e-5)


def unchunked_stats(features, weight, targets, ref_logits, with_entropy):
    """The whole [N, V] computation the chunks replace (the independent reference)."""
    logits = features @ weight.T
    logp = torch.log_softmax(logits, -1)
    out = [logp.gather(-1, targets[:, None])[:, 0]]
    if with_entropy:
        out.append(entropy_from_logits(logits))
    if ref_logits is not None:
        logq = torch.log_softmax(ref_logits, -1)
        out += [(logp.exp() * (logp - logq)).sum(-1), (logq.exp() * (logq - logp)).sum(-1)]
        out.append(logq.gather(-1, targets[:, None])[:, 0])
    return out


@pytest.mark.parametrize("with_entropy", [False, True])
@pytest.mark.parametrize("with_reference", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_chunked_head_values_and_gradients_equal_the_whole_vocabulary(with_entropy, with_reference, chunk):
    gen = torch.Generator().manual_seed(chunk)
    n, hidden, vocab = 23, 16, 101
    features = torch.randn(n, hidden, generator=gen, requires_grad=True)
    head = torch.nn.Linear(hidden, vocab, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, hidden, generator=gen))
    targets = torch.randint(0, vocab, (n,), generator=gen)
    ref_features = torch.randn(n, hidden, generator=gen)
    ref_head = torch.nn.Linear(hidden, vocab, bias=False).requires_grad_(False)
    reference = (ref_features, ref_head) if with_reference else None
    coef = torch.randn(5, n, generator=gen)

    got = vocab_stats(
        features,
        head,
        vocab,
        targets,
        with_entropy=with_entropy,
        reference=reference,
        chunk_elements=chunk * vocab,
    )
    got_list = [t for t in got._replace(greedy=None) if t is not None]  # greedy: a 0/1 mark, checked below
    loss = sum((c * t).sum() for c, t in zip(coef, got_list, strict=False))
    g_feat, g_w = torch.autograd.grad(loss, [features, head.weight])
    if with_entropy:  # the argmax mark, against the whole vocabulary's logits
        whole = features.detach() @ head.weight.detach().T
        assert torch.equal(got.greedy, (whole.argmax(-1) == targets).to(got.greedy.dtype))

    ref_logits = ref_head(ref_features) if with_reference else None
    want_list = unchunked_stats(features, head.weight, targets, ref_logits, with_entropy)
    want_loss = sum((c * t).sum() for c, t in zip(coef, want_list, strict=False))
    w_feat, w_w = torch.autograd.grad(want_loss, [features, head.weight])

    assert len(got_list) == len(want_list) == 1 + with_entropy + 3 * with_reference
    for a, b in zip(got_list, want_list, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g_feat, w_feat, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g_w, w_w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("capacity", [None, 32])
@pytest.mark.parametrize("with_entropy", [False, True])
def test_model_gradients_equal_the_whole_vocabulary_computation(
    warm_model_dir, capacity, with_entropy, monkeypatch
):
    """Gradients of every parameter through the chunked, recomputed head (padded and packed, with the exact
    KL) equal those of the whole-vocabulary log-softmax of the model's own logits."""
    b = rl_rows(7)
    m = b["response_mask"]
    gen = torch.Generator().manual_seed(3)
    w_lp, w_ent, w_kl, w_fwd = (torch.randn(m.shape, generator=gen) * m for _ in range(4))
    base = HFTrainStrategy(warm_model_dir, trainable=False).model
    ref_model = perturbed(base, seed=2)

    def grads(chunked: bool):
        model = copy.deepcopy(base).requires_grad_(True)
        if chunked:
            monkeypatch.setattr(logprobs_module, "LOGITS_CHUNK_ELEMENTS", 4 * model.config.vocab_size)
            out = lm_outputs(
                model, *columns(b), with_entropy=with_entropy, reference=ref_model, pack_capacity=capacity
            )
            lp, ent, kl, fwd = out.log_probs, out.entropy, out.full_kl, out.full_kl_forward
        else:  # the old computation: whole logits, log_softmax over the vocabulary
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits.float()
            with torch.no_grad():
                q_logits = ref_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
            logp = torch.log_softmax(logits[:, :-1], -1)
            logq = torch.log_softmax(q_logits[:, :-1].float(), -1)
            pad = torch.zeros((m.shape[0], 1))
            lp = torch.cat([pad, logp.gather(-1, b["input_ids"][:, 1:, None])[..., 0]], 1)
            ent = torch.cat([pad, entropy_from_logits(logits[:, :-1])], 1)
            kl = torch.cat([pad, (logp.exp() * (logp - logq)).sum(-1)], 1)
            fwd = torch.cat([pad, (logq.exp() * (logq - logp)).sum(-1)], 1)
        loss = (lp * w_lp).sum() + (kl * w_kl).sum() + (fwd * w_fwd).sum()
        if with_entropy:
            loss = loss + (ent * w_ent).sum()
        loss.backward()
        return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}

    (chunked_loss, chunked), (whole_loss, whole) = grads(True), grads(False)
    assert chunked_loss == pytest.approx(whole_loss, rel=1e-5, abs=1e-5)
    for name in whole:
        torch.testing.assert_close(
            chunked[name], whole[name], rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )
    assert max(float(g.abs().max()) for g in whole.values()) > 1e-3


def test_the_backward_keeps_no_positions_x_vocabulary_tensor(model, monkeypatch):
    """What autograd saves for the backward, outside the recomputed chunks, holds no vocabulary-wide tensor of
    more than a chunk: the chunks' logits are recomputed, not kept (the unchunked forward keeps them all)."""
    monkeypatch.setattr(logprobs_module, "LOGITS_CHUNK_ELEMENTS", 4 * model.config.vocab_size)
    b = rl_rows(8)
    n_needed, vocab = int(b["response_mask"].sum()), model.config.vocab_size
    trained = copy.deepcopy(model).requires_grad_(True)
    params = {p.data_ptr() for p in [*trained.parameters(), *model.parameters()]}

    def largest_vocabulary_wide(fn) -> int:
        """Elements of the largest [..., vocabulary] activation autograd saves (weights are not counted)."""
        sizes = [0]

        def pack(t):
            if t.data_ptr() not in params and t.dim() and t.shape[-1] == vocab:
                sizes.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn()
        return max(sizes)

    chunked = largest_vocabulary_wide(
        lambda: lm_outputs(trained, *columns(b), with_entropy=True, reference=model)
    )
    whole = largest_vocabulary_wide(
        lambda: torch.log_softmax(
            trained(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1
        )
    )
    assert whole >= n_needed * vocab  # the check sees a [positions, vocabulary] tensor where one is kept
    assert chunked == 0, chunked  # the chunks' inputs are hidden states; their logits are recomputed


def test_packing_support_is_probed_not_assumed(model):
    assert packing_supported(model)
    assert not packing_supported(DropsInput(copy.deepcopy(model), "position_ids"))


def test_train_step_packed_equals_padded(warm_model_dir):
    """Same micro-batches, packed or not: the same loss and the same gradient norm in `train_step`."""
    b = rl_rows(5)
    adv = torch.randn(b["input_ids"].shape, generator=torch.Generator().manual_seed(1))

    def loss_fn(log_probs, entropy, mb):
        m = mb["response_mask"]
        loss = -(log_probs * mb["adv"])[m].mean() + 0.01 * mb["full_kl"][m].mean()
        return loss, {"kl": float(mb["full_kl"][m].mean().detach())}

    reference = HFTrainStrategy(warm_model_dir, trainable=False).model
    results = []
    for capacity in (None, 24):
        strategy = HFTrainStrategy(warm_model_dir, optimizer=OptimizerSettings(learning_rate=1e-3))
        mb = {**b, "adv": adv, REFERENCE_KEY: reference}
        if capacity is not None:
            mb[PACK_CAPACITY_KEY] = capacity
        results.append(strategy.train_step([mb], loss_fn, with_entropy=False))
    padded, packed = results
    assert packed["loss"] == pytest.approx(padded["loss"], rel=1e-5, abs=1e-6)
    assert packed["grad_norm"] == pytest.approx(padded["grad_norm"], rel=1e-4)
    assert padded["kl"] == pytest.approx(0.0, abs=1e-6)  # the model against its own initial weights


def test_a_micro_batch_without_response_tokens_still_backpropagates(model):
    """No needed position: zero outputs that still hang off the graph, so the train step's backward runs."""
    trained = copy.deepcopy(model).requires_grad_(True)
    b = rl_rows(9)
    none = torch.zeros_like(b["response_mask"])
    out = lm_outputs(trained, b["input_ids"], b["attention_mask"], none, with_entropy=True, reference=model)
    assert all(bool((t == 0).all()) for t in out if t is not None)
    (out.log_probs.sum() + out.entropy.sum() + out.full_kl.sum()).backward()
    assert all(p.grad is None or float(p.grad.abs().max()) == 0 for p in trained.parameters())
