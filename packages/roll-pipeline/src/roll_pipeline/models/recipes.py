"""The recipes of the `builtin:NAME` models: tiny models built offline.

`builtin:tiny-frozen-lake` is a Qwen2-architecture model of a few hundred thousand parameters with a
word-level tokenizer whose vocabulary covers the built-in envs' text. It is built once (about half a
minute on 2 cores), deterministically, into the cache (`$ROLL_CACHE_DIR`, default `~/.cache/roll`),
then loaded with `from_pretrained(path)` like any hub model.

Its build includes a short *format warm-up*: supervised steps on FrozenLake observations answered
with `<answer>DIRECTION</answer>` where DIRECTION is drawn uniformly at random. The model learns the
answer format and nothing about the board (its greedy policy plays one fixed direction), the role
instruction-tuning plays for a real pretrained model. Everything it knows about the task comes from RL.
`builtin:tiny-frozen-lake-sighted` (the default config's model) also learns to *see*: a second set of
warm-up prompts asks what lies next to P on a board and is answered with the four neighbouring cells
(`perception_warmup_examples`), the kind of grid reading a pretrained LLM brings to RL. It is never told
which move is good; RL alone still has to learn that holes and edges matter and where the goal is.
`builtin:tiny-sokoban` warms up on Sokoban rooms instead, `builtin:tiny-agentic` on episodes of both
envs in turn (for runs with a FrozenLake and a Sokoban tag); the tokenizer is the same for all.
`builtin:tiny-four-choice`, the model of the learning test (tests/test_learning.py), warms up in seconds on the
one-turn `four_choice` env: lights answered with a uniformly random letter whatever the colour (so it starts at
chance), and lights asked `which colour` answered `<answer>COLOUR</answer>` (it reads the light, as any
pretrained LLM does); which letter each colour wants is left to RL. `builtin:tiny-tictactoe` warms up on
TicTacToe boards of both seats answered with a random cell (the two-player example).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TINY_FROZEN_LAKE_INSTRUCTION = "P you, G goal, O hole. <answer>Left</answer> Down Right Up"
"""A short FrozenLake system prompt (18 tokens where the env's own has about 90): the one of
`tiny-frozen-lake-history`; the other tiny models use `NO_INSTRUCTION`."""


@dataclass(frozen=True)
class WarmupEnv:
    """One env of a builtin model's format warm-up: its registry id, config and system prompt."""

    env_type: str
    env_config: dict[str, Any] = field(default_factory=dict)
    instruction: str | None = None
    """System prompt of the warm-up prompts: None: the env's own; "": none (the observation alone)."""


@dataclass(frozen=True)
class TinyModelSpec:
    """How a builtin tiny model is built."""

    envs: tuple[WarmupEnv, ...]
    """The warm-up's envs; its episodes take turns among them (the first, the second, ..., the first)."""
    warmup_steps: int = 300
    warmup_examples: int = 4000
    warmup_lr: float = 3e-3
    """Peak learning rate of the warm-up (cosine to a tenth of it)."""
    seed: int = 0
    sliding_window: int | None = None
    """Attention window of every layer (None: full attention), see `HISTORY_WINDOW`."""
    history_prompts: bool = False
    """Warm-up prompts keep the episode's earlier turns (as prompts with max_history_turns: null do)."""
    num_heads: int = 4
    num_kv_heads: int = 2
    perception_examples: int = 0
    """Warm-up examples that ask about the first warm-up env's observations (`perception_warmup_examples`): what
    lies next to P on a FrozenLake board, which colour a four_choice light shows."""
    revision: int = 3
    """Part of the cache folder's name: a spec whose build changes gets a new revision (old folders stay valid)."""


HISTORY_WINDOW = 32
"""Sliding attention window of the history model: about one FrozenLake turn (a 4x4 board message is ~27
tokens). Measured (docs/tiny_model_findings.md): with full attention over whole-history prompts the
2-layer model did not learn, even with supervised labels, to read the latest board in 300 steps (held-out
accuracy of an optimal move 0.33); with this window it reached 0.67 in 50 steps, faster than the default
model on single-board prompts."""

NO_INSTRUCTION = ""
"""The tiny models' system prompt: none, the prompt is the observation alone. A model trained from scratch
reads no English, and a constant prompt carries no information; measured (docs/tiny_model_findings.md), the
18-token `TINY_FROZEN_LAKE_INSTRUCTION` delayed the escape from the initial plateau of a supervised
board-reading probe from 25-50 to 75-150 steps (varying with the data order), and doubled every prompt."""

FROZEN_LAKE_WARMUP = WarmupEnv("frozen_lake", instruction=NO_INSTRUCTION)
SOKOBAN_WARMUP = WarmupEnv("sokoban", instruction=NO_INSTRUCTION)
BOARD_READING_HEADS = {"num_heads": 8, "num_kv_heads": 4}
"""Eight attention heads of 16 dimensions instead of four of 32, at the same cost: held-out accuracy of the
supervised probe 0.84-0.87 after 300 steps on three data orders, against 0.78-0.84 with four."""

BUILTIN_MODELS: dict[str, TinyModelSpec] = {
    "tiny-frozen-lake": TinyModelSpec(envs=(FROZEN_LAKE_WARMUP,), **BOARD_READING_HEADS, revision=4),
    # for prompts that keep the whole conversation (max_history_turns: null, trajectory-wise samples);
    # warmed up with TINY_FROZEN_LAKE_INSTRUCTION, the build its measured runs used
    "tiny-frozen-lake-history": TinyModelSpec(
        envs=(WarmupEnv("frozen_lake", instruction=TINY_FROZEN_LAKE_INSTRUCTION),),
        sliding_window=HISTORY_WINDOW,
        history_prompts=True,
    ),
    "tiny-frozen-lake-sighted": TinyModelSpec(
        envs=(FROZEN_LAKE_WARMUP,),
        **BOARD_READING_HEADS,
        warmup_steps=2000,
        warmup_lr=5e-4,
        perception_examples=4000,
        revision=5,
    ),
    "tiny-sokoban": TinyModelSpec(envs=(SOKOBAN_WARMUP,), **BOARD_READING_HEADS, revision=4),
    # FrozenLake and Sokoban in one run (tags), warmed up on both, episodes interleaved
    "tiny-agentic": TinyModelSpec(
        envs=(FROZEN_LAKE_WARMUP, SOKOBAN_WARMUP), **BOARD_READING_HEADS, revision=4
    ),
    # four distinct prompts, short answers: 200 steps learn the format and the colours (about 10 s). Built on the
    # format alone, the model was still at chance (0.23 greedy) after 40 RL steps at lr 1e-3, and at 3e-3 it
    # lost the format.
    # TicTacToe boards from random play (both seats), answered with a uniformly random cell number (taken
    # cells too): the answer format and no strategy; playing well, and free cells, are left to RL
    "tiny-tictactoe": TinyModelSpec(
        envs=(WarmupEnv("tictactoe", instruction=NO_INSTRUCTION),),
        warmup_steps=200,
        warmup_examples=2000,
        revision=1,
    ),
    "tiny-four-choice": TinyModelSpec(
        envs=(WarmupEnv("four_choice", instruction=NO_INSTRUCTION),),
        warmup_steps=200,
        warmup_examples=2000,
        perception_examples=2000,
        revision=1,
    ),
}
