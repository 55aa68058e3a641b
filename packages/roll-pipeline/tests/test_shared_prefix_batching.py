"""`share_prefix`: a group's rows (one prompt) stay together in the trained roles' batching, the loss weights stay
exact whatever the cuts, every role's strategy gets the switch, and `roll config` refuses a model whose attention
cannot take a prefix tree.

The step itself is checked on real train workers: a prefix-tree step (groups kept together, rows of a group
sharing their prompt) gives the weights of the padded step on the same rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from roll_algos.packing import pack_lengths
from roll_pipeline.assembly.settings import actor_loss, run_settings, spawn_settings
from roll_pipeline.config.compose import tiny_config
from roll_pipeline.runtime.placement import plan_roles
from roll_pipeline.trainer.micro_batches import (
    TrainLayout,
    build_micro_batches,
    group_mini_batches,
    mini_batches,
    plan_micro_batches,
)
from roll_pipeline.trainer.samples import build_samples
from roll_rollout import Trajectory, Turn


def layout(
    mode: str, rows: int = 4, max_tokens: int = 96, round_to: int = 8, share: bool = True
) -> TrainLayout:
    return TrainLayout(mode, rows, 10_000, max_tokens, round_to, share_prefix=share)


def grouped(seed: int, n_groups: int = 9) -> tuple[list[int], list[int]]:
    """(lengths, group ids) of rows in groups of 1-6 rows, a group's rows listed apart from each other."""
    g = torch.Generator().manual_seed(seed)
    groups = [k for k in range(n_groups) for _ in range(int(torch.randint(1, 7, (1,), generator=g)))]
    order = torch.randperm(len(groups), generator=g).tolist()
    lengths = torch.randint(4, 30, (len(groups),), generator=g).tolist()
    return lengths, [groups[i] for i in order]


def fits(members: list[int], lengths: list[int], lay: TrainLayout, capacity: int) -> bool:
    if lay.mode == "fixed":
        return len(members) <= lay.rows_per_micro_batch
    if lay.mode == "dynamic":
        width = -(-max(lengths[i] for i in members) // lay.round_to) * lay.round_to
        return len(members) * width <= lay.max_tokens
    return len(pack_lengths([lengths[i] for i in members], capacity)) <= max(1, lay.max_tokens // capacity)


@pytest.mark.parametrize("mode", ["fixed", "dynamic", "packed"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_group_is_one_micro_batch_where_it_fits_and_consecutive_ones_where_not(mode, seed):
    lengths, groups = grouped(seed)
    lay = layout(mode)
    capacity = -(-max(lengths) // 8) * 8
    (plan,) = plan_micro_batches(lengths, lay, groups=groups)
    assert sorted(i for mb in plan for i in mb) == list(range(len(lengths)))
    for mb in plan:  # the budget of today's micro-batches holds
        assert len(mb) == 1 or fits(mb, lengths, lay, capacity)
    split = 0
    for g in set(groups):
        rows = [i for i, x in enumerate(groups) if x == g]
        holding = [k for k, mb in enumerate(plan) if any(groups[i] == g for i in mb)]
        if fits(rows, lengths, lay, capacity):
            assert len(holding) == 1, (g, holding)
        else:
            split += 1
            assert holding == list(range(holding[0], holding[0] + len(holding)))  # consecutive
    if mode == "fixed":
        assert split > 0  # groups of 5-6 rows in micro-batches of 4: the split path ran


@pytest.mark.parametrize("mode", ["fixed", "dynamic", "packed"])
def test_ranks_take_whole_groups_balanced_and_run_as_many_micro_batches(mode):
    lengths, groups = grouped(3, n_groups=12)
    plans = plan_micro_batches(lengths, layout(mode), dp_size=3, groups=groups)
    assert sorted(i for plan in plans for mb in plan for i in mb) == list(range(len(lengths)))
    assert len({len(plan) for plan in plans}) == 1
    share = -(-len(lengths) // 3)
    for g in set(groups):
        rows = [i for i, x in enumerate(groups) if x == g]
        ranks = {r for r, plan in enumerate(plans) for mb in plan for i in mb if groups[i] == g}
        if len(rows) <= share:
            assert len(ranks) == 1
    tokens = [sum(lengths[i] for mb in plan for i in mb) for plan in plans]
    biggest = max(sum(lengths[i] for i, x in enumerate(groups) if x == g) for g in set(groups))
    assert max(tokens) - min(tokens) <= biggest  # Karmarkar-Karp's bound, groups as the units


def test_without_share_prefix_the_plan_is_todays():
    lengths, groups = grouped(4)
    for mode in ("fixed", "dynamic", "packed"):
        for dp in (1, 3):
            off = layout(mode, share=False)
            assert plan_micro_batches(lengths, off, dp, groups=groups) == plan_micro_batches(lengths, off, dp)


def test_mini_batches_shuffle_whole_groups():
    groups = torch.tensor([k for k in range(10) for _ in range(4)])[torch.randperm(40)]
    chunks = group_mini_batches(groups, 8, torch.Generator().manual_seed(0))
    assert len(chunks) == len(mini_batches(torch.arange(40), 8)) == 5
    assert sorted(torch.cat(chunks).tolist()) == list(range(40))
    assert all(len(c) == 8 and len(set(groups[c].tolist())) == 2 for c in chunks)  # 2 whole groups each
    again = group_mini_batches(groups, 8, torch.Generator().manual_seed(0))
    other = group_mini_batches(groups, 8, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(chunks, again, strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(chunks, other, strict=True))
    # groups of 3 in mini-batches of at most 4: the cuts that keep sizes within 4 fall inside groups
    small = torch.tensor([k for k in range(4) for _ in range(3)])
    sizes = [len(c) for c in group_mini_batches(small, 4, torch.Generator().manual_seed(0))]
    assert sizes and max(sizes) <= 4 and sum(sizes) == 12 and len(sizes) == 3


def rows(n_groups: int = 4, per_group: int = 3, width: int = 40, seed: int = 2) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n = n_groups * per_group
    mask = torch.zeros(n, width, dtype=torch.long)
    resp = torch.zeros(n, width, dtype=torch.bool)
    ids = torch.zeros(n, width, dtype=torch.long)
    for k in range(n_groups):
        prompt = torch.randint(5, 100, (int(torch.randint(3, 20, (1,), generator=g)),), generator=g)
        for r in range(k * per_group, (k + 1) * per_group):
            q = int(torch.randint(1, width - len(prompt), (1,), generator=g))
            ids[r, : len(prompt)] = prompt
            ids[r, len(prompt) : len(prompt) + q] = torch.randint(5, 100, (q,), generator=g)
            mask[r, : len(prompt) + q] = 1
            resp[r, len(prompt) : len(prompt) + q] = True
    old = -torch.rand(n, width, generator=g) * resp
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "response_mask": resp,
        "old_log_probs": old,
        "advantages": torch.randn(n, width, generator=g) * resp,
        "new": (old + 0.3 * torch.randn(n, width, generator=g)) * resp,
    }


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("mode", ["fixed", "dynamic", "packed"])
@pytest.mark.parametrize("skip", [None, 0.6])
def test_the_loss_weights_stay_exact_whatever_the_cuts(mode, agg, ranks, skip):
    """With `skip` the policy-gradient and the decision-scoped entropy terms cover some tokens only (whole rows
    drop out where the sampler was sure of every token): the micro-batches' weighted losses still add up to the
    whole mini-batch's."""
    cfg = tiny_config(
        loss_agg_mode=agg,
        skip_confident_tokens=skip,
        entropy_loss_coef=0.1,
        entropy_scope="decision" if skip is not None else "response",
        sequence_length=64,
    )
    loss_fn = actor_loss(cfg, 0.0)
    fields = rows()
    fields["entropy"] = torch.rand(fields["new"].shape, generator=torch.Generator().manual_seed(3))
    if skip is not None:  # two rows the sampler was sure of throughout: they drop out of the decision tokens
        fields["old_log_probs"][[1, 7]] = -0.01 * fields["response_mask"][[1, 7]]
        confident = (fields["old_log_probs"] >= torch.log(torch.tensor(skip))) | ~fields["response_mask"]
        assert confident.all(dim=1).sum() == 2 and not bool(confident.all())
    groups = torch.arange(12) // 3
    whole, _ = loss_fn(fields["new"], fields["entropy"], fields)
    idx = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    per_rank, stats = build_micro_batches(fields, idx, layout(mode, rows=2), agg, ranks, groups)
    mbs = [mb for rank in per_rank for mb in rank]
    total = sum(float(mb["loss_scale"]) * float(loss_fn(mb["new"], mb["entropy"], mb)[0]) for mb in mbs)
    assert total == pytest.approx(float(whole), rel=1e-5)
    assert sum(float(mb["loss_scale"]) for mb in mbs) == pytest.approx(1.0)
    assert stats.real_tokens == int(fields["attention_mask"].sum())


def test_groups_that_start_alike_share_micro_batches_and_their_prompt_is_computed_once():
    """Four groups of 2 rows, two prompts each drawn twice (as four_choice draws a colour twice), shuffled so
    that no two groups of one prompt are neighbours: micro-batches of 4 rows pair the groups of one prompt, so
    the forwards compute each prompt once per micro-batch; the loss is the whole mini-batch's either way."""
    prompts = [[7, 8, 9, 10, 11, 12], [7, 8, 30, 31, 32, 33]]  # one system start, then apart
    ids = torch.zeros(8, 10, dtype=torch.long)
    mask = torch.zeros(8, 10, dtype=torch.long)
    resp = torch.zeros(8, 10, dtype=torch.bool)
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    for r in range(8):
        prompt = prompts[int(groups[r]) % 2]  # groups 0 and 2 on one prompt, 1 and 3 on the other
        ids[r, :6], ids[r, 6:9] = torch.tensor(prompt), torch.tensor([40 + r, 50 + r, 60 + r])
        mask[r, :9], resp[r, 6:9] = 1, True
    fields = {"input_ids": ids, "attention_mask": mask, "response_mask": resp}
    order = torch.arange(8)
    (plan,), stats = build_micro_batches(fields, order, layout("fixed", rows=4), "token-mean", 1, groups)
    assert [sorted(set(groups[mb_rows(fields, mb)].tolist())) for mb in plan] == [[0, 2], [1, 3]]
    # per micro-batch: its prompt once (6) and 4 x 3 response tokens; the rows in order: 2 x (12 + 12)
    assert stats.distinct_tokens == 2 * (6 + 12)
    _, dense_stats = build_micro_batches(
        fields, order, layout("fixed", rows=4, share=False), "token-mean", 1, groups
    )
    assert dense_stats.distinct_tokens == 8 * 9


def test_an_episodes_turns_with_one_history_share_a_micro_batch():
    """One group of step-wise rows, two episodes of 3 turns listed episode by episode: turns 1 of both show one
    board (one prompt), turns 2 and 3 differ. Sorted, the two turn-1 rows share a micro-batch of 2, so its tree
    computes their prompt once; in the listed order each micro-batch's rows part after the instruction."""
    instruction = [5, 6, 7, 8]
    turns = [[20, 21], [30, 31, 32], [40, 41, 42, 43], [20, 21], [50, 51, 52], [60, 61, 62, 63]]
    ids = torch.zeros(6, 12, dtype=torch.long)
    mask = torch.zeros(6, 12, dtype=torch.long)
    resp = torch.zeros(6, 12, dtype=torch.bool)
    for r, turn in enumerate(turns):
        row = [*instruction, *turn, 90 + r]  # the prompt, then a one-token answer of its own
        ids[r, : len(row)], mask[r, : len(row)], resp[r, len(row) - 1] = torch.tensor(row), 1, True
    fields = {"input_ids": ids, "attention_mask": mask, "response_mask": resp}
    groups = torch.zeros(6, dtype=torch.long)
    (plan,), stats = build_micro_batches(
        fields, torch.arange(6), layout("fixed", rows=2), "token-mean", 1, groups
    )
    assert sorted(mb_rows(fields, plan[0])) == [0, 3]  # both turn-1 rows
    # sorted: [0, 3] 4 + 2 + 2 answers = 8, [1, 2] 4 + 3 + 4 + 2 = 13, [4, 5] 4 + 3 + 4 + 2 = 13
    assert stats.distinct_tokens == 8 + 13 + 13
    unsorted = sum(  # the listed order, pairs (0, 1), (2, 3), (4, 5): each pair shares only the instruction
        len(instruction) + sum(len(turns[r]) + 1 for r in pair) for pair in ((0, 1), (2, 3), (4, 5))
    )
    assert stats.distinct_tokens < unsorted == 36


def mb_rows(fields: dict[str, torch.Tensor], mb: dict[str, torch.Tensor]) -> list[int]:
    """The rows of `fields` a micro-batch holds (each row's ids are unique here; the micro-batch is trimmed)."""
    width = mb["input_ids"].shape[1]
    ids = fields["input_ids"][:, :width]
    return [next(r for r in range(len(ids)) if torch.equal(ids[r], row)) for row in mb["input_ids"]]


def test_rows_carry_their_trajectorys_group():
    def traj(env: int, group: int, turns: int) -> Trajectory:
        t = Trajectory(env_id=env, group_id=group, episode_id=env, tag="T", seed=group)
        t.turns = [Turn([1, 2, 3], [4 + k], [-0.5], 0.0, True, True, "s") for k in range(turns)]
        return t

    trajs = [traj(0, 70, 2), traj(1, 70, 1), traj(2, 11, 3)]
    assert build_samples(trajs, 0, "step").row_groups.tolist() == [70, 70, 70, 11, 11, 11]


@pytest.mark.parametrize("share", [True, False])
def test_every_role_gets_the_switch(share, monkeypatch):
    import roll_strategies
    from roll_pipeline.assembly.parts import inference_server

    cfg = tiny_config(share_prefix=share, adv_estimator="gae", kl_penalty="k3")
    plans, _ = plan_roles(spawn_settings(cfg), None)
    assert set(plans) == {"actor_train", "actor_infer", "critic", "reference"}
    assert {name: plan.strategy["share_prefix"] for name, plan in plans.items()} == dict.fromkeys(
        plans, share
    )

    seen: dict[str, Any] = {}

    class Recording:
        def __init__(self, model_path: Any, **kwargs: Any) -> None:
            seen.update(kwargs)

        def streams(self) -> bool:
            return False

    monkeypatch.setattr(roll_strategies, "ActorInferWorker", Recording)
    inference_server(run_settings(cfg), "unused-model-folder")  # roll eval / roll serve
    assert seen["share_prefix"] is share


# -- the step: a prefix-tree step equals the padded one ------------------------------------------------------------


def _train(
    train_once: Any, model_dir: Path, share: bool, critic: bool
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """One update (the `train_once` fixture) over 3 groups of 4 rows (each group's rows share a prompt), one mini-batch of micro-batches of
    3 rows: a group is split over two micro-batches, another shares one with a third group's rows."""
    from roll_algos import ActorLoss, CriticLoss
    from roll_pipeline.runtime.cluster import LocalCluster
    from roll_pipeline.runtime.ranks import RankGroup
    from roll_strategies import ActorTrainWorker, CriticWorker, OptimizerSettings

    torch.manual_seed(0)
    fields = rows(n_groups=3, per_group=4, width=24, seed=5)
    groups = torch.arange(12) // 4
    # eps far above the gradients: the step is ~ -lr * gradient, so equal gradients give equal weights (Adam's
    # first step, gradient / |gradient|, would amplify float noise in gradients near 0)
    opt = OptimizerSettings(learning_rate=1.0, eps=1.0)
    cls = CriticWorker if critic else ActorTrainWorker
    worker = cls(model_dir, optimizer=opt, share_prefix=share)
    if critic:
        data = {k: fields[k] for k in ("input_ids", "attention_mask", "response_mask")}
        data["old_values"] = torch.zeros(12, 24)
        data["returns"] = fields["advantages"]
        loss: Any = CriticLoss(None)
        extra: dict[str, Any] = {}
    else:
        data = {k: fields[k] for k in ("input_ids", "attention_mask", "response_mask", "advantages")}
        data["segment_ids"] = fields["response_mask"].long()
        data["old_log_probs"] = worker.compute_log_probs(data, 12)
        loss, extra = ActorLoss(agg_mode="token-mean"), {"with_entropy": True}
    lay = TrainLayout("fixed", 3, 12, 10_000, 1, share_prefix=share)
    metrics = train_once(
        RankGroup(LocalCluster(), [worker]), loss, data, lay, prefix="x", groups=groups, **extra
    )
    model = worker.strategy.model
    return metrics, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.slow  # four train steps of the tiny model (actor and critic, tree and padded)
@pytest.mark.parametrize("critic", [False, True], ids=["actor", "critic"])
def test_the_tree_step_equals_the_padded_step(model_dir, critic, train_once):
    tree_metrics, tree = _train(train_once, model_dir, True, critic)
    dense_metrics, dense = _train(train_once, model_dir, False, critic)
    assert tree_metrics["x/loss"] == pytest.approx(dense_metrics["x/loss"], rel=1e-4, abs=1e-6)
    assert tree_metrics["x/grad_norm"] == pytest.approx(dense_metrics["x/grad_norm"], rel=1e-4)
    worst = max(float((tree[n] - dense[n]).abs().max()) for n in tree)
    moved = max(float((tree[n] - t0).abs().max()) for n, t0 in _initial(model_dir, critic).items())
    assert worst < 1e-6 and moved > 1e-3, (worst, moved)  # the same step, and the step did train


def _initial(model_dir: Path, critic: bool) -> dict[str, torch.Tensor]:
    from roll_strategies import ActorTrainWorker, CriticWorker, OptimizerSettings

    cls = CriticWorker if critic else ActorTrainWorker
    worker = cls(model_dir, optimizer=OptimizerSettings(learning_rate=1.0))
    return {n: p.detach().clone() for n, p in worker.strategy.model.named_parameters()}


# -- roll config refuses an architecture that cannot take the tree -------------------------------------------------


def _mask_blind_model(folder: Path, tokenizer_from: Path) -> Path:
    """A model folder whose architecture attends causally along each row and ignores the attention mask it is
    given (so a prefix tree's branches see each other): registered with transformers' Auto classes."""
    from torch import nn
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
        PretrainedConfig,
        PreTrainedModel,
    )
    from transformers.modeling_outputs import CausalLMOutput

    class MaskBlindConfig(PretrainedConfig):
        model_type = "roll_test_mask_blind"

        def __init__(self, vocab_size: int = 300, hidden_size: int = 16, **kwargs: Any) -> None:
            self.vocab_size, self.hidden_size = vocab_size, hidden_size
            super().__init__(**kwargs)

    class MaskBlindLM(PreTrainedModel):
        config_class = MaskBlindConfig

        def __init__(self, config: MaskBlindConfig) -> None:
            super().__init__(config)
            self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
            self.attn = nn.MultiheadAttention(config.hidden_size, 2, batch_first=True)
            self.head = nn.Linear(config.hidden_size, config.vocab_size)
            self.post_init()

        def forward(self, input_ids: torch.Tensor, **ignored: Any) -> CausalLMOutput:
            x = self.embed(input_ids)
            causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)
            return CausalLMOutput(logits=self.head(x + self.attn(x, x, x, attn_mask=causal)[0]))

    AutoConfig.register(MaskBlindConfig.model_type, MaskBlindConfig, exist_ok=True)
    AutoModelForCausalLM.register(MaskBlindConfig, MaskBlindLM, exist_ok=True)
    folder.mkdir(parents=True)
    MaskBlindConfig().save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["model_type"] == MaskBlindConfig.model_type
    return folder


def test_roll_config_refuses_an_architecture_that_cannot_take_the_tree(
    model_dir, tmp_path, capsys, monkeypatch
):
    import roll_pipeline.pipeline
    from roll_pipeline.cli import commands as cli

    def no_workers(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a worker was started although the config is bad")

    monkeypatch.setattr(roll_pipeline.pipeline, "AgenticPipeline", no_workers)
    folder = _mask_blind_model(tmp_path / "mask-blind", model_dir)
    assert cli.main(["config", f"pretrain={folder}"]) == 2
    err = capsys.readouterr().err
    assert "MaskBlindLM" in err and "set share_prefix=false" in err, err
    assert cli.main(["config", f"pretrain={folder}", "share_prefix=false"]) == 0
    assert "share_prefix: false" in capsys.readouterr().out
    assert cli.main(["config", f"pretrain={model_dir}"]) == 0  # a Qwen2-shaped model takes it
    assert "share_prefix: true" in capsys.readouterr().out


def test_the_step_counts_the_tokens_its_forwards_compute_trees_where_they_pay():
    prompt = list(range(10, 20))
    # 3 share the prompt, the fourth only its first token: one root, so the tree is one row of 26 nodes
    rows = [[*prompt, 1, 2], [*prompt, 1, 3], [*prompt, 4, 5], [10, *range(30, 41)]]
    fields = {
        "input_ids": torch.tensor(rows),
        "attention_mask": torch.ones(4, 12, dtype=torch.long),
        "response_mask": torch.tensor([[0] * 10 + [1, 1]] * 4),
    }
    # the tree: 26 nodes, 676 pairs against 48 tokens, 576 pairs: it pays below a pair weight of 22 / 100
    for share, weight, expected in ((True, 0.21, 10 + 1 + 2 + 2 + 11), (True, 0.23, 48), (False, 0.0, 48)):
        layout = TrainLayout("fixed", 4, 4, 8192, 1, share_prefix=share, pair_weight=weight)
        _, stats = build_micro_batches(
            fields, torch.arange(4), layout, "token-mean", groups=torch.tensor([0, 0, 0, 1])
        )
        assert (stats.real_tokens, stats.distinct_tokens) == (48, expected)
        assert stats.metrics("actor")["actor/distinct_token_fraction"] == expected / 48
