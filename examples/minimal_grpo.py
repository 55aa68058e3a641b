"""GRPO on the four_choice env in one file: roll_envs for the env, roll_algos for the maths, plain torch and
transformers for the rest (no pipeline, no Ray). Read it top to bottom: make envs, build the chat prompts,
sample a group of answers per prompt, score them with the env, GRPO advantages, the PPO-clip policy loss, the
optimiser step; then a greedy evaluation on held-out seeds beside chance and the best fixed answer.

    uv run python examples/minimal_grpo.py --model-path ~/.cache/roll/models/tiny-four-choice-v1-seed0

The model is any local Hugging Face causal LM folder with a chat template; examples/README.md builds the
builtin tiny model above. four_choice: a light shows a colour, and each colour has one right letter among A-D,
which the prompt does not tell (docs/envs/four_choice.md).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import time
from dataclasses import dataclass

import numpy as np
import roll_algos
import roll_envs
import torch
from roll_envs.baseline_types import HELD_OUT_SEED_START
from transformers import AutoModelForCausalLM, AutoTokenizer

COLOURS = ("red", "green", "blue", "yellow")
"""four_choice's colours: the training prompts cycle through them (reset option `colour`)."""


@dataclass
class Args:
    model_path: str = ""
    """a local Hugging Face model folder (config, weights, tokenizer with a chat template)"""
    seed: int = 0
    """seed of the training seeds, the sampling and the torch ops"""
    steps: int = 30
    """training steps: one rollout and its optimiser updates each"""
    prompts_per_step: int = 16
    """prompts (env episodes) a step; cycled over the four colours, so every batch holds them equally"""
    group_size: int = 8
    """G: answers sampled per prompt, compared with each other by GRPO"""
    learning_rate: float = 1e-3
    """AdamW learning rate, decayed linearly to 0 over `steps`"""
    num_minibatches: int = 2
    """optimiser steps per rollout, each on an equal share of its prompts x group_size answers"""
    clip_coef: float = 0.2
    """PPO clip range of the importance ratio (both sides)"""
    kl_coef: float = 0.1
    """weight of the k3 KL to the initial model in the loss (keeps the answer format); 0 turns it off"""
    max_grad_norm: float = 1.0
    """gradient clipping"""
    temperature: float = 1.0
    """sampling temperature of the training answers (evaluation is greedy)"""
    max_new_tokens: int = 8
    """tokens an answer may take; `<answer>B</answer>` is three of the tiny model's tokenizer"""
    system_prompt: bool = False
    """the env's instruction as a system message (off: the tiny model warmed up on the observation alone)"""
    eval_episodes: int = 64
    """held-out episodes of the greedy evaluation (seeds from roll_envs' HELD_OUT_SEED_START)"""
    device: str = "cpu"
    """torch device"""
    threads: int = 1
    """torch's CPU threads (0: torch's default); one is fastest for a tiny model on a busy machine"""


def parse_args(argv: list[str] | None = None) -> Args:
    """`Args` from the command line (`--model-path PATH --steps 40`), each field's docstring as its help."""
    body = ast.parse(inspect.getsource(Args)).body[0].body
    docs = {a.target.id: b.value.value for a, b in itertools.pairwise(body) if isinstance(a, ast.AnnAssign)}
    types = {
        "str": str,
        "int": int,
        "float": float,
        "bool": lambda text: text.lower() in ("1", "true", "yes"),
    }
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(flag, type=types[f.type], default=f.default, help=docs[f.name])
    return Args(**vars(parser.parse_args(argv)))


def chat_prompt(tokenizer, env, observation: str, system_prompt: bool) -> list[int]:
    """Token ids of the chat prompt of one observation, ending with the assistant's generation prompt."""
    messages = [{"role": "system", "content": env.instruction}] if system_prompt else []
    messages.append({"role": "user", "content": observation})
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def left_pad(prompts: list[list[int]], pad_id: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts [B, L] left-padded to one length, and their attention mask."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    return ids, mask


@torch.no_grad()
def generate(
    model, tokenizer, prompts: list[list[int]], args: Args, greedy: bool
) -> tuple[torch.Tensor, ...]:
    """(sequences [B, L+T], attention mask [B, L+T], response mask [B, T]); a response ends at its eos."""
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, args.device)
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": args.temperature}
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=args.max_new_tokens,
        top_k=None,  # sample from the whole softmax, the distribution whose log-probs the loss takes
        top_p=None,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **sampling,
    )
    response = out[:, ids.shape[1] :]
    is_eos = response == tokenizer.eos_token_id
    response_mask = (is_eos.cumsum(-1) - is_eos.long()) == 0  # up to and including the first eos
    return out, torch.cat([mask, response_mask.long()], dim=1), response_mask


def answer_texts(tokenizer, sequences: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Each response's text, special tokens left out (the env would ignore them anyway)."""
    response = sequences[:, -response_mask.shape[1] :]
    return [
        tokenizer.decode(r[m], skip_special_tokens=True) for r, m in zip(response, response_mask, strict=True)
    ]


def response_log_probs(
    model, sequences: torch.Tensor, attention_mask: torch.Tensor, width: int
) -> torch.Tensor:
    """Log-probs [B, T] of the last `width` tokens of each sequence under `model`."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # as generate numbers left-padded rows
    logits = model(input_ids=sequences, attention_mask=attention_mask, position_ids=position_ids).logits
    return roll_algos.log_probs_from_logits(logits[:, -width - 1 : -1], sequences[:, -width:])


def evaluate(model, tokenizer, args: Args) -> float:
    """Greedy success rate on `eval_episodes` held-out seeds, the colour drawn by each seed."""
    envs = [roll_envs.make("four_choice", render_mode=None) for _ in range(args.eval_episodes)]
    observations = [env.reset(seed=HELD_OUT_SEED_START + i)[0] for i, env in enumerate(envs)]
    prompts = [
        chat_prompt(tokenizer, env, o, args.system_prompt) for env, o in zip(envs, observations, strict=True)
    ]
    sequences, _, response_mask = generate(model, tokenizer, prompts, args, greedy=True)
    answers = answer_texts(tokenizer, sequences, response_mask)
    return float(np.mean([env.step(a)[-1]["success"] for env, a in zip(envs, answers, strict=True)]))


def main(args: Args) -> dict[str, float]:
    """Train, print a line of metrics per step, and return the greedy success before and after."""
    if not args.model_path:
        raise SystemExit("--model-path: give a local Hugging Face model folder (see this file's docstring)")
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    tokenizer = AutoTokenizer.from_pretrained(args.model_path)
    if tokenizer.pad_token is None:  # pads are masked out; eos serves where a model has no pad token
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32).to(args.device)
    reference = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32).to(args.device)
    reference.eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.learning_rate, betas=(0.9, 0.98), weight_decay=0.0
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / args.steps)
    baselines = roll_envs.four_choice_baselines(args.eval_episodes)  # on the same held-out seeds
    beside = f"(chance {baselines['random']:.3f}, best fixed answer {baselines['best_fixed_answer']:.3f})"
    model.eval()
    before = evaluate(model, tokenizer, args)
    print(f"eval/success {before:.3f} before training {beside}")

    # One env per answer: a prompt's G envs reset with the same seed show the same light.
    G, P = args.group_size, args.prompts_per_step
    envs = [roll_envs.make("four_choice", render_mode=None) for _ in range(P * G)]
    start = time.time()
    for step in range(1, args.steps + 1):
        # Rollout: a training seed and a colour per prompt, then G sampled answers to each prompt.
        seeds = rng.integers(0, HELD_OUT_SEED_START, size=P)
        observations = [
            env.reset(seed=int(seeds[i // G]), options={"colour": COLOURS[i // G % len(COLOURS)]})[0]
            for i, env in enumerate(envs)
        ]
        prompts = [
            chat_prompt(tokenizer, env, o, args.system_prompt)
            for env, o in zip(envs, observations, strict=True)
        ]
        sequences, attention_mask, response_mask = generate(model, tokenizer, prompts, args, greedy=False)
        answers = answer_texts(tokenizer, sequences, response_mask)

        # Score: the env parses `<answer>X</answer>` and pays 1 for the colour's letter, 0 otherwise.
        outcomes = [env.step(a) for env, a in zip(envs, answers, strict=True)]
        rewards = torch.tensor([reward for _, reward, *_ in outcomes], device=args.device)

        # GRPO advantages: each answer's reward normalised within its group (zero mean, unit std), on every
        # response token. One row per episode, one turn each; group_ids tie the G answers of a prompt.
        B, T = response_mask.shape
        rows = torch.arange(B, device=args.device)
        token_rewards = torch.zeros(B, T, device=args.device)
        token_rewards[rows, response_mask.sum(-1) - 1] = rewards  # on the last response token
        inputs = roll_algos.AdvantageInputs(
            response_mask=response_mask,
            token_rewards=token_rewards,
            episode_scores=rewards,
            step_rewards=rewards,
            trajectory_ids=rows,
            group_ids=rows // G,
            step_ids=torch.zeros_like(rows),
            anchor_ids=torch.full_like(rows, -1),
        )
        config = roll_algos.AdvantageConfig(gamma=1.0, norm_mode="mean_std")
        advantages = roll_algos.compute_advantages("grpo", inputs, config).advantages

        # The sampling policy's and the reference's log-probs of the sampled tokens.
        with torch.no_grad():
            old_log_probs = response_log_probs(model, sequences, attention_mask, T)
            ref_log_probs = response_log_probs(reference, sequences, attention_mask, T)

        # Update: the PPO-clip policy loss + kl_coef * KL(pi || ref), over minibatches of whole groups.
        model.train()
        for chunk in torch.from_numpy(rng.permutation(P)).chunk(args.num_minibatches):
            rows = (chunk[:, None] * G + torch.arange(G)).reshape(-1).to(args.device)
            log_probs = response_log_probs(model, sequences[rows], attention_mask[rows], T)
            mask = response_mask[rows]
            pg = roll_algos.policy_loss(
                log_probs,
                old_log_probs[rows],
                advantages[rows],
                mask,
                clip_low=args.clip_coef,
                clip_high=args.clip_coef,
                agg_mode="seq-mean-token-mean",
            )
            kl = roll_algos.aggregate_loss(
                roll_algos.kl_penalty(log_probs, ref_log_probs[rows], kind="k3"), mask, "seq-mean-token-mean"
            )
            loss = pg.loss + args.kl_coef * kl
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
        schedule.step()
        model.eval()

        valid = np.mean([info["action_is_valid"] for *_, info in outcomes])
        print(
            f"step {step:3d}  charts/reward_mean {rewards.mean():.3f}  charts/valid_answers {valid:.3f}  "
            f"losses/policy_loss {pg.loss.item():.4f}  losses/kl {kl.item():.4f}  "
            f"losses/approx_kl {pg.approx_kl:.4f}  losses/clipfrac {pg.clip_frac:.3f}  "
            f"charts/SPS {step * B / (time.time() - start):.0f}",
            flush=True,
        )

    after = evaluate(model, tokenizer, args)
    print(f"eval/success {after:.3f} after {args.steps} steps {beside}")
    return {"success_before": before, "success_after": after, **baselines}


if __name__ == "__main__":
    main(parse_args())
