"""Shared test helpers of roll-algos: a random multi-turn row batch builder (session fixture), `plug_in`,
which installs a plugin module under a registry's entry-point group, and `scratch_names`, the names a test
registers."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch
from roll_algos import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, AdvantageInputs
from roll_algos.plugins import Registry


def build_rows(
    seed: int,
    num_groups: int = 2,
    max_group_size: int = 4,
    max_turns: int = 3,
    width: int = 8,
    discrete: bool = False,
    num_anchors: int = 3,
    dtype: torch.dtype = torch.float64,
) -> AdvantageInputs:
    """Random rows of multi-turn trajectories, rows shuffled, ids non-contiguous (like a real batch).

    Each row has a prompt prefix then a contiguous response of 0..width-1 tokens; the turn's reward sits
    on its last response token. Scores are sums of step rewards; discrete=True draws rewards in {0, 1}
    (many ties, groups with zero std).
    """
    rng = np.random.default_rng(seed)
    rows = []
    traj_id = 1000
    for g in range(num_groups):
        group_id = 7 * g + 3
        for _ in range(int(rng.integers(1, max_group_size + 1))):
            traj_id += int(rng.integers(1, 5))
            turns = int(rng.integers(1, max_turns + 1))
            rewards = rng.integers(0, 2, turns).astype(float) if discrete else rng.normal(size=turns).round(3)
            for k in range(turns):
                prompt = int(rng.integers(1, width // 2))
                resp = int(rng.integers(0, width - prompt + 1))
                anchor = int(rng.integers(-1, num_anchors)) if k > 0 else 0
                rows.append(
                    (traj_id, group_id, k, anchor, prompt, resp, float(rewards[k]), float(rewards.sum()))
                )
    rng.shuffle(rows)
    b = len(rows)
    mask = torch.zeros(b, width, dtype=torch.bool)
    token_rewards = torch.zeros(b, width, dtype=dtype)
    for r, (_, _, _, _, p, q, rew, _) in enumerate(rows):
        mask[r, p : p + q] = True
        if q:
            token_rewards[r, p + q - 1] = rew
    col = list(zip(*rows, strict=True))
    return AdvantageInputs(
        response_mask=mask,
        token_rewards=token_rewards,
        episode_scores=torch.tensor(col[7], dtype=dtype),
        step_rewards=torch.tensor(col[6], dtype=dtype),
        trajectory_ids=torch.tensor(col[0], dtype=torch.long),
        group_ids=torch.tensor(col[1], dtype=torch.long),
        step_ids=torch.tensor(col[2], dtype=torch.long),
        anchor_ids=torch.tensor(col[3], dtype=torch.long),
        values=torch.tensor(rng.normal(size=(b, width)), dtype=dtype),
        old_log_probs=torch.tensor(-rng.random((b, width)) * 3, dtype=dtype),
        ref_log_probs=torch.tensor(-rng.random((b, width)) * 3, dtype=dtype),
    )


@pytest.fixture(scope="session")
def make_rows() -> Callable[..., AdvantageInputs]:
    """The `build_rows` builder."""
    return build_rows


@pytest.fixture
def plug_in(tmp_path, monkeypatch) -> Callable[[Registry, str, str], None]:
    """`plug_in(registry, module, source)`: module `module` of `source` is the entry point `plugged` of
    `registry`'s group, beside `broken`, whose module does not exist; the registry loads them on its next miss."""

    def install(registry: Registry, module: str, source: str) -> None:
        (tmp_path / f"{module}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, module, raising=False)
        points = [
            importlib.metadata.EntryPoint("plugged", module, registry.group),
            importlib.metadata.EntryPoint("broken", "no_such_module_anywhere", registry.group),
        ]
        monkeypatch.setattr(
            importlib.metadata, "entry_points", lambda group: points if group == registry.group else []
        )
        monkeypatch.setattr(registry, "plugins_loaded", False)
        monkeypatch.setattr(registry, "plugin_errors", {})

    return install


@pytest.fixture
def scratch_names() -> Iterator[list[str]]:
    """Names a test registers (an estimator or a policy loss); removed from both registries afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        ADVANTAGE_ESTIMATORS.pop(name, None)
        POLICY_LOSSES.pop(name, None)
