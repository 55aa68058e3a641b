"""Customise a run from Python: your own env, with your own reward shaping, trained by roll.

    uv run python examples/custom_pipeline/train_shaped_frozen_lake.py max_steps=40

`StepCostFrozenLake` is FrozenLake with a cost per move (shaping towards short paths), its config a
pydantic model with one more field. It is registered with `roll_envs.register` in this script, so the
run uses the in-process backend (`cluster.backend=local`): Ray's actors would not run this script's
registration. For Ray, ship the env as a package with a `roll_envs.envs` entry point
(see examples/custom_env) and every worker finds it.
"""

from __future__ import annotations

import sys
from typing import Any

import roll_envs
from pydantic import Field
from roll_envs.envs.frozen_lake import FrozenLakeConfig, FrozenLakeEnv
from roll_pipeline import AgenticPipeline
from roll_pipeline.config.compose import compose


class StepCostConfig(FrozenLakeConfig):
    step_cost: float = Field(0.05, ge=0.0, le=1.0, description="reward subtracted per turn")


class StepCostFrozenLake(FrozenLakeEnv):
    """FrozenLake whose every turn costs `step_cost`: a reward-shaped variant."""

    config_cls = StepCostConfig
    # its own `step` subtracts a constant: still in-memory and drawing nothing, so it declares again the hosting
    # hints it would otherwise lose by overriding `step` (roll_envs.hints; `roll-envs check` shows them)
    owns_random_state = True
    never_blocks = True

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward - self.config.step_cost, terminated, truncated, info


def main(overrides: list[str]) -> float:
    roll_envs.register(
        "step_cost_frozen_lake", StepCostFrozenLake, description="FrozenLake with a cost per turn"
    )
    config = compose(
        None,
        None,
        [
            "exp_name=step_cost_frozen_lake",
            "cluster.backend=local",
            "custom_envs.FrozenLake.env_type=step_cost_frozen_lake",
            "+custom_envs.FrozenLake.env_config.step_cost=0.05",
            *overrides,
        ],
    )
    pipeline = AgenticPipeline(config, progress=False)
    try:
        summary = pipeline.run()
    finally:
        pipeline.close()
    print(f"[example] validation success {summary.val_success(0):.3f} -> {summary.val_success(-1):.3f}")
    return summary.val_success(-1)


if __name__ == "__main__":
    main(sys.argv[1:])
