"""Train-path benchmark P4 (see train_bench.py); `train_table.py` prints the table of docs/benchmarks.md.

    uv run pytest benchmarks/test_bench_train.py --benchmark-enable

In the default run (benchmarks disabled) it runs once on a few episodes as a smoke test of the benchmark;
with `--benchmark-enable` it runs on the issue's length mix (64 FrozenLake + 64 Sokoban episodes).
"""

from __future__ import annotations

import train_bench as tb


def test_bench_p4_padding_and_tokens_per_s(benchmark):
    full = not benchmark.disabled
    episodes, repeats = (64, 3) if full else (4, 1)
    results, info = benchmark.pedantic(
        tb.run, args=(episodes, "trajectory", 4, 2048, repeats), rounds=1, iterations=1
    )
    by_mode = {r.mode: r for r in results}
    benchmark.extra_info.update({f"{r.mode}_padding": r.padding for r in results})
    benchmark.extra_info.update({f"{r.mode}_tokens_per_s": r.tokens_per_s for r in results})
    assert info["rows"] == 2 * episodes
    # the same real tokens in every mode; packing computes the fewest slots, naive the most
    assert len({r.real_tokens for r in results}) == 1
    assert by_mode["packed"].slots <= by_mode["dynamic"].slots <= by_mode["naive"].slots
    assert by_mode["fixed"].slots <= by_mode["naive"].slots
