"""Build a Qwen2.5-0.5B-Instruct-shaped model (random weights, Qwen-style tokenizer learnt from the envs' texts)
and file it in the Hugging Face cache as `Qwen/Qwen2.5-0.5B-Instruct`, to try the real-model example offline:

    uv run python tools/build_qwen_shaped.py --out /tmp/qwen-shaped --num-layers 2
    HF_HUB_OFFLINE=1 roll config --config_path qwen2.5-0.5B-agentic --config_name agent_val_frozen_lake

The weights are random: the model plays no better than chance. It takes the cache entry's place only when
none is there (a real download is never overwritten unless --force). The cache is HF_HUB_CACHE, else
HF_HOME/hub (as for roll and huggingface_hub), or --hub-cache.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from roll_pipeline.models.hub import add_to_hub_cache, hub_cache_dir
from roll_pipeline.models.warmup import vocabulary_corpus
from roll_strategies import build_qwen_shaped_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="model folder to write (created)")
    parser.add_argument("--num-layers", type=int, default=24, help="decoder layers (24 is the real depth)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hub-id", default="Qwen/Qwen2.5-0.5B-Instruct", help="id to file it under")
    parser.add_argument(
        "--hub-cache", type=Path, default=None, help="default: HF_HUB_CACHE, else HF_HOME/hub"
    )
    parser.add_argument("--no-hub", action="store_true", help="only write --out")
    parser.add_argument("--force", action="store_true", help="file it even where the id is already cached")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    out = build_qwen_shaped_model(
        args.out, corpus=vocabulary_corpus(), num_layers=args.num_layers, seed=args.seed
    )
    info = json.loads((out / "build_info.json").read_text())
    print(
        f"built {out} in {time.perf_counter() - start:.1f}s: {info['num_parameters']:,} parameters, "
        f"{info['num_layers']} layers, {info['tokenizer_tokens']} tokenizer tokens"
    )
    if args.no_hub:
        return 0
    cache = args.hub_cache or hub_cache_dir()
    entry = cache / f"models--{args.hub_id.replace('/', '--')}"
    if entry.exists() and not args.force:
        print(f"{args.hub_id} is already in {cache}: left as it is (--force files this model there instead)")
        return 1
    snapshot = add_to_hub_cache(out, args.hub_id, cache_dir=cache)
    print(f"filed as {args.hub_id}: {snapshot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
