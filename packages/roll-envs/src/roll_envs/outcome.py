"""What one action did (`ActionOutcome`) and how the per-step metrics of `BaseEnv` aggregate over an episode."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Aggregation = Literal["mean", "sum", "last", "max", "min"]
"""How a per-step metric aggregates over an episode."""

BASE_METRICS: Mapping[str, Aggregation] = {
    "success": "last",
    "action_is_valid": "mean",
    "action_is_refused": "mean",
    "action_is_effective": "mean",
    "num_actions": "sum",
}
"""The metrics every `BaseEnv` reports at each step, and how each aggregates over an episode."""


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    """The result of applying one action: its reward, whether it ended the episode, whether it changed the
    state, and whether the env refused it.

    `refused`: the action was read and is an action of the game, but the rules do not allow it in this
    state (an occupied TicTacToe cell); the env left the state unchanged. The turn stops at a refused
    action (the actions after it are not applied), the action is not in `executed_actions`, and the step's
    info says `action_is_refused`. Its `reward` and `terminated` count (an env may penalise a refused move
    or end the game on it); its `effective` does not. The format penalty is not applied: the answer was
    read. A legal move that merely does nothing (walking into a wall) is not refused but ineffective.
    `rewards` gives several players' rewards at once (a multi-player env: see `BaseEnv.players`).
    """

    reward: float = 0.0
    terminated: bool = False
    effective: bool = True
    refused: bool = False
    rewards: Mapping[str, float] | None = None
    """Several players: every player's reward for this action (a win: the winner +1, the loser -1); None:
    `reward` is the mover's."""

    @classmethod
    def refuse(cls, reward: float = 0.0, terminated: bool = False) -> ActionOutcome:
        """The outcome of a refused action (see the class docstring)."""
        return cls(reward, terminated, False, True)
