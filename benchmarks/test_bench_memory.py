"""Memory flat in the vocabulary (see memory_bench.py); `memory_table.py` prints the table of docs/benchmarks.md.

    uv run pytest benchmarks/test_bench_memory.py --benchmark-enable -s

In the default run (benchmarks disabled) `train_kl` runs once at a small size (8 rows x 128 response tokens,
vocabularies 8,192 and 32,768) as a check of the claim; with `--benchmark-enable` at the issue's size: 64
rows x 256 response tokens at the vocabularies of SmolLM2 (49,152) and Qwen2.5 (151,936). Either way the
peak memory apart from the parameters (+ gradients) of the larger vocabulary must stay within 1.5x of the
smaller one's, and below the unchunked computation's at the larger vocabulary (small size only: at the
issue's size it needs ~9 GiB a [positions, vocabulary] tensor).
"""

from __future__ import annotations

import memory_bench as mb
import pytest

SMOKE_ROLES = ("train_kl",)
"""Checked in the default run: the actor's forward + backward with the exact KL (chunked head, recomputed in
the backward, the frozen reference's chunks alongside): three fresh processes of a few seconds each."""


@pytest.mark.parametrize("role", mb.ROLES)
def test_bench_memory_is_flat_in_the_vocabulary(benchmark, role):
    full = not benchmark.disabled
    if not full and role not in SMOKE_ROLES:
        pytest.skip("the default run checks train_kl only; --benchmark-enable measures every role")
    (small, large), rows, response = ((49_152, 151_936), 64, 256) if full else ((8_192, 32_768), 8, 128)

    def run() -> list[mb.Measurement]:
        return [mb.measure(role, "chunked", vocab, rows, response) for vocab in (small, large)]

    low, high = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(
        {f"{r.vocab}_{k}": v for r in (low, high) for k, v in mb.measurements_as_dicts([r])[0].items()}
    )
    assert high.rest_mib <= 1.5 * low.rest_mib, (low, high)
    if not full:
        old = mb.measure(role, "unchunked", large, rows, response)
        assert high.activations_mib < old.activations_mib, (high, old)
