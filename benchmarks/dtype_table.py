"""float32 against bfloat16 on the CPU: one training step and one forward pass of the SmolLM2 four_choice recipe.

The workload of examples/smollm2-cpu-agentic/agent_four_choice.yaml: 64 four_choice rows (the env's
instruction, SmolLM2's chat template and the response prefix `The answer is <answer>`, about 81 prompt
tokens, then a 4-token answer `C</answer>`), trained by the real `HFTrainStrategy.train_step` with the
pipeline's `ActorLoss` (bfloat16: the model computes in bfloat16, AdamW steps float32 master weights), and
their log-probs computed without gradient (`compute_log_probs`, what a reference or a recompute costs).
The dtypes run round-robin after a warm-up each, so both meet the same load; min over the repeats.

bfloat16 is fast on a CPU with AMX or avx512_bf16 (the table's header says whether this one has them);
elsewhere PyTorch emulates it and float32 is faster. Needs the converted SmolLM2
(`uv run python tools/convert_gguf.py --fetch-smollm2`); `--model builtin:tiny-four-choice` runs without it.

    uv run python benchmarks/dtype_table.py               # the table of docs/benchmarks.md
    uv run python benchmarks/dtype_table.py --threads 2 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import roll_envs
import torch
import train_bench as tb
from roll_pipeline.assembly.settings import actor_loss
from roll_pipeline.config.compose import tiny_config
from roll_pipeline.models.cache import resolve_pretrain
from roll_pipeline.trainer.samples import build_samples
from roll_rollout import PromptBuilder, Trajectory, Turn

SMOLLM2 = "smollm2"
PREFIX = "The answer is <answer>"
DTYPES = ("float32", "bfloat16")


def model_path(name: str) -> str:
    """The converted SmolLM2 folder (`smollm2`), or any `pretrain` value roll resolves."""
    if name != SMOLLM2:
        return str(resolve_pretrain(name))
    from roll_strategies.models.gguf import smollm2_folder

    try:
        return str(smollm2_folder())
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from None


def four_choice_rows(tokenizer, rows: int) -> list[Trajectory]:
    """`rows` one-turn four_choice trajectories as the recipe's rollout builds them."""
    env = roll_envs.make("four_choice")
    builder = PromptBuilder(tokenizer, env.instruction, 0, response_prefix=PREFIX)
    answer = tokenizer.encode("C</answer>", add_special_tokens=False)
    trajectories = []
    for seed in range(rows):
        observation, _ = env.reset(seed=seed)
        turn = Turn(
            builder.first_prompt(observation), answer, [-1.0] * len(answer), 0.0, True, True, observation
        )
        trajectories.append(
            Trajectory(env_id=seed, group_id=seed // 8, episode_id=seed, tag="FourChoice", seed=seed)
        )
        trajectories[-1].turns.append(turn)
    return trajectories


def cpu_bf16_flags() -> str:
    """The CPU's bfloat16 instruction sets, as /proc/cpuinfo names them ('none' without them)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    return ", ".join(sorted(flags & {"amx_bf16", "avx512_bf16"})) or "none"


def run(model: str, rows: int, micro_batch_rows: int, repeats: int) -> dict[str, dict[str, float]]:
    """{dtype: {"train_s", "forward_s", "tokens"}} for one train step and one forward pass of `rows` rows."""
    from roll_strategies import HFTrainStrategy, OptimizerSettings

    path = model_path(model)
    strategies = {
        dtype: HFTrainStrategy(path, dtype=dtype, optimizer=OptimizerSettings(learning_rate=2e-5))
        for dtype in DTYPES
    }
    samples = build_samples(four_choice_rows(strategies["float32"].tokenizer, rows), 0, "step")
    plan, _ = tb.micro_batches(samples, "fixed", micro_batch_rows, 8192)
    batch = {"input_ids": samples.input_ids, "attention_mask": samples.attention_mask}
    loss_fn = actor_loss(tiny_config(skip_confident_tokens=None), 0.0)
    times: dict[str, dict[str, list[float]]] = {d: {"train_s": [], "forward_s": []} for d in DTYPES}
    for rep in range(repeats + 1):
        for dtype, strategy in strategies.items():
            start = time.perf_counter()
            strategy.train_step(plan, loss_fn, with_entropy=True, lr_scale=0.0)  # lr 0: alike repeats
            middle = time.perf_counter()
            strategy.compute_log_probs(batch, micro_batch_rows)
            if rep:  # the first round warms up
                times[dtype]["train_s"].append(middle - start)
                times[dtype]["forward_s"].append(time.perf_counter() - middle)
    tokens = float(samples.attention_mask.sum())
    return {
        d: {"train_s": min(t["train_s"]), "forward_s": min(t["forward_s"]), "tokens": tokens}
        for d, t in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", default=SMOLLM2, help="smollm2, or a pretrain value (folder, builtin:NAME)"
    )
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument(
        "--micro-batch-rows", type=int, default=8, help="the recipe's per_device_train_batch_size"
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the recipe: 1 per role)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    found = run(args.model, args.rows, args.micro_batch_rows, args.repeats)
    print(
        f"{args.model}: {args.rows} four_choice rows, {int(found['float32']['tokens'])} tokens; torch threads "
        f"{torch.get_num_threads()}; CPU bfloat16 instructions: {cpu_bf16_flags()}; load {os.getloadavg()[0]:.1f}"
    )
    print("| dtype | train step (s) | train tokens/s | forward (s) | forward tokens/s |")
    print("|---|---:|---:|---:|---:|")
    for dtype, r in found.items():
        print(
            f"| {dtype} | {r['train_s']:.2f} | {r['tokens'] / r['train_s']:,.0f} | {r['forward_s']:.2f} | "
            f"{r['tokens'] / r['forward_s']:,.0f} |"
        )
    fp32, bf16 = found["float32"], found["bfloat16"]
    print(
        f"bfloat16 / float32 speed: train {fp32['train_s'] / bf16['train_s']:.2f}x, "
        f"forward {fp32['forward_s'] / bf16['forward_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
