"""Example roll-envs plugin: a number-guessing game registered through the `roll_envs.envs` entry point."""

from guess_number_env.env import GuessNumberConfig, GuessNumberEnv

__all__ = ["GuessNumberConfig", "GuessNumberEnv"]
