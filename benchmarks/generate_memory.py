"""Peak memory of one hf_infer `generate` call: every step's logits kept (before) vs the sampled log-probs only.

    uv run python benchmarks/generate_memory.py                      # 64 rows x 64 new tokens, vocab 49152 and 151936
    uv run python benchmarks/generate_memory.py --rows 16 --new-tokens 32 --vocab 49152

"old" is hf_infer's previous generate: `generate(output_logits=True)` keeps [rows, new tokens, vocab] float32
logits, stacked and log-softmaxed after the call (each a full copy). "new" is `HFInferStrategy.generate`
(`SampledLogProbs`: one [rows, vocab] row held at a time). The model is a random LlamaForCausalLM (hidden 64,
2 layers) with the given vocabulary, so the vocabulary-sized tensors dominate as they do at Qwen sizes.
Each (vocab, way) runs in a fresh process (glibc's mmap threshold fixed, so RSS follows live memory): the
call runs once to warm up, the peak RSS is reset (/proc/self/clear_refs), and the second call's peak RSS
(VmHWM) minus the RSS before it is the call's extra peak.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from memory_bench import reset_peak, status_mib

ROWS, NEW_TOKENS, VOCABS = 64, 64, (49152, 151936)  # SmolLM2's and Qwen2.5's vocabulary sizes
PROMPT_TOKENS = 16


def build_model_folder(folder: Path, vocab: int) -> Path:
    """A random LlamaForCausalLM (hidden 64, 2 layers, `vocab` outputs) with the tiny tokenizer (its ids are
    a prefix of the vocabulary: pad and eos exist; nothing here decodes)."""
    from roll_strategies.models.tiny_tokenizer import build_tiny_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    build_tiny_tokenizer(["Left Right Up Down"]).save_pretrained(folder)
    return folder


def old_generate(strategy, prompts: list[list[int]], params) -> torch.Tensor:
    """hf_infer's previous generate, up to the log-probs: [B, N] from the kept [B, N, V] logits."""
    from roll_strategies.infer.sampling import KeyedSampler, row_keys
    from transformers import GenerationConfig, LogitsProcessorList

    input_ids, mask = strategy._pad_left(prompts)
    keys = row_keys(strategy.seed, 0, len(prompts), None)
    sampler = KeyedSampler(keys, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
    config = GenerationConfig(
        max_new_tokens=params.max_new_tokens,
        do_sample=False,
        eos_token_id=[int(strategy.tokenizer.eos_token_id)],
        pad_token_id=int(strategy.tokenizer.pad_token_id),
        output_logits=True,
        return_dict_in_generate=True,
        use_cache=True,
    )
    with torch.no_grad():
        out = strategy.model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            generation_config=config,
            logits_processor=LogitsProcessorList([sampler]),
        )
    new_ids = out.sequences[:, input_ids.shape[1] :].cpu()
    logits = torch.stack(out.logits, dim=1).float().cpu()  # [B, N, V] raw logits
    return (
        torch.log_softmax(logits / params.temperature, dim=-1).gather(-1, new_ids.unsqueeze(-1)).squeeze(-1)
    )


def measure(folder: Path, way: str, rows: int, new_tokens: int) -> dict[str, float]:
    """In this process: extra peak RSS (MiB) and seconds of one generate call the `way` ("old" / "new")."""
    from roll_strategies import GenerationParams, HFInferStrategy

    torch.set_num_threads(1)
    strategy = HFInferStrategy(folder, seed=0)
    prompts = [[8 + (r * 7 + i) % 250 for i in range(PROMPT_TOKENS)] for r in range(rows)]
    params = GenerationParams(max_new_tokens=new_tokens)
    run = (
        (lambda: old_generate(strategy, prompts, params))
        if way == "old"
        else (lambda: strategy.generate(prompts, params))
    )
    run()  # warm-up: the same call, so lazy imports and one-time initialisation are not counted
    reset_peak(required=True)
    before = status_mib("VmRSS")
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    return {"extra_peak_mib": round(status_mib("VmHWM") - before, 1), "seconds": round(seconds, 2)}


def measure_in_subprocess(folder: Path, way: str, rows: int, new_tokens: int) -> dict[str, float]:
    """`measure` in a fresh Python process: no allocator state or cached memory carried over from others."""
    command = [sys.executable, __file__, "--child", str(folder), way, str(rows), str(new_tokens)]
    # A fixed mmap threshold: every tensor above 128 KiB is mapped and returned on free, so RSS follows live
    # memory. Without it glibc raises the threshold after the first frees and serves later [B, V] tensors from
    # a heap whose fragmentation grows RSS step by step (measured: +50 MiB over 48 steps for ~30 MiB live).
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: int, new_tokens: int, vocabs: tuple[int, ...]) -> list[dict[str, float]]:
    """One line per vocabulary: old and new extra peak (MiB) and seconds, and the [B, N, V] float32 size."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for vocab in vocabs:
            folder = build_model_folder(Path(tmp) / f"v{vocab}", vocab)
            old = measure_in_subprocess(folder, "old", rows, new_tokens)
            new = measure_in_subprocess(folder, "new", rows, new_tokens)
            lines.append(
                {
                    "vocab": vocab,
                    "logits_mib": round(rows * new_tokens * vocab * 4 / 2**20, 1),
                    "old_peak_mib": old["extra_peak_mib"],
                    "new_peak_mib": new["extra_peak_mib"],
                    "old_s": old["seconds"],
                    "new_s": new["seconds"],
                }
            )
    return lines


def format_table(lines: list[dict[str, float]], rows: int, new_tokens: int) -> str:
    header = (
        f"generate {rows} rows x {new_tokens} new tokens (random Llama, hidden 64, 2 layers; CPU, 1 thread)\n"
        "| vocab | [B,N,V] fp32 MiB | old extra peak MiB | new extra peak MiB | old s | new s |\n"
        "|---:|---:|---:|---:|---:|---:|"
    )
    body = [
        f"| {x['vocab']} | {x['logits_mib']} | {x['old_peak_mib']} | {x['new_peak_mib']} | {x['old_s']} | {x['new_s']} |"
        for x in lines
    ]
    return "\n".join([header, *body])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        folder, way, rows, new_tokens = sys.argv[2:6]
        print(json.dumps(measure(Path(folder), way, int(rows), int(new_tokens))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    parser.add_argument("--vocab", type=int, nargs="+", default=list(VOCABS))
    args = parser.parse_args()
    print(format_table(table(args.rows, args.new_tokens, tuple(args.vocab)), args.rows, args.new_tokens))


if __name__ == "__main__":
    main()
