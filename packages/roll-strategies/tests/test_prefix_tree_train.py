"""`share_prefix` through the strategies and workers, against the same strategies without it (float32, CPU):
train_step over two micro-batches of one group (every parameter's gradient, the loss, the weights after the
step), the old-log-prob recompute, the exact KL and reference log-probs of the workers, the critic's values
and gradients, two data-parallel gloo ranks, and DeepSpeed ZeRO-2.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import prefix_ranks as rows
import pytest
import roll_strategies.compute.layout as layout_module
import torch
from gloo_ranks import run_ranks
from roll_strategies import HFCriticStrategy, HFTrainStrategy, OptimizerSettings
from roll_strategies.compute.forward import REFERENCE_KEY, SHARE_PREFIX_KEY
from roll_strategies.workers.roles import ActorTrainWorker, ReferenceWorker
from transformers import AutoConfig, AutoTokenizer, LlamaConfig, LlamaForCausalLM

TOL = 1e-5
STEP_TOL = (
    1e-6  # weights after one step (`rows.OPTIMIZER_ARGS`: AdamW with eps 1, so the step is smooth in g)
)
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


@pytest.fixture(scope="module")
def llama_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A Llama-shaped model folder with the tiny model's tokenizer (random weights)."""
    qwen = AutoConfig.from_pretrained(tiny_model_dir)
    out = tmp_path_factory.mktemp("llama") / "model"
    torch.manual_seed(3)
    config = LlamaConfig(
        vocab_size=qwen.vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        initializer_range=0.1,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


@pytest.fixture(params=["qwen2", "llama"])
def model_dir(request, tiny_model_dir, llama_dir) -> Path:
    return tiny_model_dir if request.param == "qwen2" else llama_dir


def _group_micro_batches(left: bool = False) -> list[dict[str, torch.Tensor]]:
    """One group of 8 samples in two micro-batches of 4 rows (a group larger than a micro-batch)."""
    b = rows.one_turn_group(11, left)
    b["adv"] = torch.randn(b["input_ids"].shape, generator=torch.Generator().manual_seed(2))
    total = float(b["response_mask"].sum())
    out = []
    for idx in (slice(0, 4), slice(4, 8)):
        mb = {k: v[idx] for k, v in b.items()}
        mb["loss_scale"] = torch.tensor(float(mb["response_mask"].sum()) / total)
        out.append(mb)
    return out


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _weights(strategy) -> dict[str, torch.Tensor]:
    return {n: torch.from_numpy(a) for n, a in strategy.export_weights().items()}


def _step(strategy, micro_batches, **kwargs):
    grads = rows.capture_grads(strategy)
    metrics = strategy.train_step(micro_batches, rows.weighted_nll, with_entropy=True, **kwargs)
    return metrics, grads, _weights(strategy)


def _assert_steps_equal(dense, shared):
    assert shared[0]["loss"] == pytest.approx(dense[0]["loss"], abs=TOL)
    assert shared[0]["grad_norm"] == pytest.approx(dense[0]["grad_norm"], rel=1e-5)
    diff = _max_diff(dense[1], shared[1])
    assert diff <= TOL, diff
    assert _max_diff(dense[2], shared[2]) <= STEP_TOL


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
@pytest.mark.parametrize("with_reference", [False, True])
def test_train_step_gradients_equal_dense(model_dir, with_reference, left):
    reference = HFTrainStrategy(model_dir, trainable=False, seed=5).model if with_reference else None
    results = []
    for share in (False, True):
        strategy = HFTrainStrategy(
            model_dir, optimizer=OptimizerSettings(**rows.OPTIMIZER_ARGS), share_prefix=share
        )
        mbs = _group_micro_batches(left)
        if reference is not None:
            mbs = [{**mb, REFERENCE_KEY: reference} for mb in mbs]
        results.append(_step(strategy, mbs))
    _assert_steps_equal(*results)


def test_the_micro_batch_key_overrides_the_strategy(tiny_model_dir, monkeypatch):
    calls = []
    original = layout_module.tree_forward
    monkeypatch.setattr(layout_module, "tree_forward", lambda *a: calls.append(1) or original(*a))
    shared = HFTrainStrategy(tiny_model_dir, share_prefix=True)
    calls.clear()  # the construction's probe ran one
    shared.train_step(_group_micro_batches(), rows.weighted_nll, with_entropy=False)
    assert len(calls) == 2
    mbs = [{**mb, SHARE_PREFIX_KEY: torch.tensor(False)} for mb in _group_micro_batches()]
    shared.train_step(mbs, rows.weighted_nll, with_entropy=False)
    assert len(calls) == 2
    dense = HFTrainStrategy(tiny_model_dir)
    mbs = [{**mb, SHARE_PREFIX_KEY: True} for mb in _group_micro_batches()]
    dense.train_step(mbs, rows.weighted_nll, with_entropy=False)
    assert len(calls) == 4


@pytest.mark.parametrize("case", sorted(rows.CASES))
def test_old_log_probs_equal_dense(model_dir, case):
    b = rows.CASES[case](4)
    dense = HFTrainStrategy(model_dir).compute_log_probs(b, 3)
    shared = HFTrainStrategy(model_dir, share_prefix=True).compute_log_probs(b, 3)
    torch.testing.assert_close(shared, dense, rtol=0, atol=TOL)


def test_workers_exact_kl_and_reference_log_probs_equal_dense(tiny_model_dir, llama_dir):
    b = rows.step_wise(6)
    b["adv"] = torch.randn(b["input_ids"].shape, generator=torch.Generator().manual_seed(3))
    got = []
    for share in (False, True):
        worker = ActorTrainWorker(llama_dir, reference_model_path=llama_dir, share_prefix=share)
        kl = worker.compute_reference_kl(b, 4)
        reference = ReferenceWorker(tiny_model_dir, share_prefix=share).compute_log_probs(b, 4)
        grads = rows.capture_grads(worker.strategy)
        metrics = worker.train_step([b], rows.weighted_nll, with_entropy=True, with_full_kl=True)
        got.append((kl, reference, metrics, grads))
    (kl_d, ref_d, m_d, g_d), (kl_s, ref_s, m_s, g_s) = got
    for a, s in zip(kl_d, kl_s, strict=True):
        torch.testing.assert_close(s, a, rtol=0, atol=TOL)
    torch.testing.assert_close(ref_s, ref_d, rtol=0, atol=TOL)
    assert m_s["loss"] == pytest.approx(m_d["loss"], abs=TOL)
    assert _max_diff(g_d, g_s) <= TOL


def test_critic_values_and_gradients_equal_dense(tiny_model_dir):
    b = rows.trajectory_wise(7)
    b["returns"] = torch.randn(b["input_ids"].shape, generator=torch.Generator().manual_seed(4))

    def value_loss(values, mb):
        m = mb["response_mask"].float()
        loss = ((values - mb["returns"]).square() * m).sum() / m.sum()
        return loss, {"vf": float(loss.detach())}

    got = []
    for share in (False, True):
        critic = HFCriticStrategy(tiny_model_dir, share_prefix=share)
        torch.manual_seed(0)
        torch.nn.init.normal_(critic.model.score.weight, std=0.05)  # the fresh head is zero: no body gradient
        values = critic.compute_values(b, 3)
        grads = rows.capture_grads(critic)
        metrics = critic.train_step([b], value_loss)
        got.append((values, metrics, grads))
    torch.testing.assert_close(got[1][0], got[0][0], rtol=0, atol=TOL)
    assert got[1][1]["vf"] == pytest.approx(got[0][1]["vf"], abs=TOL)
    assert float(got[0][0].abs().max()) > 0.1
    assert _max_diff(got[0][2], got[1][2]) <= TOL


# ---- data parallel and DeepSpeed --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_shared_ranks(tiny_model_dir, tmp_path_factory) -> list[dict]:
    """Two gloo ranks, each training its half of the rows with share_prefix (hf_train, then ZeRO-2)."""
    modes = ["hf_train", *(["zero2"] if HAS_DEEPSPEED else [])]
    return run_ranks(rows.__file__, 2, tiny_model_dir, tmp_path_factory.mktemp("prefix_dp"), modes)


@pytest.fixture(scope="module")
def one_dense_rank(tiny_model_dir) -> dict:
    return rows.run("hf_train", tiny_model_dir, 0, 1, share_prefix=False)


def test_two_shared_ranks_equal_one_dense_rank(two_shared_ranks, one_dense_rank):
    ranks = [r["hf_train"] for r in two_shared_ranks]
    summed = {k: ranks[0]["grads"][k] + ranks[1]["grads"][k] for k in ranks[0]["grads"]}
    diff = _max_diff(one_dense_rank["grads"], summed)
    assert diff <= TOL, diff
    for rank in ranks:
        assert rank["metrics"]["loss"] == pytest.approx(one_dense_rank["metrics"]["loss"], abs=TOL)
        assert rank["metrics"]["grad_norm"] == pytest.approx(one_dense_rank["metrics"]["grad_norm"], rel=1e-5)
        assert _max_diff(rank["weights"], one_dense_rank["weights"]) <= STEP_TOL


@pytest.mark.deepspeed
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_two_shared_zero2_ranks_equal_one_dense_rank(two_shared_ranks, one_dense_rank):
    for rank in (r["zero2"] for r in two_shared_ranks):
        assert rank["metrics"]["loss"] == pytest.approx(one_dense_rank["metrics"]["loss"], abs=TOL)
        assert rank["metrics"]["grad_norm"] == pytest.approx(one_dense_rank["metrics"]["grad_norm"], rel=1e-5)
        assert _max_diff(rank["weights"], one_dense_rank["weights"]) <= STEP_TOL


@pytest.mark.deepspeed
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_zero2_steps_and_log_probs_equal_dense(tiny_model_dir):
    """ZeRO-2 keeps its gradients in partitioned buffers until the step, so the gradients are compared
    through the step they take: with `rows.OPTIMIZER_ARGS` the weights after it move as lr * g / (|g| + 1)."""
    got = []
    for share in (False, True):
        strategy = rows.build("zero2", tiny_model_dir, share)
        before = _weights(strategy)
        log_probs = strategy.compute_log_probs(rows.step_wise(8), 3)
        metrics = strategy.train_step(_group_micro_batches(), rows.weighted_nll, with_entropy=True)
        got.append((log_probs, metrics, _weights(strategy)))
    (lp_d, m_d, w_d), (lp_s, m_s, w_s) = got
    torch.testing.assert_close(lp_s, lp_d, rtol=0, atol=TOL)
    assert m_s["loss"] == pytest.approx(m_d["loss"], abs=TOL)
    assert m_s["grad_norm"] == pytest.approx(m_d["grad_norm"], rel=1e-5)
    assert _max_diff(w_d, w_s) <= STEP_TOL
    assert _max_diff(before, w_s) > 1e-3  # the step moved the weights
