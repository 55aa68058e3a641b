"""Deprecated: the old path of `roll_envs.envs.webshop`, importable until roll-envs 0.3.0."""

from roll_envs._moved import alias_module

alias_module(__name__, "roll_envs.envs.webshop")
