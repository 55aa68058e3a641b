"""Supervised probe: can a model read the LATEST board of a prompt that keeps the whole history?

Trains a builtin tiny model (or any HF folder) on the optimal (BFS) first move of the current FrozenLake
board, with prompts that hold 0-7 earlier turns of random play (`--history full`) or only the current
board (`--history 0`), and prints held-out accuracy (the argmax over the four action tokens is one of the
optimal moves) every 50 steps. `--window N` turns on Qwen2 sliding-window attention of N tokens in every
layer before training. Findings: docs/tiny_model_findings.md.

    uv run python tools/probe_history_attention.py --history full            # full attention
    uv run python tools/probe_history_attention.py --history full --window 32
"""

from __future__ import annotations

import argparse
import collections
import random
import time

import roll_envs
import torch
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.models.recipes import TINY_FROZEN_LAKE_INSTRUCTION
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

ACTIONS = ("Left", "Down", "Right", "Up")
MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
Example = tuple[list[dict[str, str]], set[str]]


def optimal_moves(board: str) -> set[str]:
    """First moves of the shortest hole-free paths from P to G (deterministic moves); empty if none."""
    rows = board.split("\n")
    cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
    start = next((rc for rc, ch in cells.items() if ch == "P"), None)
    goal = next((rc for rc, ch in cells.items() if ch == "G"), None)
    if start is None or goal is None:
        return set()
    dist, queue = {goal: 0}, collections.deque([goal])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nxt = (r + dr, c + dc)
            if cells.get(nxt, "O") != "O" and nxt not in dist:
                dist[nxt] = dist[(r, c)] + 1
                queue.append(nxt)
    if start not in dist:
        return set()
    near = {a for a, (dr, dc) in MOVES.items() if dist.get((start[0] + dr, start[1] + dc)) == dist[start] - 1}
    return near


def sample(env, rng: random.Random, full_history: bool) -> Example:
    """A prompt (system, earlier turns, current board) and the optimal moves on the current board."""
    while True:
        obs, _ = env.reset(seed=rng.randrange(10**8))
        messages = [
            {"role": "system", "content": TINY_FROZEN_LAKE_INSTRUCTION},
            {"role": "user", "content": obs},
        ]
        alive = True
        for _ in range(rng.randint(0, 7)):
            action = f"<answer>{rng.choice(ACTIONS)}</answer>"
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                alive = False
                break
            messages += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
        best = optimal_moves(obs)
        if alive and best:
            return (messages if full_history else [messages[0], messages[-1]]), best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="builtin:tiny-frozen-lake")
    parser.add_argument("--history", choices=["0", "full"], default="full")
    parser.add_argument("--window", type=int, default=0, help="sliding attention window; 0: the model's own")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    path = resolve_pretrain(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    config = AutoConfig.from_pretrained(path)
    if args.window:
        config.use_sliding_window, config.sliding_window, config.max_window_layers = True, args.window, 0
        config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    model = AutoModelForCausalLM.from_pretrained(path, config=config)
    answer_prefix = tok("<answer>", add_special_tokens=False)["input_ids"]
    action_ids = [tok(a, add_special_tokens=False)["input_ids"][0] for a in ACTIONS]

    def action_logits(batch: list[Example]) -> torch.Tensor:
        seqs = [
            list(tok.apply_chat_template(m, add_generation_prompt=True)) + answer_prefix for m, _ in batch
        ]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), tok.pad_token_id)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):  # left padding: the next token is at the last column
            ids[i, width - len(s) :], mask[i, width - len(s) :] = torch.tensor(s), 1
        return model(input_ids=ids, attention_mask=mask).logits[:, -1, action_ids]

    env = roll_envs.make("frozen_lake")
    full = args.history == "full"
    held_out = [sample(env, random.Random(1_000_000 + i), full) for i in range(400)]

    def accuracy() -> float:
        with torch.no_grad():
            picks = torch.cat([action_logits(held_out[i : i + 100]).argmax(-1) for i in range(0, 400, 100)])
        return sum(ACTIONS[p] in best for p, (_, best) in zip(picks.tolist(), held_out, strict=True)) / 400

    rng, started = random.Random(2), time.perf_counter()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    print(
        f"model={args.model} history={args.history} window={args.window or 'none'} step 0 accuracy {accuracy():.3f}"
    )
    for step in range(1, args.steps + 1):
        batch = [sample(env, rng, full) for _ in range(args.batch)]
        target = torch.tensor([[float(a in best) / len(best) for a in ACTIONS] for _, best in batch])
        loss = -(target * action_logits(batch).log_softmax(-1)).sum(-1).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 50 == 0:
            print(
                f"step {step} loss {loss.item():.3f} accuracy {accuracy():.3f} ({time.perf_counter() - started:.0f} s)"
            )


if __name__ == "__main__":
    main()
