"""Print the memory table of docs/benchmarks.md: peak memory per role against the vocabulary size.

    uv run python benchmarks/memory_table.py                          # 64 rows x 256 response tokens
    uv run python benchmarks/memory_table.py --vocabs 8192 32768 --rows 8 --old-rows 2   # a quick look

Every measurement runs in its own fresh process (`memory_bench.measure`), one after the other. The
chunked forward (now) runs at `--rows`; the unchunked one it replaced holds [positions, vocabulary] logits
(9.3 GiB per such float32 tensor at 64 x 256 positions of a 151,936 vocabulary), so it runs at `--old-rows`,
where the chunked one runs again for the old-vs-new ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memory_bench as mb


def _row(r: mb.Measurement, base: mb.Measurement | None) -> str:
    ratio = f"{r.rest_mib / base.rest_mib:.2f}x" if base is not None else "-"
    act_ratio = f"{r.activations_mib / base.activations_mib:.2f}x" if base is not None else "-"
    return (
        f"| {r.role} | {r.path} | {r.vocab:,} | {r.rows} x {r.response} | {r.params_mib:,.0f} | {r.peak_mib:,.0f} "
        f"| {r.rest_mib:,.0f} | {ratio} | {r.activations_mib:,.0f} | {act_ratio} | {r.seconds:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocabs", type=int, nargs="+", default=[49_152, 151_936])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument(
        "--old-rows", type=int, default=4, help="rows of the unchunked (old) path; 0: skip it"
    )
    parser.add_argument("--roles", nargs="+", default=list(mb.ROLES), choices=mb.ROLES)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    args = parser.parse_args()
    runs = [("chunked", args.rows)]
    if args.old_rows:
        runs += [("chunked", args.old_rows)] if args.old_rows != args.rows else []
        runs += [("unchunked", args.old_rows)]
    results: list[mb.Measurement] = []
    for role in args.roles:
        for path, rows in runs:
            for vocab in args.vocabs:
                r = mb.measure(role, path, vocab, rows, args.response, args.threads)
                print(
                    f"  {role} {path} vocab {vocab} rows {rows}: peak {r.peak_mib:,.0f} MiB", file=sys.stderr
                )
                results.append(r)
    print(
        f"Peak memory per role (random Qwen2-shaped model: hidden {mb.HIDDEN}, {mb.LAYERS} layers, tied "
        f"embeddings; {mb.PROMPT} prompt + {args.response} response tokens a row; torch threads {args.threads}; "
        f"MiB; every ratio against the smallest vocabulary of the same role, path and rows)\n"
    )
    print(
        "| role | path | vocab | rows x response | params (+grads) | peak | peak - params | vs first vocab "
        "| activations | vs first vocab | s |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        same = [b for b in results if (b.role, b.path, b.rows) == (r.role, r.path, r.rows)]
        base = min(same, key=lambda b: b.vocab)
        print(_row(r, None if base is r else base))
    print("\nOld vs new at the same rows (peak - params, and activations; unchunked / chunked):")
    for r in results:
        if r.path != "unchunked":
            continue
        new = next(
            b for b in results if (b.role, b.path, b.rows, b.vocab) == (r.role, "chunked", r.rows, r.vocab)
        )
        print(
            f"- {r.role}, vocab {r.vocab:,}, {r.rows} rows: {r.rest_mib:,.0f} / {new.rest_mib:,.0f} MiB "
            f"= {r.rest_mib / new.rest_mib:.2f}x; activations {r.activations_mib:,.0f} / "
            f"{new.activations_mib:,.0f} MiB = {r.activations_mib / max(new.activations_mib, 1):.1f}x"
        )
    if not all(r.hwm_reset for r in results):
        print("\n(peak-RSS reset unavailable: peaks are the process's lifetime maxima)")
    if args.json:
        args.json.write_text(json.dumps(mb.measurements_as_dicts(results), indent=1))


if __name__ == "__main__":
    main()
