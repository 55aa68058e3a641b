"""The device check: what roll does on one GPU, measured in one run and written as JSON (docs/device_check.md).

On a CUDA device (default `cuda:0`), with a Qwen2.5-0.5B-shaped model of random weights in bfloat16
(`roll_strategies.build_qwen_shaped_model`, all 24 layers): hf_train's train tokens/s, hf_infer's generation
tokens/s, the weight-sync seconds (GPU to GPU and through the CPU), the trainer's offload and reload seconds and
the GPU memory they free; generation of 64 sequences of 128 new tokens by HF `generate`, the static slot
decoder and the slot decoder replaying CUDA graphs, side by side; training MFU at 16 x 2048 tokens
(`device_sections`); then a 2-step `roll train` of examples/qwen2.5-0.5B-agentic with every role on device 0
(cluster.backend=local, so no Ray), the `gpu` tests, and the default `roll train` of the tiny model to its end.
`--record DIR` keeps the report as DIR/<date>-<commit>.json (docs/device_runs). `--dry-run` runs the same code
on the CPU with a tiny Qwen2-shaped model in float32 and smaller batches (under 2 minutes on an idle machine).

Needs only torch, transformers and the wheels tools/device_check_wheels.sh downloads (no Ray, vLLM or
DeepSpeed), with PYTHONPATH naming the packages' src folders:

    PYTHONPATH=packages/roll-envs/src:packages/roll-rollout/src:packages/roll-algos/src:\\
packages/roll-strategies/src:packages/roll-pipeline/src \\
    python tools/device_check.py --wheels .cache/device_wheels --out device_check.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
import traceback
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # device_sections, beside this file (also when run by runpy)
import device_sections as gpu_path  # noqa: E402
from device_sections import sync as _sync  # noqa: E402

EXAMPLE = ("qwen2.5-0.5B-agentic", "agent_val_frozen_lake")
NOT_NEEDED = ("ray", "vllm", "deepspeed")
"""Imported by none of the code the check runs (cluster.backend=local, hf strategies)."""


@dataclass(frozen=True)
class Sizes:
    """The work each measurement does."""

    rows: int
    """Rows of a train micro-batch and prompts of a generation batch."""
    train_tokens: int
    """Tokens per train row."""
    prompt_tokens: int
    new_tokens: int
    """Tokens generated per prompt (a random model rarely samples its stop token)."""
    repeats: int
    """Timed repetitions of each measurement, after one untimed warm-up."""
    groups: tuple[tuple[int, int, int], ...] = ()
    """More group shapes the share_prefix sweep times, each (rows, prompt tokens, response tokens)."""


GPU_SIZES = Sizes(
    rows=8,
    train_tokens=512,
    prompt_tokens=128,
    new_tokens=128,
    repeats=3,
    groups=((16, 384, 128), (16, 1536, 128), (8, 3968, 128), (64, 384, 128)),
)
DRY_SIZES = Sizes(rows=4, train_tokens=32, prompt_tokens=16, new_tokens=8, repeats=1, groups=((6, 40, 8),))

ROLL_TRAIN = [
    "cluster.backend=local",
    "max_steps=2",
    "eval_steps=2",
    "save_steps=100",  # no checkpoint: three copies of the model would be written
    "print_baselines=false",
    "track_with=[]",
    "train_env_manager.num_env_groups=1",
    "train_env_manager.group_size=4",
    "val_env_manager.num_env_groups=2",
    "custom_envs.FrozenLake.max_actions_per_traj=2",
    "custom_envs.FrozenLake.max_tokens_per_step=16",
    "actor_infer.generating_args.max_new_tokens=16",
    "actor_train.training_args.per_device_train_batch_size=4",
    "actor_train.training_args.gradient_accumulation_steps=1",
    "entropy_loss_coef=0.01",  # random weights score alike: the entropy term still moves the weights
]
"""2 steps of one group of 4 episodes of at most 2 turns of 16 tokens, 2 validation episodes."""

ON_THE_CPU = [
    *(f"{role}.device_mapping=[]" for role in ("actor_train", "actor_infer", "reference")),
    *(f"{role}.model_args.dtype=float32" for role in ("actor_train", "actor_infer", "reference")),
]
"""The example's roles moved from GPU 0 to the CPU (the dry run)."""


def _timed(device: Any, repeats: int, run: Any) -> float:
    """Seconds per call of `run()` over `repeats` calls, after one untimed call (warm-up, kernel choice)."""
    run()
    _sync(device)
    started = time.perf_counter()
    for _ in range(repeats):
        run()
    _sync(device)
    return (time.perf_counter() - started) / repeats


def build_model(folder: Path, *, dry_run: bool, num_layers: int) -> dict[str, Any]:
    """The model folder: Qwen2.5-0.5B-shaped (bf16) on a GPU, a tiny Qwen2 (random) for the dry run."""
    from roll_pipeline.models.warmup import vocabulary_corpus
    from roll_strategies import build_qwen_shaped_model, build_tiny_model

    started = time.perf_counter()
    if dry_run:
        build_tiny_model(folder, vocab_texts=vocabulary_corpus())
    else:
        build_qwen_shaped_model(folder, corpus=vocabulary_corpus(), num_layers=num_layers)
    info = (
        json.loads((folder / "build_info.json").read_text()) if (folder / "build_info.json").exists() else {}
    )
    return {"folder": str(folder), "build_seconds": time.perf_counter() - started, **info}


def _nll(log_probs: Any, entropy: Any, mb: Any) -> tuple[Any, dict[str, float]]:
    return -log_probs[:, 1:].mean(), {}


def measure_strategies(folder: Path, device_name: str, dtype: str, sizes: Sizes) -> dict[str, Any]:
    """Train and generation tokens/s, weight-sync seconds, offload and reload of hf_train and hf_infer."""
    import torch
    from roll_strategies import GenerationParams, HFInferStrategy, HFTrainStrategy, sync_weights
    from roll_strategies.sync.transport import Transport, device_of, select_transport

    device = torch.device(device_name)
    train = HFTrainStrategy(folder, device=device_name, dtype=dtype)
    infer = HFInferStrategy(folder, device=device_name, dtype=dtype)
    vocab = int(train.model.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(8, min(vocab, 4000), (sizes.rows, sizes.train_tokens), generator=gen)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    train_seconds = _timed(device, sizes.repeats, lambda: train.train_step([batch], _nll, with_entropy=False))

    prompts = torch.randint(8, min(vocab, 4000), (sizes.rows, sizes.prompt_tokens), generator=gen).tolist()
    params = GenerationParams(max_new_tokens=sizes.new_tokens, stop_token_ids=(vocab + 1,))
    generated: list[int] = []

    def generate() -> None:
        generated.append(sum(len(o.output_ids) for o in infer.generate(prompts, params)))

    infer_seconds = _timed(device, sizes.repeats, generate)

    auto = select_transport(device_of(train), [device_of(infer)], same_process=True)
    versions = iter(range(1, 1000))
    sync: dict[str, Any] = {"transport": auto.value}
    for name, transport in (("seconds", auto), ("seconds_via_cpu", Transport.CPU)):
        sync[name] = _timed(
            device,
            sizes.repeats,
            lambda t=transport: sync_weights(
                train, infer, version=next(versions), dtype=dtype, force=True, transport=t
            ),
        )
    sync["bytes"] = train.exporter.plan(0, dtype=dtype, bucket_bytes=1 << 30).total_bytes
    _sync(device)
    offload, reload = train.offload(), train.reload()
    # the second round shows what a run pays each step after the first (pinned host blocks come from torch's cache)
    repeat_offload, repeat_reload = train.offload(), train.reload()
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    result = {
        "train": {
            "tokens_per_second": sizes.rows * sizes.train_tokens / train_seconds,
            "seconds_per_step": train_seconds,
            "rows": sizes.rows,
            "tokens_per_row": sizes.train_tokens,
        },
        "infer": {
            "tokens_per_second": generated[-1] / infer_seconds,
            "seconds_per_batch": infer_seconds,
            "prompts": sizes.rows,
            "prompt_tokens": sizes.prompt_tokens,
            "new_tokens": sizes.new_tokens,
        },
        "weight_sync": sync,
        "offload": {
            "offload_seconds": offload.seconds,
            "reload_seconds": reload.seconds,
            "bytes_moved": offload.bytes_moved,
            "gpu_freed_bytes": offload.gpu_freed_bytes,
            "gpu_reloaded_bytes": -reload.gpu_freed_bytes,
            "repeat_offload_seconds": repeat_offload.seconds,
            "repeat_reload_seconds": repeat_reload.seconds,
        },
        "peak_gpu_bytes": peak,
    }
    return result  # train and infer go with this frame: `run` frees their memory before the roll train


def _response_nll(log_probs: Any, entropy: Any, mb: Any) -> tuple[Any, dict[str, float]]:
    mask = mb["response_mask"]
    return -(log_probs * mask).sum() / mask.sum(), {}


def _group_batch(rows: int, prompt_len: int, response_len: int, vocab: int, seed: int) -> dict[str, Any]:
    """One GRPO-like group: `rows` samples of one `prompt_len`-token prompt, each with its own response."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(8, vocab, (1, prompt_len), generator=gen).expand(rows, -1)
    responses = torch.randint(8, vocab, (rows, response_len), generator=gen)
    ids = torch.cat([prompt, responses], dim=1)
    response_mask = torch.zeros_like(ids)
    response_mask[:, prompt_len:] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": response_mask}


def _dense_and_shared_seconds(
    train: Any, device: Any, base: dict[str, Any], repeats: int
) -> dict[str, float]:
    """Seconds per train step of `base` dense and as a prefix tree, and their ratio."""
    from roll_strategies.compute.forward import SHARE_PREFIX_KEY

    result = {}
    for name, share in (("dense_seconds", False), ("shared_seconds", True)):
        mb = {**base, SHARE_PREFIX_KEY: share}
        result[name] = _timed(
            device, repeats, lambda mb=mb: train.train_step([mb], _response_nll, with_entropy=False)
        )
    return {**result, "speedup": result["dense_seconds"] / result["shared_seconds"]}


def measure_share_prefix(folder: Path, device_name: str, dtype: str, sizes: Sizes) -> dict[str, Any]:
    """One group (`sizes.rows` samples sharing a prompt of `train_tokens - new_tokens` tokens, each with its
    own `new_tokens`-token response) trained dense and as a prefix tree: seconds per train step of each, and the
    largest log-prob difference between the two forwards on the same weights (bf16 rounding on a GPU); then the
    same step times for each shape of `sizes.groups` (`sweep`)."""
    import torch
    from roll_strategies import HFTrainStrategy
    from roll_strategies.compute.forward import SHARE_PREFIX_KEY, micro_batch_outputs

    device = torch.device(device_name)
    train = HFTrainStrategy(folder, device=device_name, dtype=dtype, share_prefix=True)
    vocab = min(int(train.model.config.vocab_size), 4000)
    prompt_len = sizes.train_tokens - sizes.new_tokens
    base = _group_batch(sizes.rows, prompt_len, sizes.new_tokens, vocab, seed=1)
    result: dict[str, Any] = {
        "rows": sizes.rows,
        "prompt_tokens": prompt_len,
        "response_tokens": sizes.new_tokens,
        **_dense_and_shared_seconds(train, device, base, sizes.repeats),
    }
    on_device = {k: v.to(device) for k, v in base.items()}
    with torch.no_grad():
        dense, shared = (
            micro_batch_outputs(train.model, {**on_device, SHARE_PREFIX_KEY: share}, with_entropy=False)
            for share in (False, True)
        )
    result["max_abs_log_prob_diff"] = float((dense.log_probs - shared.log_probs).abs().max())
    result["mean_abs_log_prob"] = float(dense.log_probs[on_device["response_mask"].bool()].abs().mean())
    del dense, shared, on_device
    result["sweep"] = []
    for rows, prompt_tokens, response_tokens in sizes.groups:
        group = _group_batch(rows, prompt_tokens, response_tokens, vocab, seed=2)
        shape = {"rows": rows, "prompt_tokens": prompt_tokens, "response_tokens": response_tokens}
        result["sweep"].append({**shape, **_dense_and_shared_seconds(train, device, group, sizes.repeats)})
    return {"share_prefix": result}


def roll_train(folder: Path, output_dir: Path, *, dry_run: bool) -> dict[str, Any]:
    """A 2-step `roll train` of the Qwen example on `folder`, every role on GPU 0 (on the CPU when `dry_run`)."""
    overrides = [
        *ROLL_TRAIN,
        *(ON_THE_CPU if dry_run else []),
        f"pretrain={folder}",
        f"output_dir={output_dir}",
    ]
    seconds, steps, rows = gpu_path.run_pipeline(EXAMPLE, overrides, output_dir)
    trained = [r for r in rows if r.get("step", 0) > 0]
    keep = (
        "time/step_total",
        "weight_sync/seconds",
        "weight_sync/version",
        "actor/grad_norm",
        "memory/rss_gb",
    )
    return {
        "seconds": seconds,
        "steps": steps,
        "overrides": overrides[:-2],
        "per_step": [{k: r[k] for k in ("step", *keep) if k in r} for r in trained],
    }


def add_wheels(folder: Path, target: Path) -> list[str]:
    """Unpack the wheels of `folder` this interpreter can load (pure Python, or built for its CPython version)
    into `target` and put it first on sys.path: the device check's dependencies without pip or a network."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    used = []
    for wheel in sorted(folder.glob("*.whl")):
        python_tag = wheel.name.split("-")[-3]
        if python_tag.startswith("py3") or python_tag == tag:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(target)
            used.append(wheel.name)
    if not used:
        raise SystemExit(
            f"Expected wheels in {folder} (tools/device_check_wheels.sh writes them), found none."
        )
    sys.path.insert(0, str(target))
    return used


def _section(report: dict[str, Any], out: Path, name: str, measure: Any) -> None:
    """Run one measurement into `report` (its keys, or `errors[name]` with the traceback when it raises), then
    write the report so far: a later section's crash or a timeout keeps what the earlier ones measured."""
    started = time.perf_counter()
    try:
        report.update(measure())
    except Exception:  # a GPU run is rare: record the failure and go on to the next measurement
        report.setdefault("errors", {})[name] = traceback.format_exc()[-6000:]
        print(f"[device_check] {name} failed:\n{report['errors'][name]}", file=sys.stderr, flush=True)
    report.setdefault("section_seconds", {})[name] = round(time.perf_counter() - started, 2)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"[device_check] {name}: {report['section_seconds'][name]} s", flush=True)


def _free(device: str) -> None:
    """Release the memory of the strategies the last section built (they went with its frame)."""
    import torch

    gc.collect()
    if device != "cpu":
        torch.cuda.empty_cache()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement, in order; the JSON report (also written to `args.out` after each section)."""
    import torch
    import transformers

    started = time.perf_counter()
    device = "cpu" if args.dry_run else args.device
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("Expected a CUDA device, found none; run with --dry-run for the CPU rehearsal.")
    dtype = "float32" if args.dry_run else "bfloat16"
    work = Path(args.work or tempfile.mkdtemp(prefix="roll_device_check_"))
    out = Path(args.out)
    report: dict[str, Any] = {
        "dry_run": args.dry_run,
        "device": device,
        "device_name": torch.cuda.get_device_name(device)
        if device != "cpu"
        else platform.processor() or "cpu",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": dtype,
        "commit": gpu_path.commit_of(args.commit),
    }
    model = work / "model"
    sizes = DRY_SIZES if args.dry_run else GPU_SIZES
    _section(
        report,
        out,
        "model",
        lambda: {"model": build_model(model, dry_run=args.dry_run, num_layers=args.layers)},
    )
    if "model" in report.get("errors", {}):
        return report  # every later measurement needs the model
    _section(report, out, "strategies", lambda: measure_strategies(model, device, dtype, sizes))
    _free(device)
    path_sizes = gpu_path.DRY_PATH if args.dry_run else gpu_path.GPU_PATH
    _section(report, out, "generation", lambda: gpu_path.measure_generation(model, device, dtype, path_sizes))
    _free(device)
    _section(report, out, "mfu", lambda: gpu_path.measure_mfu(model, device, dtype, path_sizes))
    _free(device)
    _section(report, out, "share_prefix", lambda: measure_share_prefix(model, device, dtype, sizes))
    _free(device)
    _section(
        report,
        out,
        "roll_train",
        lambda: {"roll_train": roll_train(model, work / "runs", dry_run=args.dry_run)},
    )
    _free(device)
    if not args.dry_run:
        _section(report, out, "gpu_tests", gpu_path.gpu_tests)
    _section(
        report,
        out,
        "default_train",
        lambda: gpu_path.default_train(work / "default", device, args.dry_run, args.default_train_steps),
    )
    # roll never imports them; transformers imports DeepSpeed on its own where it is installed
    report["imported"] = sorted(m for m in NOT_NEEDED if m in sys.modules)
    report["seconds_total"] = time.perf_counter() - started
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="the CPU rehearsal with a tiny model")
    parser.add_argument("--device", default="cuda:0", help="the CUDA device measured (default cuda:0)")
    parser.add_argument(
        "--layers", type=int, default=24, help="decoder layers of the Qwen-shaped model (of 24)"
    )
    parser.add_argument("--out", default="device_check.json", help="where the JSON report goes")
    parser.add_argument(
        "--work", default=None, help="folder for the model and the run (default: a temp folder)"
    )
    parser.add_argument(
        "--wheels",
        default=None,
        help="a folder of tools/device_check_wheels.sh: its wheels are unpacked and used",
    )
    gpu_path.add_arguments(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model is a local folder: never wait on a network
    wheels = (
        add_wheels(Path(args.wheels), Path(tempfile.mkdtemp(prefix="roll_wheels_"))) if args.wheels else []
    )
    report = {**run(args), "wheels": wheels}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    if args.record:
        kept = gpu_path.record_path(Path(args.record), report["commit"])
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(report, indent=2) + "\n")
        print(f"[device_check] recorded {kept}", flush=True)
    print(json.dumps(report, indent=2))
    return 1 if report.get("errors") else 0


if __name__ == "__main__":
    raise SystemExit(main())
