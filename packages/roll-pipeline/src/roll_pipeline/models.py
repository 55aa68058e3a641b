"""Resolve `pretrain`: a model folder, a hub id, or `builtin:NAME` — a tiny model built offline.

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
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TINY_FROZEN_LAKE_INSTRUCTION = "P you, G goal, O hole. <answer>Left</answer> Down Right Up"
"""The short system prompt of the first tiny FrozenLake builds (18 tokens where the env's own has about 90),
still the one of `tiny-frozen-lake-history`; the other tiny models use `NO_INSTRUCTION`."""


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
    """Warm-up examples that ask what lies next to P on a FrozenLake board (`perception_warmup_examples`)."""
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
18-token instruction of the first builds delayed the escape from the initial plateau of a supervised
board-reading probe from 25-50 to 75-150 steps (varying with the data order), and doubled every prompt."""

FROZEN_LAKE_WARMUP = WarmupEnv("frozen_lake", instruction=NO_INSTRUCTION)
SOKOBAN_WARMUP = WarmupEnv("sokoban", instruction=NO_INSTRUCTION)
BOARD_READING_HEADS = {"num_heads": 8, "num_kv_heads": 4}
"""Eight attention heads of 16 dimensions instead of four of 32, at the same cost: held-out accuracy of the
supervised probe 0.84-0.87 after 300 steps on three data orders, against 0.78-0.84 with four."""

BUILTIN_MODELS: dict[str, TinyModelSpec] = {
    "tiny-frozen-lake": TinyModelSpec(envs=(FROZEN_LAKE_WARMUP,), **BOARD_READING_HEADS, revision=4),
    # for prompts that keep the whole conversation (max_history_turns: null, trajectory-wise samples); the
    # build measured with the instruction (revision 3) stays until it is re-measured without
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
}


def cache_dir() -> Path:
    """Root of roll's caches."""
    return Path(os.environ.get("ROLL_CACHE_DIR", Path.home() / ".cache" / "roll"))


def resolve_pretrain(pretrain: str, seed: int = 0) -> Path | str:
    """A path (or hub id) that `from_pretrained` loads; builds `builtin:` models on first use."""
    if not pretrain.startswith("builtin:"):
        return pretrain
    name = pretrain.removeprefix("builtin:")
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown builtin model {name!r}; available: {sorted(BUILTIN_MODELS)}")
    spec = BUILTIN_MODELS[name]
    target = cache_dir() / "models" / f"{name}-v{spec.revision}-seed{spec.seed}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same model
        if not (target / "config.json").exists():
            _build(spec, target)
    return target


def _build(spec: TinyModelSpec, target: Path) -> None:
    from roll_strategies.tiny_model import build_tiny_model

    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"[roll] building the tiny model {target.name} (once; cached in {target.parent})", flush=True)
    build_tiny_model(
        tmp,
        vocab_texts=vocabulary_corpus(),
        warmup_examples=format_warmup_examples(spec) + perception_warmup_examples(spec),
        seed=spec.seed,
        warmup_steps=spec.warmup_steps,
        warmup_lr=spec.warmup_lr,
        sliding_window=spec.sliding_window,
        num_heads=spec.num_heads,
        num_kv_heads=spec.num_kv_heads,
    )
    tmp.rename(target)


def vocabulary_corpus() -> list[str]:
    """Instructions and sample observations of every registered env that builds with defaults."""
    import roll_envs

    texts: list[str] = []
    for env_id in roll_envs.list_envs():
        try:
            env = roll_envs.make(env_id)
            texts.append(env.instruction)
            for seed in range(3):
                texts.append(env.reset(seed=seed)[0])
            env.close()
        except Exception:  # an env needing extra config contributes nothing
            continue
    return texts


def format_warmup_examples(spec: TinyModelSpec) -> list[tuple[list[dict[str, str]], str]]:
    """(chat messages, response) pairs: env observations answered with uniformly random actions.

    Observations come from random play so that mid-episode boards are covered; the seeds are drawn
    below the validation seed range, and the answers carry no information about the board. Episodes
    take turns among `spec.envs`; with one env the examples are those of the single-env builds before
    `envs` existed, byte for byte (one random stream, the same draws).
    """
    import roll_envs

    rng = random.Random(spec.seed)
    envs = [roll_envs.make(w.env_type, **w.env_config) for w in spec.envs]
    instructions = [
        env.instruction if w.instruction is None else w.instruction
        for env, w in zip(envs, spec.envs, strict=True)
    ]
    examples: list[tuple[list[dict[str, str]], str]] = []
    episode = 0
    while len(examples) < spec.warmup_examples:
        env, instruction = envs[episode % len(envs)], instructions[episode % len(envs)]
        actions = list(env.valid_actions)
        episode += 1
        obs, _ = env.reset(seed=rng.randrange(0, 10**8))
        history: list[dict[str, str]] = []  # earlier turns, kept only for history prompts
        for _ in range(rng.randint(1, 8 if spec.history_prompts else 4)):
            system = [{"role": "system", "content": instruction}] if instruction else []
            messages = [*system, *history, {"role": "user", "content": obs}]
            examples.append((messages, f"<answer>{rng.choice(actions)}</answer>"))
            played = f"<answer>{rng.choice(actions)}</answer>"
            if spec.history_prompts:
                history += [{"role": "user", "content": obs}, {"role": "assistant", "content": played}]
            obs, _, terminated, truncated, _ = env.step(played)
            if terminated or truncated:
                break
    for env in envs:
        env.close()
    return examples[: spec.warmup_examples]


NEIGHBOUR_QUESTION = "next to P"
"""Appended to a board in a perception warm-up prompt (after it, so the board's tokens read as in an RL prompt)."""


def frozen_lake_neighbours(board: str) -> str | None:
    """What lies next to P on a FrozenLake text board, e.g. `Left _ Down O Right edge Up G`; None without P."""
    rows = board.split("\n")
    here = next(((r, row.index("P")) for r, row in enumerate(rows) if "P" in row), None)
    if here is None:
        return None
    parts = []
    for name, (dr, dc) in (("Left", (0, -1)), ("Down", (1, 0)), ("Right", (0, 1)), ("Up", (-1, 0))):
        r, c = here[0] + dr, here[1] + dc
        inside = 0 <= r < len(rows) and 0 <= c < len(rows[r])
        parts.append(f"{name} {rows[r][c] if inside else 'edge'}")
    return " ".join(parts)


def perception_warmup_examples(spec: TinyModelSpec) -> list[tuple[list[dict[str, str]], str]]:
    """(chat messages, response) pairs that teach the model to *see*, not to act: a FrozenLake board from random
    play, then `NEIGHBOUR_QUESTION`, answered with the four cells around P (`frozen_lake_neighbours`).

    A pretrained LLM can say what is below a character in a grid before any RL; a model built from scratch
    cannot, and RL alone did not teach it within the CPU budget (docs/tiny_model_findings.md, session 8). The
    answers name cells, never a move: which move is good is still left to RL. Boards come from seeds below the
    validation range, played by uniformly random moves, on a random stream of their own.
    """
    import roll_envs

    if not spec.perception_examples:
        return []
    rng = random.Random(spec.seed + 1)
    env = roll_envs.make("frozen_lake")
    examples: list[tuple[list[dict[str, str]], str]] = []
    while len(examples) < spec.perception_examples:
        obs, _ = env.reset(seed=rng.randrange(0, 10**8))
        for _ in range(rng.randint(1, 4)):
            answer = frozen_lake_neighbours(obs)
            if answer is None:
                break
            examples.append(([{"role": "user", "content": f"{obs}\n{NEIGHBOUR_QUESTION}"}], answer))
            obs, _, terminated, truncated, _ = env.step(f"<answer>{rng.choice(env.valid_actions)}</answer>")
            if terminated or truncated:
                break
    env.close()
    return examples[: spec.perception_examples]
