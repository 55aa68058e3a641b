"""hf_infer generate: time of the new call, and its peak memory next to the old full-logits one.

    uv run pytest benchmarks/test_bench_generate.py --benchmark-enable -s

The 64 rows x 64 new tokens table at vocabularies 49152 and 151936 comes from
`uv run python benchmarks/generate_memory.py` (several GiB for the old way); here a smaller shape.
"""

from __future__ import annotations

import pytest
from generate_memory import build_model_folder, format_table, table
from roll_strategies import GenerationParams, HFInferStrategy


@pytest.fixture(scope="module")
def strategy(tmp_path_factory: pytest.TempPathFactory) -> HFInferStrategy:
    return HFInferStrategy(build_model_folder(tmp_path_factory.mktemp("gen") / "m", 49152), seed=0)


def test_generate_16x16_vocab_49k(benchmark, strategy):
    prompts = [[8 + (r * 7 + i) % 250 for i in range(16)] for r in range(16)]
    outs = benchmark(lambda: strategy.generate(prompts, GenerationParams(max_new_tokens=16)))
    assert all(len(o.output_ids) == len(o.log_probs) >= 1 for o in outs)


@pytest.mark.slow
def test_peak_memory_stays_flat_in_new_tokens():
    rows, new_tokens = 16, 48
    lines = table(rows, new_tokens, (49152,))
    print("\n" + format_table(lines, rows, new_tokens))
    (line,) = lines
    # The old way holds the [B, N, V] logits about three times over (tuple, stack, log-softmax); the new one a
    # few [B, V] rows, whatever N is.
    assert line["old_peak_mib"] > 2 * line["logits_mib"]
    assert line["new_peak_mib"] < line["logits_mib"] / 4
