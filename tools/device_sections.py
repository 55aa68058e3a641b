"""The device check's sections for the GPU path (tools/device_check.py, docs/device_check.md): generation
with HF `generate` against the static slot decoder side by side, training MFU at a realistic batch, the default
`roll train` of the tiny model to its end, the `gpu` tests, and where the JSON is recorded."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATASHEET_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0}
"""Dense bf16 tensor-core peaks of the datasheets, by a name the device's name contains."""
GPU_TEST_FILES = (
    "packages/roll-strategies/tests/test_gpu.py",
    "packages/roll-strategies/tests/test_slot_decode.py",
    "packages/roll-strategies/tests/test_weight_transport.py",
    "packages/roll-algos/tests/test_device.py",
)


@dataclass(frozen=True)
class PathSizes:
    """The work of the GPU-path sections."""

    prompts: int
    """Concurrent sequences of the generation comparison (and the slot decoder's slots)."""
    prompt_tokens: int
    new_tokens: int
    train_rows: int
    """Rows of one optimiser step of the MFU measurement."""
    train_tokens: int
    micro_rows: int
    """Rows per micro-batch (a token budget of micro_rows x train_tokens)."""
    repeats: int


GPU_PATH = PathSizes(
    prompts=64, prompt_tokens=128, new_tokens=128, train_rows=16, train_tokens=2048, micro_rows=8, repeats=3
)
DRY_PATH = PathSizes(
    prompts=6, prompt_tokens=16, new_tokens=8, train_rows=4, train_tokens=32, micro_rows=2, repeats=1
)

DRY_DEFAULT_TRAIN = [
    "max_steps=1",
    "eval_steps=1",
    "train_env_manager.num_env_groups=1",
    "train_env_manager.group_size=2",
    "val_env_manager.num_env_groups=2",
]
"""The dry run's default `roll train`, cut to one step (the GPU run goes to the config's end)."""


def sync(device: Any) -> None:
    """Wait for `device`'s queued work (a no-op on the CPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _decode_paths(device: str) -> dict[str, dict[str, Any]]:
    paths: dict[str, dict[str, Any]] = {"generate": {"decode": "generate"}, "static": {"decode": "static"}}
    if device != "cpu":
        paths["static_graphs"] = {"decode": "static", "decode_graphs": True}
    return paths


def measure_generation(folder: Path, device: str, dtype: str, sizes: PathSizes) -> dict[str, Any]:
    """Greedy generation of `sizes.prompts` prompts at once by each decode path, one warm-up call then one timed
    (the stop id is outside the vocabulary: every row runs its `new_tokens`); tokens/s of each, the speed-up over
    `generate`, and how many rows each path's tokens agree with `generate`'s on (bf16 rounding may split ties)."""
    import torch
    from roll_strategies import GenerationParams, HFInferStrategy

    dev = torch.device(device)
    gen = torch.Generator().manual_seed(3)
    result: dict[str, Any] = {"prompts": sizes.prompts, "prompt_tokens": sizes.prompt_tokens}
    result["new_tokens"] = sizes.new_tokens
    reference: list[list[int]] | None = None
    for name, config in _decode_paths(device).items():
        infer = HFInferStrategy(
            folder, device=device, dtype=dtype, strategy_config={**config, "decode_slots": sizes.prompts}
        )
        vocab = infer.vocab_size
        prompts = torch.randint(8, min(vocab, 4000), (sizes.prompts, sizes.prompt_tokens), generator=gen)
        params = GenerationParams(max_new_tokens=sizes.new_tokens, greedy=True, stop_token_ids=(vocab + 1,))
        infer.generate(prompts.tolist(), params)
        sync(dev)
        started = time.perf_counter()
        outputs = infer.generate(prompts.tolist(), params)
        sync(dev)
        seconds = time.perf_counter() - started
        ids = [o.output_ids for o in outputs]
        entry = {"seconds": seconds, "tokens_per_second": sum(map(len, ids)) / seconds}
        if reference is None:
            reference = ids
        else:
            entry["rows_equal_to_generate"] = sum(a == b for a, b in zip(reference, ids, strict=True))
        result[name] = entry
        gen = torch.Generator().manual_seed(3)  # the same prompts for every path
        del infer
    base = result["generate"]["tokens_per_second"]
    for name in result:
        if isinstance(result[name], dict) and name != "generate":
            result[name]["speedup_over_generate"] = result[name]["tokens_per_second"] / base
    return {"generation": result}


def _matmul_tflops(device: Any) -> float:
    """Achieved bf16 TFLOP/s of a large square matmul on `device` (the chip's attainable peak)."""
    import torch

    n = 8192
    a = torch.randn((n, n), device=device, dtype=torch.bfloat16)
    b = torch.randn((n, n), device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    started = time.perf_counter()
    for _ in range(20):
        a @ b
    sync(device)
    return 20 * 2 * n**3 / (time.perf_counter() - started) / 1e12


def measure_mfu(folder: Path, device: str, dtype: str, sizes: PathSizes) -> dict[str, Any]:
    """hf_train steps of `train_rows` x `train_tokens` tokens in micro-batches of `micro_rows` rows: tokens/s
    and MFU = 6 x parameters x tokens / s over the datasheet's bf16 peak and over a measured matmul's."""
    import torch
    from roll_strategies import HFTrainStrategy

    dev = torch.device(device)
    train = HFTrainStrategy(folder, device=device, dtype=dtype)
    params = sum(p.numel() for p in train.model.parameters())
    gen = torch.Generator().manual_seed(0)
    vocab = min(int(train.model.config.vocab_size), 4000)
    share = sizes.micro_rows / sizes.train_rows
    micro = [
        {
            "input_ids": (
                ids := torch.randint(8, vocab, (sizes.micro_rows, sizes.train_tokens), generator=gen)
            ),
            "attention_mask": torch.ones_like(ids),
            "loss_scale": share,
        }
        for _ in range(sizes.train_rows // sizes.micro_rows)
    ]

    def nll(log_probs: Any, entropy: Any, mb: Any) -> tuple[Any, dict[str, Any]]:
        loss = -log_probs[:, 1:].mean()
        return loss, {"nll": loss.detach()}

    train.train_step(micro, nll, with_entropy=False)
    sync(dev)
    started = time.perf_counter()
    for _ in range(sizes.repeats):
        train.train_step(micro, nll, with_entropy=False)
    sync(dev)
    seconds = (time.perf_counter() - started) / sizes.repeats
    tokens = sizes.train_rows * sizes.train_tokens
    achieved = 6 * params * tokens / seconds / 1e12
    result: dict[str, Any] = {
        "rows": sizes.train_rows,
        "tokens_per_row": sizes.train_tokens,
        "micro_batch_rows": sizes.micro_rows,
        "parameters": params,
        "seconds_per_step": seconds,
        "tokens_per_second": tokens / seconds,
        "model_tflops": achieved,
        "defer_sync": train.defer_sync,
    }
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        sheet = next((peak for key, peak in DATASHEET_BF16_TFLOPS.items() if key in name), None)
        measured = _matmul_tflops(dev)
        result.update(matmul_bf16_tflops=measured, mfu_of_matmul=achieved / measured)
        if sheet is not None:
            result.update(datasheet_bf16_tflops=sheet, mfu=achieved / sheet)
    return {"mfu": result}


def _validation_curve(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            k: v
            for k, v in r.items()
            if k == "step" or k == "val/score/mean" or re.match(r"val/env/.*/success$", k)
        }
        for r in rows
        if "val/score/mean" in r
    ]


def run_pipeline(
    config: tuple[str | None, str | None], overrides: list[str], output_dir: Path
) -> tuple[float, int, list[dict[str, Any]]]:
    """A `roll train` in process of `config` ((path, name) under examples/; (None, None): the default) with
    `overrides`: its wall seconds, steps run and metrics.jsonl rows."""
    from roll_pipeline import AgenticPipeline, compose

    cfg = compose(*config, overrides, search_from=ROOT / "examples", preflight=True)
    started = time.perf_counter()
    pipeline = AgenticPipeline(cfg, progress=False)
    try:
        summary = pipeline.run()
    finally:
        pipeline.close()
    lines = (output_dir / cfg.exp_name / "metrics.jsonl").read_text().splitlines()
    return time.perf_counter() - started, summary.steps, [json.loads(line) for line in lines]


def default_train(
    output_dir: Path, device: str, dry_run: bool, max_steps: int | None = None
) -> dict[str, Any]:
    """`roll train`'s default config (the tiny model, FrozenLake) in process to its end (or `max_steps`), every
    role on `device` (cut to one step in the dry run): seconds, steps and the validation curve."""

    on_device = (
        []
        if device == "cpu"
        else [f"{r}.device_mapping=[0]" for r in ("actor_train", "actor_infer", "reference")]
    )
    overrides = [
        "cluster.backend=local",
        "track_with=[]",
        *(DRY_DEFAULT_TRAIN if dry_run else []),
        *([f"max_steps={max_steps}"] if max_steps and not dry_run else []),
        *on_device,
        f"output_dir={output_dir}",
    ]
    seconds, steps, rows = run_pipeline((None, None), overrides, output_dir)
    return {
        "default_train": {
            "seconds": seconds,
            "steps": steps,
            "overrides": overrides[:-1],
            "validation": _validation_curve(rows),
        }
    }


def gpu_tests(timeout: float = 420.0) -> dict[str, Any]:
    """The `gpu`-marked tests of `GPU_TEST_FILES`, run by pytest in a subprocess: its exit status and summary."""
    args = [
        sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(ROOT), "--import-mode=importlib",
        "-p", "no:cacheprovider", "-m", "gpu", "-q", *GPU_TEST_FILES,
    ]  # fmt: skip
    try:
        # the subprocess sees this process's modules (the unpacked wheels are on sys.path, not PYTHONPATH)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"gpu_tests": {"returncode": None, "summary": f"timed out after {timeout} s"}}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {
        "gpu_tests": {
            "returncode": done.returncode,
            "summary": lines[-1] if lines else "",
            "tail": done.stdout[-3000:],
        }
    }


def commit_of(given: str | None) -> str:
    """The commit measured: `given`, else the checkout's HEAD (with "-dirty" for uncommitted changes), else
    "unknown" (a copy without .git: pass --commit)."""
    if given:
        return given
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty.strip() else "")


def record_path(folder: Path, commit: str) -> Path:
    """docs/device_runs/<UTC date>-<commit, 12 characters>.json (in `folder`)."""
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    return folder / f"{date}-{commit[:12]}.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The device check's options for these sections and the record."""
    parser.add_argument(
        "--default-train-steps", type=int, default=None, help="cut the default roll train (default: its end)"
    )
    parser.add_argument("--commit", default=None, help="the commit measured (default: git HEAD of this tree)")
    parser.add_argument(
        "--record",
        default=None,
        help="also write the report to RECORD/<date>-<commit>.json (docs/device_runs for a kept run)",
    )
