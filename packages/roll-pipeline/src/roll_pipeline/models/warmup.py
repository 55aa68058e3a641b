"""The supervised warm-up data of the builtin models: env observations answered in the env's format, and
(for the sighted FrozenLake model) boards answered with the cells next to P."""

from __future__ import annotations

import random

from roll_envs.frozen_lake import frozen_lake_neighbours

from roll_pipeline.models.recipes import TinyModelSpec

__all__ = [
    "NEIGHBOUR_QUESTION",
    "format_warmup_examples",
    "frozen_lake_neighbours",
    "perception_warmup_examples",
    "vocabulary_corpus",
]


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
    take turns among `spec.envs`, all drawn from one random stream seeded by `spec.seed`.
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


def perception_warmup_examples(spec: TinyModelSpec) -> list[tuple[list[dict[str, str]], str]]:
    """(chat messages, response) pairs that teach the model to *see*, not to act: a FrozenLake board from random
    play, then `NEIGHBOUR_QUESTION`, answered with the four cells around P (`frozen_lake_neighbours`).

    A pretrained LLM can say what is below a character in a grid before any RL; a model built from scratch
    cannot, and RL alone did not teach it within the CPU budget (docs/tiny_model_findings.md). The
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
