"""Every loss option of the config reaches the computed loss, as the reference maths says.

The loss is built from an `AgenticConfig` exactly as the pipeline builds it (`actor_loss`), evaluated on
a hand-made micro-batch, and compared with a plain-Python loop implementation of the PPO family written
here (no roll_algos code): token / segment / sequence ratios, asymmetric clip, dual clip, truncated
importance sampling, the four aggregations, the entropy bonus, and the KL loss with every estimator.
Each test also checks that the option changes the loss, so none of them can pass by ignoring it.
"""

from __future__ import annotations

import math

import pytest
import torch
from roll_pipeline.assembly.settings import actor_loss
from roll_pipeline.config.compose import tiny_config
from roll_pipeline.config.schema import AgenticConfig

# 3 rows x 7 tokens; row 0 is a trajectory row with two turns (segments 1 and 2), rows 1-2 single turns
MASK = [
    [0, 1, 1, 0, 0, 1, 1],
    [0, 0, 1, 1, 1, 0, 0],
    [0, 1, 0, 0, 0, 0, 0],
]
SEGMENTS = [
    [0, 1, 1, 0, 0, 2, 2],
    [0, 0, 1, 1, 1, 0, 0],
    [0, 1, 0, 0, 0, 0, 0],
]
OLD = [
    [0.0, -1.2, -0.4, 0.0, 0.0, -2.0, -0.7],
    [0.0, 0.0, -0.3, -1.5, -0.9, 0.0, 0.0],
    [0.0, -0.2, 0.0, 0.0, 0.0, 0.0, 0.0],
]
NEW = [  # ratios from 0.55 to 1.6: inside and outside the clip range on both sides
    [0.0, -0.9, -0.45, 0.0, 0.0, -2.6, -0.55],
    [0.0, 0.0, 0.17, -1.45, -1.3, 0.0, 0.0],
    [0.0, -0.05, 0.0, 0.0, 0.0, 0.0, 0.0],
]
ADV = [
    [0.0, 1.0, -2.0, 0.0, 0.0, -1.5, 0.5],
    [0.0, 0.0, -1.0, 2.0, -0.5, 0.0, 0.0],
    [0.0, 0.7, 0.0, 0.0, 0.0, 0.0, 0.0],
]
ROLLOUT = [  # the sampler's log-probs: TIS weights exp(old - rollout)
    [0.0, -1.0, -0.9, 0.0, 0.0, -2.1, -0.7],
    [0.0, 0.0, -0.8, -1.5, -0.2, 0.0, 0.0],
    [0.0, -0.9, 0.0, 0.0, 0.0, 0.0, 0.0],
]
REF = [
    [0.0, -1.0, -0.6, 0.0, 0.0, -1.7, -0.9],
    [0.0, 0.0, -0.5, -1.2, -1.1, 0.0, 0.0],
    [0.0, -0.4, 0.0, 0.0, 0.0, 0.0, 0.0],
]
ENTROPY = [
    [0.0, 0.5, 0.9, 0.0, 0.0, 0.3, 1.1],
    [0.0, 0.0, 0.2, 0.8, 0.6, 0.0, 0.0],
    [0.0, 1.4, 0.0, 0.0, 0.0, 0.0, 0.0],
]
SEQ_LEN = 16  # sequence_length: the divisor of seq-mean-token-sum-norm


def micro_batch() -> dict[str, torch.Tensor]:
    return {
        "response_mask": torch.tensor(MASK, dtype=torch.bool),
        "segment_ids": torch.tensor(SEGMENTS),
        "old_log_probs": torch.tensor(OLD),
        "advantages": torch.tensor(ADV),
        "rollout_log_probs": torch.tensor(ROLLOUT),
        "ref_log_probs": torch.tensor(REF),
    }


def config(**overrides) -> AgenticConfig:
    base = {"skip_confident_tokens": None, "use_kl_loss": False, "sequence_length": SEQ_LEN}
    if "kl_loss_coef" in overrides:
        base["use_kl_loss"] = True
    return tiny_config(**{**base, **overrides})


def computed(cfg: AgenticConfig, new=NEW, entropy=None, kl_coef=None) -> float:
    loss_fn = actor_loss(cfg, cfg.kl_loss_coef if kl_coef is None else kl_coef)
    ent = None if entropy is None else torch.tensor(entropy)
    loss, _ = loss_fn(torch.tensor(new), ent, micro_batch())
    return float(loss)


# ----------------------------------------------------------------- the reference, plain Python
def tokens(row):
    return [t for t in range(len(MASK[row])) if MASK[row][t]]


def ratio(row, t, new, level):
    if level == "token":
        group = [t]
    elif level == "segment":
        group = [u for u in tokens(row) if SEGMENTS[row][u] == SEGMENTS[row][t]]
    else:
        group = tokens(row)
    return math.exp(sum(new[row][u] - OLD[row][u] for u in group) / len(group))


def token_loss(row, t, new, level, low, high, dual, tis_cap):
    a, r = ADV[row][t], ratio(row, t, new, level)
    loss = max(-a * r, -a * min(max(r, 1 - low), 1 + high))
    if dual is not None and a < 0:
        loss = min(loss, -a * dual)
    if tis_cap is not None:
        loss *= min(math.exp(OLD[row][t] - ROLLOUT[row][t]), tis_cap)
    return loss


def aggregate(per_token, mode):
    rows = [r for r in range(len(MASK)) if tokens(r)]
    if mode == "token-mean":
        return sum(per_token[r][t] for r in rows for t in tokens(r)) / sum(len(tokens(r)) for r in rows)
    if mode == "seq-mean-token-mean":
        return sum(sum(per_token[r][t] for t in tokens(r)) / len(tokens(r)) for r in rows) / len(rows)
    if mode == "seq-mean-token-sum":
        return sum(sum(per_token[r][t] for t in tokens(r)) for r in rows) / len(rows)
    return sum(sum(per_token[r][t] for t in tokens(r)) / SEQ_LEN for r in rows) / len(rows)  # Dr. GRPO


def reference(
    level="token", low=0.2, high=0.2, dual=None, tis_cap=None, mode="seq-mean-token-mean", new=NEW
) -> float:
    per = [
        [token_loss(r, t, new, level, low, high, dual, tis_cap) if MASK[r][t] else 0.0 for t in range(7)]
        for r in range(3)
    ]
    return aggregate(per, mode)


def kl_value(x: float, kind: str) -> float:
    return {"kl": x, "abs": abs(x), "mse": 0.5 * x * x, "k3": math.exp(-x) + x - 1}[kind]


# ----------------------------------------------------------------- the tests
@pytest.mark.parametrize("level", ["token", "segment", "sequence"])
def test_ratio_level(level):
    got = computed(config(ratio_level=level))
    assert got == pytest.approx(reference(level=level), rel=1e-5)
    others = {lvl: reference(level=lvl) for lvl in ("token", "segment", "sequence") if lvl != level}
    assert all(abs(got - v) > 1e-3 for v in others.values())


def test_asymmetric_clip_and_the_shared_default():
    assert computed(config()) == pytest.approx(reference(), rel=1e-5)
    got = computed(config(pg_clip_low=0.1, pg_clip_high=0.28))
    assert got == pytest.approx(reference(low=0.1, high=0.28), rel=1e-5)
    assert abs(got - reference()) > 1e-3
    assert computed(config(pg_clip=0.05)) == pytest.approx(reference(low=0.05, high=0.05), rel=1e-5)


def test_dual_clip_bounds_negative_advantages_at_three():
    new = [row[:] for row in NEW]
    new[0][2] = OLD[0][2] + math.log(5.0)  # ratio 5 with A = -2: PPO loss 10, dual clip 6
    got = computed(config(dual_clip_loss=True), new=new)
    assert got == pytest.approx(reference(dual=3.0, new=new), rel=1e-5)
    # the capped token: 10 -> 6, one of row 0's 4 tokens, one of 3 rows
    assert computed(config(), new=new) - got == pytest.approx(4 / 4 / 3, rel=1e-5)


def test_truncated_importance_sampling():
    cfg = config(recompute_old_log_probs=True, tis_cap=1.5)
    got = computed(cfg)
    assert got == pytest.approx(reference(tis_cap=1.5), rel=1e-5)
    assert abs(got - reference()) > 1e-3


@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)
def test_aggregation_modes(mode):
    got = computed(config(loss_agg_mode=mode))
    assert got == pytest.approx(reference(mode=mode), rel=1e-5)
    others = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
    assert all(abs(got - reference(mode=o)) > 1e-4 for o in others if o != mode)


def test_entropy_bonus():
    plain = computed(config(), entropy=ENTROPY)
    got = computed(config(entropy_loss_coef=0.01), entropy=ENTROPY)
    ent = [[ENTROPY[r][t] for t in range(7)] for r in range(3)]
    assert got == pytest.approx(plain - 0.01 * aggregate(ent, "seq-mean-token-mean"), rel=1e-5)
    assert plain - got > 1e-3


@pytest.mark.parametrize("kind", ["kl", "abs", "mse", "k3"])
def test_kl_loss_with_each_estimator(kind):
    got = computed(config(kl_loss_coef=0.5, kl_penalty=kind))
    kl = [[kl_value(NEW[r][t] - REF[r][t], kind) for t in range(7)] for r in range(3)]
    assert got == pytest.approx(reference() + 0.5 * aggregate(kl, "seq-mean-token-mean"), rel=1e-5)
    assert abs(got - reference()) > 1e-3


def test_full_kl_loss_reads_the_strategys_exact_kl():
    cfg = config(kl_loss_coef=0.5, kl_penalty="full")
    mb = micro_batch()
    mb["full_kl"] = torch.tensor(ENTROPY)  # any per-token values: the loss must aggregate exactly these
    loss, _ = actor_loss(cfg, 0.5)(torch.tensor(NEW), None, mb)
    ent = [[ENTROPY[r][t] for t in range(7)] for r in range(3)]
    assert float(loss) == pytest.approx(reference() + 0.5 * aggregate(ent, "seq-mean-token-mean"), rel=1e-5)
    with pytest.raises(ValueError, match=r"exact KL `full_kl`.*with_full_kl=True"):
        actor_loss(cfg, 0.5)(torch.tensor(NEW), None, micro_batch())
    # full_forward reads the strategy's KL(ref || pi) instead
    mb["full_kl_forward"] = torch.tensor(ENTROPY) * 2
    forward, _ = actor_loss(config(kl_loss_coef=0.5, kl_penalty="full_forward"), 0.5)(
        torch.tensor(NEW), None, mb
    )
    assert float(forward) == pytest.approx(
        reference() + 1.0 * aggregate(ent, "seq-mean-token-mean"), rel=1e-5
    )


def test_the_controllers_coefficient_is_the_one_used():
    cfg = config(kl_loss_coef=0.5, kl_penalty="k3")
    assert computed(cfg, kl_coef=0.25) < computed(cfg, kl_coef=0.5)


def test_sequence_ratio_gradient_is_gspo():
    """With one advantage per row, the sequence-level loss's gradient is that of -A exp(mean log-ratio)."""
    cfg = config(ratio_level="sequence", pg_clip=10.0, loss_agg_mode="token-mean")
    adv = torch.tensor([[0.0, 1.5, 1.5, 0.0, 0.0, 1.5, 1.5]])
    mb = {
        "response_mask": torch.tensor([MASK[0]], dtype=torch.bool),
        "old_log_probs": torch.tensor([OLD[0]]),
        "advantages": adv,
    }
    new = torch.tensor([NEW[0]], requires_grad=True)
    actor_loss(cfg, 0.0)(new, None, mb)[0].backward()
    new2 = torch.tensor([NEW[0]], requires_grad=True)
    m = mb["response_mask"]
    (-1.5 * torch.exp((new2 - mb["old_log_probs"])[m].mean())).backward()
    torch.testing.assert_close(new.grad, new2.grad)
