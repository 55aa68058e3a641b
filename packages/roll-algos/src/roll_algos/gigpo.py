"""GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training").

A(row) = A_E(trajectory) + omega * A_S(row), spread over the row's response tokens, where
- A_E: the episode score normalised within the env group, each trajectory counted once;
- A_S: the row's discounted step return G(k) = r(k) + gamma G(k+1) (over env steps), normalised within
  its anchor-state group: the rows of the same env group whose turn acted on the same observation
  (equal `anchor_ids`). A singleton anchor group, and a row with anchor_id -1 (unknown), contribute 0.
Normalisation: `mean_std` or `mean` (config.gigpo_norm_mode, falling back to config.norm_mode).

Anchors are grouped by exact equality of `anchor_ids`. For similarity-based grouping, map texts to
anchor ids first with `anchor_ids_from_texts(texts, group_ids, threshold)`.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Sequence

import numpy as np
import torch

from roll_algos.advantages import (
    AdvantageConfig,
    AdvantageEstimator,
    AdvantageInputs,
    AdvantageOutput,
    register_estimator,
)
from roll_algos.errors import AlgosError
from roll_algos.estimators import spread_over_tokens, step_returns, trajectory_normalized_scores
from roll_algos.rewards import group_index, group_normalize

__all__ = ["UNKNOWN_ANCHOR", "anchor_id", "anchor_ids_from_texts", "gigpo", "gigpo_step_advantages"]

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


@register_estimator(AdvantageEstimator.GIGPO)
def gigpo(inputs: AdvantageInputs, config: AdvantageConfig) -> AdvantageOutput:
    """GiGPO: episode advantage (env group) + omega * step advantage (anchor-state group)."""
    mode = config.gigpo_norm_mode or config.norm_mode
    episode = trajectory_normalized_scores(inputs, mode, config.epsilon)
    ret = step_returns(inputs, config.gamma)
    step = gigpo_step_advantages(ret, inputs.group_ids, inputs.anchor_ids, mode, config.epsilon)
    adv = spread_over_tokens(episode + config.gigpo_step_weight * step, inputs.response_mask)
    return AdvantageOutput(adv, adv.clone())


def anchor_id(text: str) -> int:
    """Stable 63-bit non-negative hash of an observation text (same across processes and runs)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def anchor_ids_from_texts(
    texts: Sequence[str],
    group_ids: Sequence[int] | np.ndarray | None = None,
    threshold: float = 1.0,
    similarity: str = "jaccard",
) -> np.ndarray:
    """Map observation texts to GiGPO anchor ids, merging similar observations of the same env group.

    Greedy clustering in input order, per env group: a text joins the first existing cluster whose
    representative (its first member) has similarity >= threshold, else starts a new cluster. The id
    is `anchor_id(representative)`. threshold=1.0 is exact equality (fast path, no comparisons).

    Args:
        texts: N observation texts.
        group_ids: N env group ids (None: all in one group). Only texts of one group are compared.
        threshold: in (0, 1].
        similarity: `jaccard` (token sets, words and punctuation) or `difflib` (SequenceMatcher ratio).
    Returns:
        int64 array [N] of anchor ids (never -1).
    """
    if not 0 < threshold <= 1:
        raise AlgosError(f"anchor_ids_from_texts: expected threshold in (0, 1], got {threshold}.")
    if similarity not in {"jaccard", "difflib"}:
        raise AlgosError(
            f"anchor_ids_from_texts: similarity must be 'jaccard' or 'difflib', got {similarity!r}."
        )
    groups = [0] * len(texts) if group_ids is None else [int(g) for g in group_ids]
    if len(groups) != len(texts):
        raise AlgosError(
            f"anchor_ids_from_texts: expected {len(texts)} group ids (one per text), got {len(groups)}."
        )
    out = np.empty(len(texts), dtype=np.int64)
    if threshold >= 1.0:
        for i, text in enumerate(texts):
            out[i] = anchor_id(text)
        return out
    clusters: dict[int, list[tuple[str, frozenset[str]]]] = {}
    for i, (text, group) in enumerate(zip(texts, groups, strict=True)):
        reps = clusters.setdefault(group, [])
        tokens = frozenset(_WORD.findall(text)) if similarity == "jaccard" else frozenset()
        chosen = text
        for rep, rep_tokens in reps:
            score = (
                _jaccard(tokens, rep_tokens)
                if similarity == "jaccard"
                else difflib.SequenceMatcher(None, text, rep, autojunk=False).ratio()
            )
            if rep == text or score >= threshold:
                chosen = rep
                break
        else:
            reps.append((text, tokens))
        out[i] = anchor_id(chosen)
    return out
