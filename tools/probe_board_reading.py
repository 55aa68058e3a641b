"""Supervised probe: how soon, and how reliably, does a tiny model variant learn to read a FrozenLake board?

Builds a variant of the builtin `tiny-frozen-lake` model (system prompt, attention heads; the same format
warm-up otherwise), trains it *supervised* on the optimal (BFS) move of random mid-episode boards, one run
per data-order seed, and prints held-out accuracy (argmax over the four action tokens is an optimal move,
400 boards, chance ~0.33) every `--every` steps. The steps until accuracy leaves ~0.35 are the plateau an
RL run has to escape with a much weaker signal. Findings: docs/tiny_model_findings.md.

    uv run python tools/probe_board_reading.py --instruction short --heads 4   # the builds before revision 4
    uv run python tools/probe_board_reading.py --instruction none --heads 8    # tiny-frozen-lake revision 4
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import tempfile
import time
from pathlib import Path

import roll_envs
import torch
from probe_history_attention import ACTIONS, sample
from roll_pipeline.models import cache, recipes
from transformers import AutoModelForCausalLM, AutoTokenizer

INSTRUCTIONS = {"short": recipes.TINY_FROZEN_LAKE_INSTRUCTION, "none": recipes.NO_INSTRUCTION}


def build_variant(instruction: str, heads: int, out: Path) -> Path:
    """The builtin default model with another system prompt and head count (kv heads: half the heads)."""
    spec = dataclasses.replace(
        recipes.BUILTIN_MODELS["tiny-frozen-lake"],
        envs=(recipes.WarmupEnv("frozen_lake", instruction=instruction),),
        num_heads=heads,
        num_kv_heads=heads // 2,
    )
    cache._build(spec, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instruction", choices=sorted(INSTRUCTIONS), default="none")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--every", type=int, default=25)
    args = parser.parse_args()
    torch.set_num_threads(1)
    instruction = INSTRUCTIONS[args.instruction]
    path = build_variant(instruction, args.heads, Path(tempfile.mkdtemp()) / "model")
    tok = AutoTokenizer.from_pretrained(path)
    answer = tok("<answer>", add_special_tokens=False)["input_ids"]
    action_ids = [tok(a, add_special_tokens=False)["input_ids"][0] for a in ACTIONS]
    env = roll_envs.make("frozen_lake")

    def example(rng: random.Random) -> tuple[list[int], set[str]]:
        messages, best = sample(env, rng, full_history=False)  # [probe's system prompt, board]
        chat = ([{"role": "system", "content": instruction}] if instruction else []) + messages[-1:]
        ids = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
        return [*ids, *answer], best

    def action_logits(model: torch.nn.Module, prompts: list[list[int]]) -> torch.Tensor:
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), tok.pad_token_id)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: the next token is at the last column
            ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.tensor(p), 1
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -1]
        return model.lm_head(hidden)[:, action_ids]

    held_out = [example(random.Random(1_000_000 + i)) for i in range(400)]
    print(
        f"instruction={args.instruction} heads={args.heads} prompt tokens {len(held_out[0][0]) - len(answer)} + <answer>"
    )
    for seed in args.seeds:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(path)
        optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
        rng, started, curve = random.Random(seed), time.perf_counter(), []
        for step in range(args.steps + 1):
            if step % args.every == 0:
                with torch.no_grad():
                    picks = action_logits(model, [p for p, _ in held_out]).argmax(-1).tolist()
                curve.append(
                    sum(ACTIONS[k] in best for k, (_, best) in zip(picks, held_out, strict=True)) / 400
                )
            if step == args.steps:
                break
            batch = [example(rng) for _ in range(args.batch)]
            target = torch.tensor([[float(a in best) / len(best) for a in ACTIONS] for _, best in batch])
            loss = -(target * action_logits(model, [p for p, _ in batch]).log_softmax(-1)).sum(-1).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        shown = " ".join(f"{a:.3f}" for a in curve)
        print(
            f"seed {seed}, every {args.every} steps: {shown} ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
