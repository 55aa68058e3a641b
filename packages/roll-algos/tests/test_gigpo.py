"""GiGPO: a hand-derived example, a loop reference on random batches, and the text clustering of anchors."""

from __future__ import annotations

import difflib
import math
import re
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from roll_algos import (
    AdvantageConfig,
    AdvantageInputs,
    AlgosError,
    anchor_ids_from_texts,
    cluster_representatives,
    compute_advantages,
)


def example() -> AdvantageInputs:
    """Env group 0: trajectories A and B; env group 1: trajectory C. One row per step, 1 response token.

    A: steps on anchors 10, 20, 30 with rewards 0, 0, 1 (score 1)
    B: steps on anchors 10, 40, 20 with rewards 0, 0, 0 (score 0)
    C: one step on anchor 10 (another env group: must not join group 0's anchor 10), reward 1
    Rows are given shuffled.
    """
    #        traj group step anchor reward score
    rows = [
        (1, 0, 2, 30, 1.0, 1.0),
        (2, 0, 0, 10, 0.0, 0.0),
        (1, 0, 0, 10, 0.0, 1.0),
        (3, 1, 0, 10, 1.0, 1.0),
        (2, 0, 2, 20, 0.0, 0.0),
        (1, 0, 1, 20, 0.0, 1.0),
        (2, 0, 1, 40, 0.0, 0.0),
    ]
    col = list(zip(*rows, strict=True))
    b = len(rows)
    return AdvantageInputs(
        response_mask=torch.ones(b, 1, dtype=torch.bool),
        token_rewards=torch.zeros(b, 1, dtype=torch.float64),
        episode_scores=torch.tensor(col[5], dtype=torch.float64),
        step_rewards=torch.tensor(col[4], dtype=torch.float64),
        trajectory_ids=torch.tensor(col[0]),
        group_ids=torch.tensor(col[1]),
        step_ids=torch.tensor(col[2]),
        anchor_ids=torch.tensor(col[3]),
    )


def test_gigpo_hand_derived_mean_std():
    # Episode level (group 0, scores 1 and 0): mean 0.5, unbiased std sqrt(0.5) -> A_E = +-1/sqrt(2).
    # C is alone in group 1 -> A_E = 0.
    # Step returns with gamma 0.5: A: G = 0.25, 0.5, 1 ; B: 0, 0, 0 ; C: 1.
    # Anchor groups of env group 0: {10: A0=0.25, B0=0}, {20: A1=0.5, B2=0}, {30: A2}, {40: B1}.
    # Two-member groups normalise to +-1/sqrt(2) (any two distinct values do); singletons give 0.
    # (group 1, anchor 10) = {C0}: singleton -> 0.
    r = 1 / math.sqrt(2)
    out = compute_advantages("gigpo", example(), AdvantageConfig(gamma=0.5, epsilon=0.0))
    # rows: A2, B0, A0, C0, B2, A1, B1
    expected = [r + 0, -r - r, r + r, 0.0, -r - r, r + r, -r + 0]
    assert out.advantages[:, 0].tolist() == pytest.approx(expected)


def test_gigpo_hand_derived_mean_and_step_weight():
    # mean mode: A_E = +-0.5; anchor 10: 0.25 - 0.125 = 0.125 ; anchor 20: 0.5 - 0.25 = 0.25; omega = 0.5
    cfg = AdvantageConfig(gamma=0.5, gigpo_norm_mode="mean", gigpo_step_weight=0.5)
    out = compute_advantages("gigpo", example(), cfg)
    expected = [0.5, -0.5 - 0.0625, 0.5 + 0.0625, 0.0, -0.5 - 0.125, 0.5 + 0.125, -0.5]
    assert out.advantages[:, 0].tolist() == pytest.approx(expected)


def test_gigpo_unknown_anchor_contributes_zero():
    inp = example()
    inp = inp._replace(anchor_ids=torch.full_like(inp.anchor_ids, -1))
    out = compute_advantages("gigpo", inp, AdvantageConfig(gamma=0.5, epsilon=0.0))
    r = 1 / math.sqrt(2)
    assert out.advantages[:, 0].tolist() == pytest.approx([r, -r, r, 0.0, -r, r, -r])


def ref_gigpo(inp: AdvantageInputs, gamma: float, omega: float, mode: str, eps: float) -> list[float]:
    """Per-row advantage by loops: dict-based grouping, each trajectory once at the episode level."""
    b = inp.response_mask.shape[0]
    traj = [int(x) for x in inp.trajectory_ids]
    group = [int(x) for x in inp.group_ids]
    score = {traj[r]: float(inp.episode_scores[r]) for r in range(b)}
    tgroup = {traj[r]: group[r] for r in range(b)}

    def norm(vals, x):
        n = len(vals)
        mean = sum(vals) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
        return x - mean if mode == "mean" else (x - mean) / (std + eps)

    ret = {}
    for t in set(traj):
        rows = sorted((r for r in range(b) if traj[r] == t), key=lambda r: (int(inp.step_ids[r]), r))
        running = 0.0
        for r in reversed(rows):
            running = float(inp.step_rewards[r]) + gamma * running
            ret[r] = running
    out = []
    for r in range(b):
        ep = norm([score[u] for u in score if tgroup[u] == group[r]], score[traj[r]])
        a = int(inp.anchor_ids[r])
        step = 0.0
        if a != -1:
            step = norm(
                [ret[u] for u in range(b) if group[u] == group[r] and int(inp.anchor_ids[u]) == a], ret[r]
            )
        out.append(ep + omega * step)
    return out


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    gamma=st.sampled_from([1.0, 0.95, 0.5]),
    omega=st.sampled_from([1.0, 0.3]),
    mode=st.sampled_from(["mean_std", "mean"]),
    discrete=st.booleans(),
)
def test_gigpo_matches_reference(make_rows, seed, gamma, omega, mode, discrete):
    inp = make_rows(seed, num_groups=3, max_turns=4, discrete=discrete, num_anchors=2)
    cfg = AdvantageConfig(gamma=gamma, gigpo_step_weight=omega, gigpo_norm_mode=mode)
    out = compute_advantages("gigpo", inp, cfg)
    expected = torch.tensor(ref_gigpo(inp, gamma, omega, mode, 1e-6), dtype=torch.float64)
    torch.testing.assert_close(
        out.advantages, expected.unsqueeze(1) * inp.response_mask, rtol=1e-6, atol=1e-6
    )


def ref_representatives(texts, groups, threshold, similarity):
    """Brute force: text j heads a cluster iff no earlier head of its group matches it; text i belongs to
    the first head of its group, in input order, that matches it (itself if none)."""

    def matches(a, b):
        if a == b or threshold >= 1.0:
            return a == b
        if similarity == "difflib":
            return difflib.SequenceMatcher(None, b, a, autojunk=False).ratio() >= threshold
        ta, tb = set(re.findall(r"\w+|[^\w\s]", a)), set(re.findall(r"\w+|[^\w\s]", b))
        return (len(ta & tb) / len(ta | tb) if ta | tb else 1.0) >= threshold

    heads: list[int] = []
    out = []
    for i, text in enumerate(texts):
        head = next((j for j in heads if groups[j] == groups[i] and matches(texts[j], text)), i)
        if head == i:
            heads.append(i)
        out.append(head)
    return out


def same_cluster(reps) -> set[tuple[int, int]]:
    return {(i, j) for i in range(len(reps)) for j in range(len(reps)) if reps[i] == reps[j]}


def test_anchor_ids_from_texts():
    texts = [
        "you are at (1, 2); the goal is north",
        "you are at (1, 2); the goal is north",
        "you are at (1, 2) ; the goal is north!",
        "a completely different room",
        "you are at (1, 2); the goal is north",
    ]
    ids = [zlib.crc32(t.encode()) for t in texts]  # the caller's exact-state ids (any stable id)
    exact = anchor_ids_from_texts(texts, ids=ids)
    assert exact.dtype == np.int64 and (exact >= 0).all()
    assert exact[0] == exact[1] == exact[4] == ids[0] and exact[2] != exact[0]
    assert cluster_representatives(texts).tolist() == [0, 0, 2, 3, 0]
    fuzzy = anchor_ids_from_texts(texts, threshold=0.8, ids=ids)
    assert fuzzy[0] == fuzzy[1] == fuzzy[2] == fuzzy[4] != fuzzy[3]
    assert fuzzy.tolist() == [ids[0], ids[0], ids[0], ids[3], ids[0]]  # the representative's id
    by_ratio = anchor_ids_from_texts(texts, threshold=0.9, similarity="difflib", ids=ids)
    assert by_ratio[2] == by_ratio[0]
    # different env groups never merge, even for identical texts under a fuzzy threshold
    assert cluster_representatives(texts[:2], group_ids=[0, 1], threshold=0.5).tolist() == [0, 1]
    split = anchor_ids_from_texts(texts[:2], group_ids=[0, 1], threshold=0.5, ids=ids[:2])
    assert split[0] == split[1]  # same exact-state id -> same anchor; the estimator keys on the group too
    with pytest.raises(AlgosError, match="threshold"):
        anchor_ids_from_texts(texts, threshold=0.0, ids=ids)
    with pytest.raises(AlgosError, match="group ids"):
        anchor_ids_from_texts(texts, group_ids=[0], ids=ids)
    with pytest.raises(AlgosError, match="5 integer ids"):
        anchor_ids_from_texts(texts, ids=ids[:4])
    with pytest.raises(AlgosError, match="5 integer ids"):
        anchor_ids_from_texts(texts, ids=[0.5] * 5)
    with pytest.raises(TypeError, match="ids"):
        anchor_ids_from_texts(texts, None, 0.8)  # the ids are required: this module hashes nothing
    assert anchor_ids_from_texts([], ids=[]).tolist() == []


WORDS = ["go", "north", "south", "box", "wall", "(1, 2)", "(2, 1)", ";", "!", "the"]


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.lists(st.integers(0, len(WORDS) - 1), max_size=5), max_size=14),
    groups=st.lists(st.integers(0, 2), min_size=14, max_size=14),
    threshold=st.sampled_from([1.0, 0.9, 0.6, 0.34, 0.05]),
    similarity=st.sampled_from(["jaccard", "difflib"]),
)
def test_clustering_matches_brute_force(picks, groups, threshold, similarity):
    texts = [" ".join(WORDS[k] for k in pick) for pick in picks]
    groups = groups[: len(texts)]
    reps = cluster_representatives(texts, groups, threshold, similarity)
    expected = ref_representatives(texts, groups, threshold, similarity)
    assert reps.dtype == np.int64 and reps.tolist() == expected
    assert same_cluster(reps) == same_cluster(expected)  # which texts share a cluster
    assert all(groups[i] == groups[r] for i, r in enumerate(expected))  # clusters stay in their env group
    ids = np.arange(len(texts), dtype=np.int64) * 7919 - 10**12  # arbitrary caller ids, some negative
    anchors = anchor_ids_from_texts(texts, groups, threshold, similarity, ids=ids)
    assert anchors.tolist() == [int(ids[r]) for r in expected]


# Observation texts of `example()`'s anchors: 30 and 40 share three of five words (Jaccard 0.6, difflib
# ratio 2 * 6 / 14 = 0.857); every other pair shares none.
ANCHOR_TEXTS = {10: "a b c d", 20: "p q r s", 30: "x y z w", 40: "x y z v"}


def with_texts(inp: AdvantageInputs) -> AdvantageInputs:
    return inp._replace(anchor_texts=[ANCHOR_TEXTS[int(a)] for a in inp.anchor_ids])


@pytest.mark.parametrize(
    ("threshold", "similarity", "merged"),
    [(1.0, "jaccard", False), (0.7, "jaccard", False), (0.5, "jaccard", True), (0.8, "difflib", True)],
)
def test_gigpo_similar_anchors_hand_derived(threshold, similarity, merged):
    # Exact anchors: A2 (anchor 30, G = 1) and B1 (anchor 40, G = 0) are singletons -> step advantage 0.
    # Merged (similarity >= threshold): {A2: 1, B1: 0} is one anchor group -> +-1/sqrt(2) on top of A_E.
    r = 1 / math.sqrt(2)
    cfg = AdvantageConfig(
        gamma=0.5, epsilon=0.0, gigpo_anchor_threshold=threshold, gigpo_anchor_similarity=similarity
    )
    out = compute_advantages("gigpo", with_texts(example()), cfg)
    # rows: A2, B0, A0, C0, B2, A1, B1
    a2, b1 = (2 * r, -2 * r) if merged else (r, -r)
    assert out.advantages[:, 0].tolist() == pytest.approx([a2, -2 * r, 2 * r, 0.0, -2 * r, 2 * r, b1])


def test_gigpo_similar_anchors_need_texts_and_skip_unknown_anchors():
    cfg = AdvantageConfig(gamma=0.5, epsilon=0.0, gigpo_anchor_threshold=0.5)
    with pytest.raises(AlgosError, match=r"expected AdvantageInputs\.anchor_texts"):
        compute_advantages("gigpo", example(), cfg)
    # B1 (anchor 40) unknown: it joins no cluster, A2 stays a singleton, both step advantages are 0
    inp = with_texts(example())
    inp = inp._replace(anchor_ids=torch.where(inp.anchor_ids == 40, -1, inp.anchor_ids))
    r = 1 / math.sqrt(2)
    out = compute_advantages("gigpo", inp, cfg)
    assert out.advantages[:, 0].tolist() == pytest.approx([r, -2 * r, 2 * r, 0.0, -2 * r, 2 * r, -r])
    with pytest.raises(AlgosError, match="anchor_texts: expected 7 texts"):
        compute_advantages("gigpo", inp._replace(anchor_texts=["x"]), cfg)


def test_gigpo_options_are_validated():
    for bad in (
        {"gigpo_anchor_threshold": 0.0},
        {"gigpo_anchor_threshold": 1.5},
        {"gigpo_anchor_similarity": "cosine"},
        {"gigpo_step_weight": -1.0},
    ):
        with pytest.raises(AlgosError, match=next(iter(bad))):
            AdvantageConfig(**bad)
