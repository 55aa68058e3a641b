"""Sokoban family: SimpleSokoban (6x6, 1 box), LargerSokoban (8x8, 2 boxes), SokobanDifferentGridVocab."""

from roll_envs.sokoban.env import SokobanEnv
from roll_envs.sokoban.generator import Room, generate_room
from roll_envs.sokoban.rules import ALTERNATIVE_GRID, DEFAULT_GRID, SokobanConfig

__all__ = ["ALTERNATIVE_GRID", "DEFAULT_GRID", "Room", "SokobanConfig", "SokobanEnv", "generate_room"]
