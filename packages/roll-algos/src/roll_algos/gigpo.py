"""GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training").

A(row) = A_E(trajectory) + omega * A_S(row), spread over the row's response tokens, where
- A_E: the episode score normalised within the env group, each trajectory counted once;
- A_S: the row's discounted step return G(k) = r(k) + gamma G(k+1) (over env steps), normalised within
  its anchor-state group: the rows of the same env group whose turn acted on the same observation
  (equal `anchor_ids`). A singleton anchor group, and a row with anchor_id -1 (unknown), contribute 0.
Normalisation: `mean_std` or `mean` (config.gigpo_norm_mode, falling back to config.norm_mode).

Anchors are grouped by exact equality of `anchor_ids`: the caller's ids of the observed states (roll's
pipeline uses each turn's `anchor_id`, a stable hash of its state key; this module hashes nothing). For
similarity-based grouping, `cluster_representatives(texts, group_ids, threshold)` gives each text its
cluster's representative, and `anchor_ids_from_texts(texts, group_ids, threshold, ids=exact_ids)` gives
it the representative's id; with `config.gigpo_anchor_threshold < 1` the estimator does this itself on
`inputs.anchor_texts` (`similar_anchor_ids`, similarity `config.gigpo_anchor_similarity`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

import numpy as np
import torch

from roll_algos.advantages import AdvantageConfig, AdvantageEstimator, AdvantageInputs, AdvantageOutput
from roll_algos.errors import AlgosError
from roll_algos.estimators import spread_over_tokens, step_returns, trajectory_normalized_scores
from roll_algos.registry import register_estimator
from roll_algos.rewards import group_index, group_normalize

__all__ = [
    "UNKNOWN_ANCHOR",
    "anchor_ids_from_texts",
    "cluster_representatives",
    "gigpo",
    "gigpo_step_advantages",
    "similar_anchor_ids",
]

UNKNOWN_ANCHOR = -1
_WORD = re.compile(r"\w+|[^\w\s]")


def gigpo_step_advantages(
    returns: torch.Tensor, group_ids: torch.Tensor, anchor_ids: torch.Tensor, mode: str, eps: float
) -> torch.Tensor:
    """A_S [B]: step returns [B] normalised within (group_id, anchor_id) groups; 0 for anchor -1 and singletons."""
    out = torch.zeros_like(returns)
    known = anchor_ids != UNKNOWN_ANCHOR
    if bool(known.any()):
        index, _ = group_index(group_ids[known], anchor_ids[known])
        out[known] = group_normalize(returns[known], index, mode, eps)
    return out


def similar_anchor_ids(inputs: AdvantageInputs, threshold: float, similarity: str) -> torch.Tensor:
    """`anchor_ids` [B] with the anchors of similar `anchor_texts` of one env group merged onto their
    cluster representative's id (`anchor_ids_from_texts`); rows with anchor -1 stay -1 and join nothing."""
    if inputs.anchor_texts is None:
        raise AlgosError(
            f"gigpo with gigpo_anchor_threshold={threshold} < 1: expected AdvantageInputs.anchor_texts (the"
            " observation text of each row), got None. Pass the texts, or set gigpo_anchor_threshold=1.0."
        )
    ids = inputs.anchor_ids
    known = (ids != UNKNOWN_ANCHOR).nonzero().flatten().tolist()
    merged = anchor_ids_from_texts(
        [inputs.anchor_texts[i] for i in known],
        inputs.group_ids[known].tolist(),
        threshold,
        similarity,
        ids=ids[known].cpu().numpy(),
    )
    out = ids.clone()
    out[known] = torch.from_numpy(merged).to(device=ids.device, dtype=ids.dtype)
    return out


@register_estimator(
    AdvantageEstimator.GIGPO,
    level="step",
    group_based=True,
    options=("gigpo_step_weight", "gigpo_norm_mode", "gigpo_anchor_threshold", "gigpo_anchor_similarity"),
)
def gigpo(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """GiGPO: episode advantage (env group) + omega * step advantage (anchor-state group)."""
    mode = config.gigpo_norm_mode or config.norm_mode
    episode = trajectory_normalized_scores(inputs, mode, config.epsilon)
    ret = step_returns(inputs, config.gamma)
    anchors = inputs.anchor_ids
    if config.gigpo_anchor_threshold < 1.0:
        anchors = similar_anchor_ids(inputs, config.gigpo_anchor_threshold, config.gigpo_anchor_similarity)
    step = gigpo_step_advantages(ret, inputs.group_ids, anchors, mode, config.epsilon)
    adv = spread_over_tokens(episode + config.gigpo_step_weight * step, inputs.response_mask)
    return AdvantageOutput(adv, adv.clone())


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def cluster_representatives(
    texts: Sequence[str],
    group_ids: Sequence[int] | np.ndarray | None = None,
    threshold: float = 1.0,
    similarity: str = "jaccard",
) -> np.ndarray:
    """For each observation text, the index of its cluster's representative, clustering similar texts
    of the same env group.

    Greedy clustering in input order, per env group: a text joins the first existing cluster whose
    representative (its first member) is the same text or has similarity >= threshold, else it starts a
    new cluster and is its representative. threshold=1.0 is exact equality (no comparisons).

    Args:
        texts: N observation texts.
        group_ids: N env group ids (None: all in one group). Only texts of one group are compared.
        threshold: in (0, 1].
        similarity: `jaccard` (token sets, words and punctuation) or `difflib` (SequenceMatcher ratio).
    Returns:
        int64 array [N]: out[i] <= i is the index of text i's representative (out[r] == r for one).
    """
    if not 0 < threshold <= 1:
        raise AlgosError(f"cluster_representatives: expected threshold in (0, 1], got {threshold}.")
    if similarity not in {"jaccard", "difflib"}:
        raise AlgosError(
            f"cluster_representatives: similarity must be 'jaccard' or 'difflib', got {similarity!r}."
        )
    groups = [0] * len(texts) if group_ids is None else [int(g) for g in group_ids]
    if len(groups) != len(texts):
        raise AlgosError(
            f"cluster_representatives: expected {len(texts)} group ids (one per text), got {len(groups)}."
        )
    out = np.empty(len(texts), dtype=np.int64)
    if threshold >= 1.0:
        first: dict[tuple[int, str], int] = {}
        for i, (text, group) in enumerate(zip(texts, groups, strict=True)):
            out[i] = first.setdefault((group, text), i)
        return out
    clusters: dict[int, list[tuple[int, str, frozenset[str]]]] = {}
    for i, (text, group) in enumerate(zip(texts, groups, strict=True)):
        reps = clusters.setdefault(group, [])
        tokens = frozenset(_WORD.findall(text)) if similarity == "jaccard" else frozenset()
        out[i] = i
        for rep_index, rep, rep_tokens in reps:
            score = (
                _jaccard(tokens, rep_tokens)
                if similarity == "jaccard"
                else difflib.SequenceMatcher(None, text, rep, autojunk=False).ratio()
            )
            if rep == text or score >= threshold:
                out[i] = rep_index
                break
        else:
            reps.append((i, text, tokens))
    return out


def anchor_ids_from_texts(
    texts: Sequence[str],
    group_ids: Sequence[int] | np.ndarray | None = None,
    threshold: float = 1.0,
    similarity: str = "jaccard",
    *,
    ids: Sequence[int] | np.ndarray,
) -> np.ndarray:
    """GiGPO anchor ids that merge similar observations of the same env group.

    `ids` are the caller's exact-state ids of the texts (in roll, each turn's `anchor_id`, a stable hash
    of its state key); each text gets the id of its cluster's representative (`cluster_representatives`,
    same arguments), so the rows of one cluster share an anchor id. No hashing happens here.

    Returns:
        int64 array [N]: `ids[cluster_representatives(texts, group_ids, threshold, similarity)]`.
    """
    exact = np.asarray(ids)
    if exact.shape != (len(texts),) or not (exact.size == 0 or np.issubdtype(exact.dtype, np.integer)):
        raise AlgosError(
            f"anchor_ids_from_texts: expected {len(texts)} integer ids (one per text), got shape "
            f"{exact.shape} of {exact.dtype}."
        )
    return exact.astype(np.int64)[cluster_representatives(texts, group_ids, threshold, similarity)]
