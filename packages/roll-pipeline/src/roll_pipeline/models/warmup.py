"""The supervised warm-up data of the builtin models: env observations answered in the env's format, and
(for the sighted FrozenLake model) boards answered with the cells next to P, (for the four_choice model)
lights answered with their colour."""

from __future__ import annotations

import random
from collections.abc import Callable

from roll_envs.envs.four_choice import FourChoiceEnv
from roll_envs.envs.frozen_lake import frozen_lake_neighbours

from roll_pipeline.models.recipes import TinyModelSpec

__all__ = [
    "COLOUR_QUESTION",
    "NEIGHBOUR_QUESTION",
    "PERCEPTION_QUESTIONS",
    "VOCABULARY_ENVS",
    "WarmupExamples",
    "format_warmup_examples",
    "four_choice_perception_examples",
    "frozen_lake_perception_examples",
    "perception_warmup_examples",
    "vocabulary_corpus",
]


VOCABULARY_ENVS = (
    "cliff_walking",
    "frozen_lake",
    "gym_adapter",
    "larger_sokoban",
    "simple_sokoban",
    "sokoban",
    "sokoban_different_grid_vocab",
    "taxi",
    "webshop_lite",
)
"""The envs whose text makes the tiny models' shared vocabulary, a fixed list: an env registered later must not
change every model's tokenizer, hence its weights (and the shipped builds), while the cache keeps a build by
revision. A model warmed up on another env still gets that env's words, from its warm-up examples."""


def vocabulary_corpus() -> list[str]:
    """Instructions and sample observations of each of `VOCABULARY_ENVS` that is registered and builds with
    defaults."""
    import roll_envs

    texts: list[str] = []
    registered = set(roll_envs.list_envs())
    for env_id in VOCABULARY_ENVS:
        if env_id not in registered:
            continue
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
    from roll_rollout.prompts import instruction_for

    rng = random.Random(spec.seed)
    envs = [roll_envs.make(w.env_type, **w.env_config) for w in spec.envs]
    instructions = [instruction_for(env, w.instruction) for env, w in zip(envs, spec.envs, strict=True)]
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

COLOUR_QUESTION = "which colour"
"""Appended to a four_choice observation in a perception warm-up prompt, answered with `<answer>COLOUR</answer>`."""

WarmupExamples = list[tuple[list[dict[str, str]], str]]
"""(chat messages, response) pairs of a warm-up."""


def perception_warmup_examples(spec: TinyModelSpec) -> WarmupExamples:
    """`spec.perception_examples` (chat messages, response) pairs that teach the model to *see*, not to act:
    questions about the observations of the spec's first warm-up env, answered from the env's state
    (`PERCEPTION_QUESTIONS`: the cells next to P on a FrozenLake board, the colour of a four_choice light).

    A pretrained LLM can say what is below a character in a grid, or which colour a sentence names, before
    any RL; a model built from scratch cannot, and RL alone did not teach it within the CPU budget
    (docs/tiny_model_findings.md). The answers never name an action: which action is good is left to RL.

    Raises:
        ValueError: `perception_examples` is set for an env that has no perception questions.
    """
    if not spec.perception_examples:
        return []
    env_type = spec.envs[0].env_type
    if env_type not in PERCEPTION_QUESTIONS:
        raise ValueError(
            f"perception_examples={spec.perception_examples} for a model warmed up on {env_type!r}, which has no"
            f" perception questions; envs with some: {sorted(PERCEPTION_QUESTIONS)} (or set perception_examples=0)"
        )
    return PERCEPTION_QUESTIONS[env_type](spec)


def frozen_lake_perception_examples(spec: TinyModelSpec) -> WarmupExamples:
    """A FrozenLake board from random play, then `NEIGHBOUR_QUESTION`, answered with the four cells around P
    (`frozen_lake_neighbours`). Boards come from seeds below the validation range, played by uniformly random
    moves, on a random stream of their own."""
    import roll_envs

    rng = random.Random(spec.seed + 1)
    env = roll_envs.make("frozen_lake")
    examples: WarmupExamples = []
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


def four_choice_perception_examples(spec: TinyModelSpec) -> WarmupExamples:
    """A four_choice observation, then `COLOUR_QUESTION`, answered with the colour's name inside answer tags:
    the position after `<answer>`, where RL's letter is drawn, learns to read the light. Never a letter: the key
    from colours to letters is left to RL. Seeds below the validation range, on a random stream of their own.

    Measured with 16 groups of 8 a step on 6 seeds: answered with the bare colour, 2 runs in 6 still confused
    two colours at step 40 in each of three settings (no KL, k3 at 0.05 and 0.2; greedy 0.7-0.81, red and
    yellow with nearly the same letter probabilities); answered in tags, examples/tiny-cpu-agentic/
    agent_four_choice.yaml reached 1.0 on 10 seeds of 10.
    """
    rng = random.Random(spec.seed + 1)
    env = FourChoiceEnv(render_mode=None)
    examples: WarmupExamples = []
    for _ in range(spec.perception_examples):
        obs, _ = env.reset(seed=rng.randrange(0, 10**8))
        examples.append(
            ([{"role": "user", "content": f"{obs}\n{COLOUR_QUESTION}"}], f"<answer>{env.colour}</answer>")
        )
    env.close()
    return examples


PERCEPTION_QUESTIONS: dict[str, Callable[[TinyModelSpec], WarmupExamples]] = {
    "frozen_lake": frozen_lake_perception_examples,
    "four_choice": four_choice_perception_examples,
}
"""The perception warm-up of each env type that has one, by registry id."""
