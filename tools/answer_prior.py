"""What a model answers before (or after) training: the probability of each valid answer, per observation.

For every env tag of a config, the first observations of `--episodes` seeds are put to the config's model
(or a checkpoint's) exactly as a rollout puts them: the tag's instruction, chat template and
`response_prefix` (roll_rollout's PromptBuilder). For each distinct observation it prints the probability
that the response starts with each valid action as its canonical answer writes it (`env.format_answer`,
after the prefix, up to the end of the action: the decision, not the closing tag; teacher-forced), their
sum (what is left is text that is no action) and the most probable action. An env with an open answer
space (`valid_actions` None) cannot be probed.

Use it to choose a `response_prefix` or an instruction before a run (a prior that puts most of its mass on
one answer for every observation is what RL collapses onto), and on checkpoints to see whether a policy
reads its observation. Findings: examples/smollm2-cpu-agentic/README.md.

    uv run python tools/answer_prior.py --config-path smollm2-cpu-agentic --config-name agent_four_choice
    uv run python tools/answer_prior.py --config-path smollm2-cpu-agentic --config-name agent_four_choice \\
        --checkpoint runs/four_choice_smollm2_cpu "custom_envs.FourChoice.response_prefix='<answer>'"
"""

from __future__ import annotations

import argparse
import collections
import math
from dataclasses import dataclass
from pathlib import Path

import roll_envs
import torch
from roll_pipeline.assembly.settings import config_model
from roll_pipeline.cli.args import EXAMPLES_DIR
from roll_pipeline.config.compose import compose
from roll_pipeline.serving.evaluate import checkpoint_model_dir
from roll_rollout.plan.seeds import VALIDATION_SEED_BASE
from roll_rollout.prompts import PromptBuilder, instruction_for
from roll_strategies.models._loading import load_model_and_tokenizer


def answer_log_prob(model, prompt: list[int], answer: list[int]) -> float:
    """log P(the response starts with `answer` | `prompt`), teacher-forced."""
    ids = torch.tensor([prompt + answer])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return float(logits.log_softmax(-1).gather(-1, torch.tensor(answer)[:, None]).sum())


def decision_text(answer_text: str, action: str, prefix: str) -> str:
    """What the model writes after the prefix up to the end of `action` in its canonical answer: the
    decision, not the closing format. The part of the answer the prefix ends with is already written
    (`<answer>C</answer>` after the prefix `The answer is <answer>` is `C`)."""
    text = answer_text[: answer_text.index(action) + len(action)]
    overlap = max((n for n in range(len(text) + 1) if prefix.endswith(text[:n])), default=0)
    return text[overlap:]


@dataclass
class ObservationPrior:
    """What the model answers to one first observation of a tag."""

    observation: str
    episodes: int  # of the probed seeds that start with it
    prompt: list[int]  # the prompt ids a rollout builds for it (the response prefix included)
    probabilities: dict[str, float]  # P(the response starts with the action), per valid action

    def table_line(self) -> str:
        """`| observation | episodes | mass on the actions | P per action | most probable |`."""
        shown = " ".join(f"{a}={p:.3f}" for a, p in self.probabilities.items())
        best = max(self.probabilities, key=self.probabilities.__getitem__)
        mass = sum(self.probabilities.values())
        return f"| {self.observation!r} | {self.episodes} | {mass:.3f} | {shown} | {best} |"


def probe_tag(model, tokenizer, spec, episodes: int, first_seed: int) -> list[ObservationPrior]:
    """Each distinct first observation of `episodes` seeds of one env tag (`spec`, a custom_envs entry), most
    frequent first, with the model's probability of each valid action."""
    env = roll_envs.make(spec.env_type, **spec.env_config)
    instruction = instruction_for(env, spec.env_instruction)
    builder = PromptBuilder(
        tokenizer, instruction, spec.max_history_turns, response_prefix=spec.response_prefix
    )
    counts: collections.Counter[str] = collections.Counter()
    actions: dict[str, list[str]] = {}
    for seed in range(first_seed, first_seed + episodes):
        observation, _ = env.reset(seed=seed)
        counts[observation] += 1
        if env.valid_actions is None:
            raise SystemExit(
                f"{spec.env_type} has an open answer space (valid_actions is None): nothing to probe"
            )
        actions.setdefault(observation, list(env.valid_actions))
    found = []
    for observation, count in counts.most_common():
        prompt = builder.first_prompt(observation)
        probabilities = {}
        for action in actions[observation]:
            text = decision_text(env.format_answer(action), action, spec.response_prefix)
            ids = tokenizer.encode(text, add_special_tokens=False)
            probabilities[action] = math.exp(answer_log_prob(model, prompt, ids))
        found.append(ObservationPrior(observation, count, prompt, probabilities))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config-path", required=True)
    parser.add_argument("--config-name", required=True)
    parser.add_argument("--checkpoint", type=Path, default=None, help="a checkpoint, or a run (its newest)")
    parser.add_argument("--tags", nargs="*", default=None, help="env tags (default: the val tags)")
    parser.add_argument("--episodes", type=int, default=64, help="seeds whose first observation is probed")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=VALIDATION_SEED_BASE,
        help="default: the first validation seed of a run",
    )
    parser.add_argument("overrides", nargs="*", help="key=value config overrides, as for roll train")
    args = parser.parse_args()
    config = compose(args.config_path, args.config_name, args.overrides, search_from=EXAMPLES_DIR)
    model_dir = checkpoint_model_dir(args.checkpoint) if args.checkpoint else config_model(config)
    model, tokenizer = load_model_and_tokenizer(
        model_dir, device="cpu", dtype=config.actor_infer.model_args.dtype
    )
    model.eval()
    print(f"model: {model_dir} ({config.actor_infer.model_args.dtype})")
    for tag in args.tags or config.val_env_manager.tags:
        spec = config.custom_envs[tag]
        print(f"\n{tag} (response_prefix {spec.response_prefix!r})\n")
        print(
            "| observation | episodes | mass on the actions | P(response starts with the action) | most probable |"
        )
        print("|---|---|---|---|---|")
        for prior in probe_tag(model, tokenizer, spec, args.episodes, args.first_seed):
            print(prior.table_line())


if __name__ == "__main__":
    main()
