"""Prefix-tree forwards (`share_prefix`) against the dense padded forward, on tiny random Qwen2 and Llama
models in float32: the trie against a brute-force reference, then log-probs, entropy, exact KL, values, the
loss and every parameter's gradient within 1e-5 for one-turn groups, nested multi-turn histories,
trajectories, mixed prompt lengths, left and right padding. A mutated tree in which only the first suffix's
gradient reaches the shared prefix must fail the same gradient check (the check has teeth).
"""

from __future__ import annotations

import copy
import random

import prefix_ranks as rows
import pytest
import roll_strategies.compute.layout as layout_module
import torch
from forward_helpers import SHAPE, DropsInput, columns
from roll_strategies import StrategyError, batched_log_probs, lm_outputs, value_outputs
from roll_strategies.compute.forward import reference_kl
from roll_strategies.compute.layout import layout
from roll_strategies.compute.prefix_tree import ancestor_mask, build_prefix_tree, tree_forward, tree_masks
from roll_strategies.compute.probes import prefix_sharing_supported
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2ForTokenClassification,
)

TOL = 1e-5


def tiny(kind: str, attn: str = "sdpa", seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    if kind == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**SHAPE, attn_implementation=attn)).float()
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**SHAPE, attn_implementation=attn)).float()
    config = Qwen2Config(**SHAPE, num_labels=1, classifier_dropout=0.0, attn_implementation=attn)
    return Qwen2ForTokenClassification(config).float()


# ---- the trie against a brute-force reference -------------------------------------------------------------


def _random_rows(rng: random.Random) -> list[list[int]]:
    """Rows over a 3-token alphabet (prefixes collide often), some repeated, some prefixes of others."""
    out = [[rng.randrange(3) for _ in range(rng.randrange(0, 7))] for _ in range(rng.randrange(1, 9))]
    if out and out[0]:
        out.append(out[0][: rng.randrange(len(out[0]) + 1)])
        out.append(list(out[0]))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_trie_equals_the_brute_force_prefix_relation(seed):
    seqs = _random_rows(random.Random(seed))
    tree = build_prefix_tree(seqs)
    spelled: dict[int, tuple[int, ...]] = {}  # node -> the tokens from the root to it
    for seq, path in zip(seqs, tree.paths, strict=True):
        assert len(path) == len(seq)
        for d, node in enumerate(path):
            assert int(tree.tokens[node]) == seq[d] and int(tree.depth[node]) == d
            assert spelled.setdefault(node, tuple(seq[: d + 1])) == tuple(seq[: d + 1])
    # one node per distinct prefix: the tree is exactly the set of the rows' prefixes
    distinct = {tuple(s[: d + 1]) for s in seqs for d in range(len(s))}
    assert sorted(spelled.values()) == sorted(distinct) and len(spelled) == int(tree.tokens.numel())
    mask = ancestor_mask(tree)
    for i, si in spelled.items():
        for j, sj in spelled.items():
            assert bool(mask[i, j]) == (si[: len(sj)] == sj), (i, j, si, sj)
        # the ancestor chain of node i, in depth order, spells its prefix
        chain = sorted(mask[i].nonzero().flatten().tolist(), key=lambda n: int(tree.depth[n]))
        assert tuple(int(tree.tokens[n]) for n in chain) == si


@pytest.mark.parametrize("left", [False, True])
def test_every_position_maps_to_its_own_prefix(left):
    b = rows.step_wise(3, left)
    ids, mask = b["input_ids"], b["attention_mask"]
    real = mask.bool()
    starts, lengths = real.long().argmax(1), real.sum(1)
    r, c = (real & (torch.arange(ids.shape[1]) > starts[:, None])).nonzero(as_tuple=True)
    tree = tree_forward(ids, starts, lengths, r, c)
    assert tree is not None
    allowed = tree_masks(tree, {"full_attention": None}, torch.float32)[:, 0] == 0
    for row, col, g, node in zip(r.tolist(), c.tolist(), tree.rows.tolist(), tree.cols.tolist(), strict=True):
        chain = sorted(allowed[g, node].nonzero().flatten().tolist())
        assert tree.position_ids[g, node] == col - 1 - starts[row]
        assert tree.input_ids[g, chain].tolist() == ids[row, starts[row] : col].tolist()
    assert sum(tree.sizes) < int(lengths.sum())  # shared: fewer tokens than the rows hold


# ---- outputs and gradients: tree against dense ----------------------------------------------------------


def outputs_and_grads(model, b, share, *, reference=None, value=False):
    """(outputs, loss, {param: grad}) of one forward + backward of a weighted loss over the outputs; `share`
    runs the tree whatever it would cost (`pair_weight=0`: the rule would pick the rows on some shapes)."""
    model.zero_grad(set_to_none=True)
    adv = torch.randn(b["input_ids"].shape, generator=torch.Generator().manual_seed(1))
    m = b["response_mask"].float()
    if value:
        v = value_outputs(model, *columns(b), share_prefix=share, pair_weight=0.0)
        outs = {"values": v}
        loss = ((v - adv).square() * m).sum() / m.sum()
    else:
        out = lm_outputs(
            model, *columns(b), with_entropy=True, reference=reference, share_prefix=share, pair_weight=0.0
        )
        outs = {k: v for k, v in out._asdict().items() if v is not None}
        loss, _ = rows.weighted_nll(out.log_probs, out.entropy, {**b, "adv": adv, **_kl(out)})
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return outs, loss.detach(), grads


def _kl(out):
    return {} if out.full_kl is None else {"full_kl": out.full_kl}


def max_grad_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def assert_same(model, b, **kwargs):
    ids, mask, needed = columns(b)
    assert (
        layout(ids, mask, needed, None, 0, True, model)[0].tree is not None
    )  # the tree runs: no vacuous test
    dense = outputs_and_grads(model, b, False, **kwargs)
    shared = outputs_and_grads(model, b, True, **kwargs)
    assert dense[0].keys() == shared[0].keys()
    for key in dense[0]:
        torch.testing.assert_close(shared[0][key], dense[0][key], rtol=0, atol=TOL, msg=key)
    assert abs(float(shared[1] - dense[1])) <= TOL
    diff = max_grad_diff(dense[2], shared[2])
    assert diff <= TOL, diff
    assert len(dense[2]) == len(list(model.parameters()))  # every parameter got a gradient
    return diff


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
@pytest.mark.parametrize("case", sorted(rows.CASES))
@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_tree_outputs_and_gradients_equal_dense(kind, case, left):
    assert_same(tiny(kind), rows.CASES[case](0, left))


def test_eager_attention_takes_the_float_mask_too():
    assert_same(tiny("llama", attn="eager"), rows.step_wise(1))
    assert_same(tiny("qwen2", attn="eager"), rows.one_turn_group(1, left=True))


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
def test_exact_kl_with_a_reference_equals_dense(left):
    """full_kl / full_kl_forward / ref_log_probs and the gradients of a loss using the KL."""
    model, reference = tiny("qwen2"), tiny("qwen2", seed=1).requires_grad_(False)
    assert_same(model, rows.step_wise(2, left), reference=reference)
    b = rows.two_groups(2, left)
    with torch.no_grad():
        dense = reference_kl(model, reference, b, 3, device="cpu")
        shared = reference_kl(model, reference, b, 3, device="cpu", share_prefix=True)
    for a, s in zip(dense, shared, strict=True):
        torch.testing.assert_close(s, a, rtol=0, atol=TOL)


def test_a_reference_in_another_dtype_gets_its_own_mask():
    model, reference = tiny("qwen2"), tiny("qwen2", seed=1).double().requires_grad_(False)
    b = rows.one_turn_group(4)
    with torch.no_grad():
        dense = lm_outputs(model, *columns(b), reference=reference)
        shared = lm_outputs(model, *columns(b), reference=reference, share_prefix=True)
    torch.testing.assert_close(shared.full_kl, dense.full_kl, rtol=0, atol=TOL)


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
@pytest.mark.parametrize("case", ["one_turn_group", "step_wise"])
def test_critic_values_and_gradients_equal_dense(case, left):
    value_model = tiny("value")
    torch.nn.init.normal_(value_model.score.weight, std=0.5)  # a nonzero head, so values carry signal
    assert_same(value_model, rows.CASES[case](0, left), value=True)


def test_batched_log_probs_as_prefix_trees_equal_the_dense_ones():
    """The old-log-prob recompute: the same positions and values, micro-batch by micro-batch."""
    model = tiny("llama")
    b = rows.step_wise(5)
    for size in (2, 4, 100):
        torch.testing.assert_close(
            batched_log_probs(model, b, size, device="cpu", share_prefix=True),
            batched_log_probs(model, b, size, device="cpu"),
            rtol=0,
            atol=TOL,
        )


def test_rows_sharing_nothing_and_packing_requests():
    b = rows.one_turn_group(6)
    rows_, cols_ = b["response_mask"].nonzero(as_tuple=True)
    args = columns(b)
    run, *_ = layout(*args, pack_capacity=64, pad_id=0, share_prefix=True)
    assert run.attention_mask.dim() == 4  # the tree wins over packing
    distinct = rows.pad([([10 + r, 20, 30], [False, True, True]) for r in range(4)])
    run, *_ = layout(
        distinct["input_ids"], distinct["attention_mask"], distinct["response_mask"], None, 0, True
    )
    assert run.attention_mask.dim() == 2  # every branch at the root: the dense padded forward
    assert len(rows_) == len(cols_)


def test_a_micro_batch_builds_its_trie_once(monkeypatch):
    """Deciding whether the tree pays and running it read one trie."""
    import roll_strategies.compute.prefix_tree as prefix_tree

    built = []
    real = prefix_tree.build_prefix_tree
    monkeypatch.setattr(prefix_tree, "build_prefix_tree", lambda seqs: built.append(1) or real(seqs))
    monkeypatch.setattr(
        "roll_strategies.compute.layout_cost.build_prefix_tree", prefix_tree.build_prefix_tree
    )
    b = rows.one_turn_group(6)
    run, *_ = layout(*columns(b), None, 0, True)
    assert run.tree is not None and len(built) == 1


def test_prefix_sharing_is_probed_not_assumed():
    for kind in ("qwen2", "llama"):
        assert prefix_sharing_supported(tiny(kind))
    assert prefix_sharing_supported(tiny("value"), value_model=True)
    assert not prefix_sharing_supported(DropsInput(tiny("qwen2"), "attention_mask"))


def test_an_unsupported_model_is_refused_at_construction(tiny_model_dir, monkeypatch):
    import roll_strategies.compute.probes as probes
    import roll_strategies.train.hf_train as hf_train

    monkeypatch.setattr(probes, "prefix_sharing_supported", lambda model, value_model=False: False)
    with pytest.raises(StrategyError, match="share_prefix=false"):
        hf_train.HFTrainStrategy(tiny_model_dir, share_prefix=True)
    hf_train.HFTrainStrategy(tiny_model_dir, share_prefix=False)  # the dense path needs no probe


# ---- the check has teeth ---------------------------------------------------------------------------------


def _detached_copy_tree(model, monkeypatch, prompt: int):
    """Patch the tree so rows 1.. share a second copy of the prompt whose hidden states are detached in every
    layer: every suffix sees the prompt's exact hidden states, only the first one's gradient reaches them."""
    original = layout_module.tree_forward
    copy_nodes: list[torch.Tensor] = []

    def mutated(input_ids, starts, lengths, rows_, cols, _trie=None):
        keyed = input_ids.clone()  # its own trie: the one built for the choice is of the unkeyed rows
        later = torch.arange(input_ids.shape[0]) > 0
        keyed[later, starts[later]] += 10_000  # rows 1.. branch off row 0 at the root: a second tree row
        tree = original(keyed, starts, lengths, rows_, cols)
        copy_nodes.append((tree.input_ids >= 10_000).cumsum(1).bool() & (tree.position_ids < prompt))
        return tree._replace(input_ids=tree.input_ids % 10_000)

    def detach_copy(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        if not copy_nodes or hidden.shape[:2] != copy_nodes[-1].shape:
            return output
        swapped = torch.where(copy_nodes[-1][..., None], hidden.detach(), hidden)
        return (swapped, *output[1:]) if isinstance(output, tuple) else swapped

    monkeypatch.setattr(layout_module, "tree_forward", mutated)
    inner = model.model
    for module in (inner.embed_tokens, *inner.layers):
        module.register_forward_hook(detach_copy)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_the_gradient_check_fails_when_only_one_suffix_trains_the_prefix(kind, monkeypatch):
    b = rows.one_turn_group(0)
    model = tiny(kind)
    honest = assert_same(model, b)
    mutant = copy.deepcopy(model)
    _detached_copy_tree(mutant, monkeypatch, prompt=10)
    dense = outputs_and_grads(mutant, b, False)
    shared = outputs_and_grads(mutant, b, True)
    torch.testing.assert_close(
        shared[0]["log_probs"], dense[0]["log_probs"], rtol=0, atol=TOL
    )  # same forward
    diff = max_grad_diff(dense[2], shared[2])
    print(f"\n{kind}: max |grad(tree) - grad(dense)| = {honest:.3g}; with the mutation = {diff:.3g}")
    with pytest.raises(AssertionError):
        assert_same(mutant, b)
    assert diff > 100 * TOL
