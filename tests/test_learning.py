"""The pipeline learns: the builtin tiny model on the one-turn four_choice env goes from chance to >= 0.9 greedy
success within the fixed steps of examples/tiny-cpu-agentic/agent_four_choice.yaml, on three seeds, and the same
run with the policy-gradient sign flipped ends below chance. The run is in-process (`cluster.backend=local`);
success is the pipeline's own greedy validation on 64 held-out seeds, before training and after the last step.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from roll_envs import FourChoiceEnv
from roll_pipeline.config.compose import compose
from roll_pipeline.models.recipes import BUILTIN_MODELS
from roll_pipeline.models.warmup import (
    COLOUR_QUESTION,
    format_warmup_examples,
    perception_warmup_examples,
    vocabulary_corpus,
)
from small_runs import run_to_end

EXAMPLE_DIR = Path(__file__).resolve().parents[1] / "examples" / "tiny-cpu-agentic"
EXAMPLE = "agent_four_choice"
STEPS = 40
"""Training steps of the example (its max_steps): seeds 0-19 each reach greedy 1.0 within them, seeds 0, 1 and 2
by step 20 (measured in docs/training.md, "four_choice (tiny offline model)")."""

CHANCE = 0.25
LETTERS = ("A", "B", "C", "D")

RELIED_ON = (
    "pretrain",
    "max_steps",
    "eval_steps",
    "adv_estimator",
    "norm_mean_type",
    "whiten_advantages",
    "ppo_epochs",
    "recompute_old_log_probs",
    "async_generation_ratio",
    "skip_confident_tokens",
    "entropy_loss_coef",
    "use_kl_loss",
    "kl_penalty",
    "kl_loss_coef",
    "init_kl_coef",
    "actor_train.training_args.learning_rate",
    "actor_train.training_args.warmup_steps",
    "actor_train.training_args.lr_scheduler_type",
    "actor_train.training_args.adam_beta2",
    "actor_train.training_args.per_device_train_batch_size",
    "actor_train.training_args.gradient_accumulation_steps",
    "actor_infer.generating_args.max_new_tokens",
    "actor_infer.generating_args.temperature",
    "actor_infer.generating_args.stop_strings",
    "train_env_manager.num_env_groups",
    "train_env_manager.group_size",
    "train_env_manager.tags",
    "train_env_manager.num_groups_partition",
    "val_env_manager.num_env_groups",
    "val_env_manager.group_size",
    "custom_envs.FourChoice.env_type",
    "custom_envs.FourChoice.max_actions_per_traj",
    "custom_envs.FourChoice.max_tokens_per_step",
    "custom_envs.FourChoice.env_instruction",
    *(
        f"custom_envs.{tag}.{key}"
        for tag in ("Red", "Green", "Blue", "Yellow")
        for key in ("env_type", "env_config")
    ),
)
"""Settings the learning run depends on: the example sets each itself, so a change of AgenticConfig's defaults
(set for real models) cannot change what this test measures."""


def _lookup(node: dict[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        node = node[key]
    return node


def test_the_example_sets_every_setting_the_learning_run_relies_on():
    raw = yaml.safe_load((EXAMPLE_DIR / f"{EXAMPLE}.yaml").read_text())
    assert raw["defaults"] == ["roll_defaults", "_self_"]
    missing = []
    for dotted in RELIED_ON:
        try:
            _lookup(raw, dotted)
        except KeyError:
            missing.append(dotted)
    assert missing == [], f"set these in {EXAMPLE}.yaml: {missing}"
    cfg = compose(str(EXAMPLE_DIR), EXAMPLE, [])
    for dotted in RELIED_ON:  # and the composed config is what the file says
        value = _lookup(cfg.model_dump(mode="json"), dotted)
        assert value == _lookup(raw, dotted), dotted
    assert cfg.max_steps == STEPS and cfg.eval_steps == STEPS


def test_the_warm_up_teaches_the_format_and_the_colours_but_never_the_key():
    spec = BUILTIN_MODELS["tiny-four-choice"]
    letters_by_colour: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for messages, response in format_warmup_examples(spec):
        assert [m["role"] for m in messages] == ["user"]  # the observation alone, as in the run
        colour = re.fullmatch(r"The light is (\w+)\.", messages[0]["content"])
        letter = re.fullmatch(r"<answer>([A-D])</answer>", response)
        assert colour and letter, (messages, response)
        letters_by_colour[colour.group(1)][letter.group(1)] += 1
    assert set(letters_by_colour) == {"red", "green", "blue", "yellow"}
    for colour, counts in letters_by_colour.items():  # every letter as often, the right one included
        total = sum(counts.values())
        spread = 5 * (total * 3 / 16) ** 0.5  # 5 standard deviations of a uniform letter's count
        assert all(abs(counts[letter] - total / 4) < spread for letter in LETTERS), (colour, counts)
    questions = perception_warmup_examples(spec)
    assert len(questions) == spec.perception_examples
    for messages, response in questions:  # the colour shown, in answer tags, never a letter
        shown, question = messages[0]["content"].split("\n")
        colour = re.fullmatch(r"The light is (\w+)\.", shown)
        assert colour and question == COLOUR_QUESTION and response == f"<answer>{colour.group(1)}</answer>"


def test_the_four_choice_words_stay_out_of_the_other_models_vocabulary():
    corpus = vocabulary_corpus()
    assert FourChoiceEnv().instruction not in corpus
    assert not any(text.startswith("The light is") for text in corpus)


def train(tmp_path: Path, seed: int) -> tuple[float, float]:
    """Run the example in-process; (greedy validation success before training, after the last step)."""
    cfg = compose(
        str(EXAMPLE_DIR),
        EXAMPLE,
        [
            f"seed={seed}",
            f"output_dir={tmp_path}",
            "cluster.backend=local",
            "track_with=[]",
            "print_baselines=false",
        ],
    )
    summary = run_to_end(cfg)
    assert summary.steps == STEPS and [step for step, _ in summary.val_history] == [0, STEPS]
    return summary.val_success(0), summary.val_success(-1)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_tiny_model_learns_which_letter_each_colour_wants(tmp_path, seed):
    before, after = train(tmp_path, seed)
    assert before <= 0.5, f"seed {seed}: the untrained model already scores {before}"
    assert after >= 0.9, f"seed {seed}: {before} -> {after} after {STEPS} steps"


def negated(compute: Callable[..., Any], calls: list[int]) -> Callable[..., Any]:
    """`compute_advantages` with the sign of every advantage flipped (counting its calls)."""

    def flipped(*args: Any, **kwargs: Any) -> Any:
        out = compute(*args, **kwargs)
        calls.append(1)
        return out._replace(advantages=-out.advantages)

    return flipped


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_with_the_policy_gradient_sign_flipped_the_same_run_ends_below_chance(tmp_path, monkeypatch):
    # The advantages are computed in the driver process (any backend); flipping them flips the policy gradient.
    from roll_pipeline.trainer import experience

    calls: list[int] = []
    monkeypatch.setattr(experience, "compute_advantages", negated(experience.compute_advantages, calls))
    before, after = train(tmp_path, seed=0)
    assert len(calls) == STEPS  # the flipped advantages trained every step
    assert before <= 0.5 and after < CHANCE, f"flipped sign: {before} -> {after}"
