"""`owns_random_state`: the built-ins declare it, the adapters do not, and `check_env` checks the declaration
(a declared env that draws from `random`/`np.random` fails; an undeclared one that never does is told it
may declare)."""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest
import roll_envs
from roll_envs import CheckEnvError, IsolatedEnv
from roll_envs.adapters.gem import GemEnv
from roll_envs.adapters.gym import GymAdapterEnv
from roll_envs.adapters.reasoning_gym import ReasoningGymEnv
from roll_envs.adapters.textarena import TextArenaEnv
from roll_envs.base import ActionOutcome
from roll_envs.envs.frozen_lake import FrozenLakeEnv
from roll_envs.hints import declares_own_random_state
from roll_envs.random_state import EnvRandomState

NOTE = "declare `owns_random_state = True`"
BUILTIN_IDS = ["four_choice", "tictactoe", "frozen_lake", "sokoban", "webshop_lite"]


class OwnRng(FrozenLakeEnv):
    """Draws only from the episode's generator (FrozenLake's code), but does not declare it."""

    owns_random_state = False


class DeclaredOwnRng(OwnRng):
    owns_random_state = True


class DeclaredButGlobal(FrozenLakeEnv):
    """Declares its own random state, but steps on the process-wide generators."""

    owns_random_state = True

    def apply_action(self, action: str) -> ActionOutcome:
        random.random(), np.random.randint(2)
        return super().apply_action(action)


class UndeclaredGlobal(DeclaredButGlobal):
    owns_random_state = False


@pytest.mark.parametrize("env_id", BUILTIN_IDS)
def test_builtins_declare_and_keep_to_it(env_id, caplog):
    config = {"isolation": "none"} if env_id == "sandbox" else {}  # plays submits only: runs no call
    env = roll_envs.make(env_id, **config)
    assert declares_own_random_state(env)
    assert roll_envs.check_env(env, seeds=(0, 1), make_env=lambda: roll_envs.make(env_id, **config)) == []
    assert NOTE not in caplog.text


@pytest.mark.parametrize("cls", [GemEnv, TextArenaEnv, ReasoningGymEnv, GymAdapterEnv])
def test_adapters_do_not_declare(cls):
    assert cls.owns_random_state is False


def test_an_undeclared_env_that_never_draws_is_told_it_may_declare(caplog):
    with caplog.at_level(logging.WARNING, logger="roll_envs.checker_random"):
        assert roll_envs.check_env(OwnRng(), seeds=(0, 1)) == []
    assert "OwnRng never drew from the process-wide" in caplog.text and NOTE in caplog.text


def test_an_undeclared_env_on_the_globals_gets_no_note(caplog):
    assert roll_envs.check_env(UndeclaredGlobal(), seeds=(0, 1)) == []
    assert NOTE not in caplog.text


def test_a_declared_env_that_keeps_to_it_passes_quietly(caplog):
    assert roll_envs.check_env(DeclaredOwnRng(), seeds=(0, 1)) == []
    assert NOTE not in caplog.text


def test_a_declared_env_on_the_globals_fails_naming_the_declaration_and_the_fix():
    with pytest.raises(CheckEnvError) as caught:
        roll_envs.check_env(DeclaredButGlobal(), seeds=(0, 1))
    message = str(caught.value)
    assert "declares owns_random_state = True" in message
    assert "set owns_random_state = False" in message


def test_isolated_env_notes_draws_from_the_globals():
    quiet, noisy = IsolatedEnv(OwnRng()), IsolatedEnv(UndeclaredGlobal())
    for env in (quiet, noisy):
        env.reset(seed=3)
        env.step("<answer>Left</answer>")
    assert not quiet.drew_from_globals
    assert noisy.drew_from_globals


def test_fingerprint_changes_with_a_draw_only():
    state = EnvRandomState(5)
    before = state.fingerprint()
    assert state.run(lambda: None) is None and state.fingerprint() == before
    state.run(np.random.random)
    assert state.fingerprint() != before
    assert EnvRandomState(5).fingerprint() == before
