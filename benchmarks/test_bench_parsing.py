"""Parsing cost on adversarial model output, 1k to 1M characters (pytest-benchmark).

Two measurements per input kind and length:

- `window`: `parse_turn` as every env calls it: only the last MAX_PARSE_CHARS characters are looked at,
  so the cost stops growing at 64k characters (the cost per character falls);
- `full`: `extract_answer(text, max_chars=None)`, the whole text scanned: the cost per character stays
  flat, i.e. no pattern backtracks.

    uv run pytest benchmarks/test_bench_parsing.py --benchmark-enable -s

With `-s` a table of nanoseconds per character is printed at the end (the one in docs/benchmarks.md).
The inputs are `ADVERSARIAL` of packages/roll-envs/tests/test_parsing.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from package_tests import load_test_module
from roll_envs.parsing import extract_answer, parse_turn

SIZES = (1_000, 10_000, 100_000, 1_000_000)
VOCAB = ["Left", "Down", "Right", "Up"]


ADVERSARIAL: dict[str, Callable[[int], str]] = load_test_module(
    "packages/roll-envs/tests/test_parsing.py", "roll_parsing_tests"
).ADVERSARIAL
_RESULTS: dict[tuple[str, str, int], float] = {}


@pytest.fixture(scope="module", autouse=True)
def _print_table() -> Iterator[None]:
    yield
    if not _RESULTS:
        return
    print("\n\nns per character (min over rounds); window = parse_turn, full = no window")
    print("| input | mode | " + " | ".join(f"{n:,}" for n in SIZES) + " |")
    print("|---|---|" + "---:|" * len(SIZES))
    for kind in sorted(ADVERSARIAL):
        for mode in ("window", "full"):
            cells = [_RESULTS.get((kind, mode, n)) for n in SIZES]
            row = " | ".join("" if c is None else f"{c:.2f}" for c in cells)
            print(f"| {kind} | {mode} | {row} |")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", ["window", "full"])
@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_bench_parse_adversarial(benchmark, kind, mode, size):
    text = ADVERSARIAL[kind](size)
    if mode == "window":
        turn = benchmark(parse_turn, text, VOCAB)
        assert not turn.valid and turn.answer is None
    else:
        assert benchmark(lambda: extract_answer(text, max_chars=None)) is None
    if not benchmark.disabled:
        _RESULTS[(kind, mode, size)] = benchmark.stats.stats.min / len(text) * 1e9
