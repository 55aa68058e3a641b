"""Weight-sync benchmark: seconds, MB/s and peak extra memory per trainer -> inference sync, on the CPU.

    uv run python benchmarks/weight_sync.py                      # tiny + Qwen2.5-0.5B-shaped, every mode
    uv run python benchmarks/weight_sync.py --models tiny --repeats 5

Each case runs in a fresh subprocess (so peak memory is its own): a trainer model (float32, random
weights from the config) and an inference model (the case's dtype) are built, then synced `repeats`
times with the code the strategies use:

- one-shot: `export_named_weights` (a float32 numpy copy of every tensor, today's path) then the
  receiver's strict `replace` (cast into the inference model);
- bucketed: `WeightExporter.plan` / `.bucket` (converted to the inference dtype, at most bucket_mb per
  bucket) into `WeightReceiver.receive` (staged, applied when the last bucket arrives).

Reported: seconds per sync (median), MB/s = bytes moved / seconds (bytes in the transfer dtype), and the
peak resident memory above the two models during a sync (the kernel's VmHWM, reset before each sync;
a sampling thread was tried first and slowed the sync it measured by 2x).
The transfer between processes (Ray object store) is not included; this measures packing, casting,
staging and applying.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

MODELS = {
    "tiny": dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=800,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    ),
    # Qwen2.5-0.5B's config.json (hidden 896, 24 layers, 14 heads / 2 KV heads, vocab 151936, tied)
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
}
CASES = [  # (mode, inference dtype, bucket MiB)
    ("one-shot", "float32", 0),
    ("bucketed", "float32", 64),
    ("one-shot", "bfloat16", 0),
    ("bucketed", "bfloat16", 16),
    ("bucketed", "bfloat16", 64),
    ("bucketed", "bfloat16", 256),
]


def run_case(model: str, mode: str, dtype: str, bucket_mb: int, repeats: int) -> dict[str, object]:
    """One case in this process (called in the subprocess)."""
    import torch
    from memory_bench import reset_peak, status_mib
    from roll_strategies import WeightExporter, WeightReceiver, export_named_weights, load_named_weights
    from roll_strategies.models._loading import resolve_dtype
    from roll_strategies.sync.weights import tensor_shape, unique_named_tensors
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**MODELS[model])
    train = Qwen2ForCausalLM(config).eval()
    infer = Qwen2ForCausalLM._from_config(config, dtype=resolve_dtype(dtype)).eval()  # no float32 detour
    assert next(infer.parameters()).dtype == resolve_dtype(dtype)
    expected = {n: tensor_shape(t) for n, t in unique_named_tensors(infer).items()}
    receiver = WeightReceiver(expected, lambda tensors: load_named_weights(infer, tensors))
    exporter = WeightExporter(train)
    seconds, peaks, nbytes, buckets = [], [], 0, 1
    for version in range(1, repeats + 1):
        with torch.no_grad():
            train.model.norm.weight.add_(1e-3)  # new weights each round
        exporter.bump()
        reset_peak(required=True)
        base = status_mib("VmRSS")
        started = time.perf_counter()
        if mode == "one-shot":
            exported = export_named_weights(train)
            nbytes = sum(a.nbytes for a in exported.values())
            receiver.replace(exported, version)
            del exported
        else:
            plan = exporter.plan(version, dtype=dtype, bucket_bytes=bucket_mb << 20)
            buckets, nbytes = plan.num_buckets, plan.total_bytes
            for index in range(plan.num_buckets):
                receiver.receive(exporter.bucket(plan, index))
        seconds.append(time.perf_counter() - started)
        peaks.append(status_mib("VmHWM") - base)
    assert receiver.policy_version == repeats
    median = statistics.median(seconds)
    return {
        "model": model,
        "parameters_m": round(sum(p.numel() for p in train.parameters()) / 1e6, 1),
        "mode": mode,
        "dtype": dtype,
        "bucket_mb": bucket_mb or None,
        "buckets": buckets,
        "mb_moved": round(nbytes / 1e6, 1),
        "seconds": round(median, 3),
        "mb_per_s": round(nbytes / 1e6 / median, 1),
        "peak_extra_mb": round(max(peaks) * 2**20 / 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--case", nargs=4, metavar=("MODEL", "MODE", "DTYPE", "BUCKET_MB"), help=argparse.SUPPRESS
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.case:
        import torch

        torch.set_num_threads(args.threads)
        model, mode, dtype, bucket = args.case
        print(json.dumps(run_case(model, mode, dtype, int(bucket), args.repeats)))
        return 0
    rows = []
    for model in args.models:
        for mode, dtype, bucket in CASES:
            cmd = [sys.executable, __file__, "--case", model, mode, dtype, str(bucket)]
            cmd += ["--repeats", str(args.repeats), "--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    header = "| model | mode | dtype | bucket MiB | buckets | MB moved | s / sync | MB/s | peak extra MB |"
    print("\n" + header + "\n|" + "---|" * 9)
    for r in rows:
        print(
            f"| {r['model']} ({r['parameters_m']}M) | {r['mode']} | {r['dtype']} | {r['bucket_mb'] or '-'} | "
            f"{r['buckets']} | {r['mb_moved']} | {r['seconds']} | {r['mb_per_s']} | {r['peak_extra_mb']} |"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
