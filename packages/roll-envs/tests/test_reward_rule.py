"""Garbage never pays: in every registered env, an answer with no valid action scores no more than the
worst valid action from the same state; `check_env` warns the author of an env that breaks the rule."""

from __future__ import annotations

import random
import warnings
from typing import Any, ClassVar

import numpy as np
import pytest
import roll_envs
from roll_envs import ActionOutcome, BaseEnv, GarbagePaysWarning, check_env
from roll_envs.checker_answers import replay, reward_after
from roll_envs.envs.builtins import BUILTINS

NO_ACTION = ("", "Left", "no tags at all", "<answer></answer>", "<answer>fly away</answer>", "<answer>")
"""Answers with no valid action in any built-in env (a bare action name has no answer tags)."""

GAME_WORST_REWARD = {
    "frozen_lake": 0.0,  # a move scores 0, the goal 1; a hole ends the episode with 0
    "sokoban": -1.1,  # a move costs 0.1; pushing a box off a target costs 1 more
    "webshop_lite": 0.0,  # 0 until the purchase, whose score lies in [0, 1]
    "four_choice": 0.0,  # a wrong letter scores 0, the right one 1
    "tictactoe": -0.1,  # a move onto a taken cell is refused and costs 0.1; a mover never loses on its move
    "CliffWalking": -100.0,  # a move costs 1, a step onto the cliff 100
    "Taxi": -10.0,  # a move costs 1, a wrong pickup or dropoff 10
    "FrozenLake": 0.0,  # Gymnasium's FrozenLake through the adapter: rewards 0 or 1
    "sandbox": 0.0,  # a tool call scores 0, a submitted answer 0 or 1
}
"""The worst reward one valid action can get, from each game's rules (docs/envs), not from our code."""

ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    env_id: (
        {"cliff_walking": "CliffWalking", "taxi": "Taxi", "gym_adapter": "FrozenLake"}.get(
            env_id, "sokoban" if "sokoban" in env_id else env_id
        ),
        {"gym_id": "FrozenLake-v1"}
        if env_id == "gym_adapter"
        else {"isolation": "none"}
        if env_id == "sandbox"
        else {},
    )
    for env_id in (b.id for b in BUILTINS)
}
"""Every built-in env -> (its game, the config it needs: gym_adapter plays Gymnasium's FrozenLake; the sandbox,
playing submits that run no call, needs no isolation, which a machine without namespaces refuses). The
built-ins, not `list_envs()`: test modules of other packages register test envs at collection."""


def explore(env: Any, seeds: range, turns: int) -> tuple[float, float, int]:
    """Walk from each seed, half the time greedily (pushes boxes onto targets, then often off them);
    at every state compare the best no-action answer with the worst valid action.

    Returns (largest garbage - worst valid over all states, worst valid reward seen, states seen).
    """
    excess, worst_seen, states = -np.inf, np.inf, 0
    for seed in seeds:
        rng, played = random.Random(seed), []
        for _ in range(turns):
            replay(env, seed, played)
            actions = [f"<answer>{a}</answer>" for a in env.valid_actions][:24]
            scored = [reward_after(env, seed, played, a) for a in actions]
            valid = [(r, a) for (r, ok), a in zip(scored, actions, strict=True) if ok]
            garbage_scored = [reward_after(env, seed, played, t) for t in NO_ACTION[:3]]
            assert not any(ok for _, ok in garbage_scored)
            garbage = max(r for r, _ in garbage_scored)
            worst = min(r for r, _ in valid)
            excess, worst_seen, states = max(excess, garbage - worst), min(worst_seen, worst), states + 1
            played.append(max(valid)[1] if rng.random() < 0.5 else rng.choice(valid)[1])
            _, _, terminated, truncated, _ = replay(env, seed, played)
            if terminated or truncated:
                break
    return excess, worst_seen, states


@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_the_default_penalty_covers_the_worst_action_of_the_game(env_id):
    game, config = ENVS[env_id]
    env = roll_envs.make(env_id, **config)
    env.reset(seed=0)
    _, reward, _, _, info = env.step("no answer here")
    assert not info["action_is_valid"] and reward == -env.config.format_penalty
    assert reward <= GAME_WORST_REWARD[game]


REACHES_THE_WORST = {
    "frozen_lake",
    "larger_sokoban",
    "webshop_lite",
    "four_choice",
    "tictactoe",
    "cliff_walking",
    "taxi",
    "gym_adapter",
}
"""One env per game whose walks reach the game's worst action (6x6 Sokoban rooms rarely get a box onto
a target by chance; their rewards and penalty are those of larger_sokoban)."""


@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_garbage_never_scores_more_than_a_valid_action(env_id):
    game, config = ENVS[env_id]
    env = roll_envs.make(env_id, max_steps=60, **config)
    excess, worst_seen, states = explore(env, range(8), turns=25)
    assert states >= 8
    assert excess <= 1e-9, f"{env_id}: garbage beats a valid action by {excess}"
    assert worst_seen >= GAME_WORST_REWARD[game] - 1e-9  # the table of worst rewards is right
    if env_id in REACHES_THE_WORST:  # and the rule was tested where it is tightest
        assert worst_seen == pytest.approx(GAME_WORST_REWARD[game])


class CostlyMoves(BaseEnv):
    """A corridor where every move costs 1 and the default format_penalty (0) is left as it is."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["text"], "render_fps": 4}

    @property
    def instruction(self) -> str:
        return (
            "Walk right to the end of the corridor. Answer <answer>Right</answer> or <answer>Left</answer>."
        )

    @property
    def valid_actions(self) -> list[str]:
        return ["Left", "Right"]

    def new_episode(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.pos = int(rng.integers(3))

    def apply_action(self, action: str) -> ActionOutcome:
        self.pos = max(0, self.pos + (1 if action == "Right" else -1))
        return ActionOutcome(-1.0, self.pos >= 5, True)

    def text_observation(self) -> str:
        return "_" * self.pos + "P" + "_" * (5 - self.pos)

    def is_success(self) -> bool:
        return self.pos >= 5


def test_check_env_warns_when_garbage_pays_and_says_which_penalty_fixes_it():
    with pytest.warns(GarbagePaysWarning, match=r"scores 0, more than the valid action .* \(-1\)") as caught:
        assert check_env(CostlyMoves()) == []
    assert "format_penalty to at least 1 (now 0)" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GarbagePaysWarning)
        assert check_env(CostlyMoves(format_penalty=1.0)) == []  # garbage costs as much as a move: fine


def test_check_env_warns_for_a_builtin_whose_penalty_is_lowered():
    with pytest.warns(GarbagePaysWarning, match=r"valid action .* \(-100\).*at least 100 \(now 0\)"):
        check_env(roll_envs.make("cliff_walking", format_penalty=0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", GarbagePaysWarning)
        check_env(roll_envs.make("cliff_walking"))
