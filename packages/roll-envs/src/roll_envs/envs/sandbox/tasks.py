"""The sandbox's built-in tasks: four families, each a small generator seeded by the episode, each answer
checked by code.

A family has variants (the question asked of the generated data); `SPLITS` gives each split its own
variants, so the held-out split asks questions no training episode asks, on data drawn the same way.

- `table`: computing from a generated CSV file (`sales.csv`): sums, counts, means, the best product.
- `text`: string puzzles on a generated text file (`text.txt`): counts, runs, word order.
- `array`: array puzzles on a generated JSON list (`numbers.json`): subarrays, runs, pairs, order.
- `edit`: file edits on a generated `settings.ini`, checked by the file's content after the episode.
"""

from __future__ import annotations

import json
import os
import stat
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import combinations, groupby, pairwise
from pathlib import Path
from typing import Literal

import numpy as np

Split = Literal["train", "held_out"]

REGIONS = ("north", "south", "east", "west")
PRODUCTS = ("anvil", "bolt", "cable", "drill", "easel", "funnel", "gasket", "hinge")
WORDS = ("red", "blue", "tree", "stone", "river", "cloud", "lamp", "bird", "gold", "salt")
KEYS = ("timeout", "retries", "port", "host", "mode", "level", "cache", "workers", "debug", "region")
MAX_CHECKED_FILE = 1 << 20
"""A file an `edit` task checks is read up to this many bytes (a larger one fails the check)."""


@dataclass(frozen=True)
class Task:
    """One generated task: what the agent is told, the files it starts with, and the expected result.

    `answer` is compared with the submitted answer (as numbers within `tolerance` when it is a number, else
    as stripped text); `expected_files` (relative path -> content) must hold after the episode, and then
    the submitted text is not checked.
    """

    family: str
    variant: str
    prompt: str
    files: Mapping[str, str]
    answer: str = ""
    tolerance: float = 0.0
    expected_files: Mapping[str, str] = field(default_factory=dict)


def _number(text: str) -> float | None:
    try:
        value = float(text.strip().strip("\"'"))
    except ValueError:
        return None
    return value if np.isfinite(value) else None


def read_regular(path: Path, limit: int = MAX_CHECKED_FILE) -> str | None:
    """The text of `path` if it is a regular file (not a link, which the agent could point anywhere) of at
    most `limit` bytes, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    return data.decode("utf-8", errors="replace") if len(data) <= limit else None


def check_answer(task: Task, submitted: str, work: Path) -> bool:
    """Whether `submitted` (and, for file edits, the files under `work`) solves `task`."""
    if task.expected_files:
        for name, content in task.expected_files.items():
            found = read_regular(work / name)
            if found is None or found.rstrip("\n") != content.rstrip("\n"):
                return False
        return True
    expected, got = _number(task.answer), _number(submitted)
    if expected is not None:
        return got is not None and abs(got - expected) <= task.tolerance
    return submitted.strip() == task.answer


# ---- table: computing from a generated CSV file ----------------------------------------------------


def table_task(rng: np.random.Generator, variant: str) -> Task:
    """`sales.csv` with 30 to 60 rows of region, product, units, price (cents kept exact)."""
    rows = [
        (
            str(rng.choice(REGIONS)),
            str(rng.choice(PRODUCTS)),
            int(rng.integers(1, 50)),
            int(rng.integers(100, 10000)),
        )
        for _ in range(int(rng.integers(30, 61)))
    ]
    csv = "region,product,units,price\n" + "".join(f"{r},{p},{u},{c / 100:.2f}\n" for r, p, u, c in rows)
    region, product = str(rng.choice(REGIONS)), str(rng.choice([p for _, p, _, _ in rows]))
    threshold = int(rng.integers(10, 90))
    about = "The file sales.csv has one sale per row: region, product, units sold, unit price."
    if variant == "revenue_of_region":
        cents = sum(u * c for r, _, u, c in rows if r == region)
        ask, answer, tol = (
            f"What is the total revenue (units * price) of region {region}? Two decimals.",
            f"{cents / 100:.2f}",
            0.005,
        )
    elif variant == "units_of_product":
        ask, answer, tol = (
            f"How many units of {product} were sold in all?",
            str(sum(u for _, p, u, _ in rows if p == product)),
            0.0,
        )
    elif variant == "rows_above":
        ask, answer, tol = (
            f"How many rows have a unit price above {threshold}.00?",
            str(sum(c > threshold * 100 for *_, c in rows)),
            0.0,
        )
    elif variant == "best_product":
        revenue = Counter[str]()
        for _, p, u, c in rows:
            revenue[p] += u * c
        best = min(revenue, key=lambda p: (-revenue[p], p))
        ask, answer, tol = (
            "Which product has the highest total revenue (units * price)? Its name only.",
            best,
            0.0,
        )
    else:  # mean_units
        units = [u for r, _, u, _ in rows if r == region] or [0]
        ask, answer, tol = (
            f"What is the mean of units per row in region {region}? Two decimals.",
            f"{sum(units) / len(units):.2f}",
            0.005,
        )
    return Task("table", variant, f"{about} {ask}", {"sales.csv": csv}, answer, tol)


# ---- text: string puzzles --------------------------------------------------------------------------


def text_task(rng: np.random.Generator, variant: str) -> Task:
    """`text.txt`: a line of letters a-c (for counts and runs) or of words (for word questions)."""
    letters = "".join(rng.choice(list("abc"), size=int(rng.integers(150, 250))))
    words = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(20, 40)))]
    about = "The file text.txt holds one line of text."
    if variant == "count_substring":
        pattern = "".join(rng.choice(list("abc"), size=3))
        line, ask, answer = (
            letters,
            f"How many times does {pattern!r} occur in it, overlaps included?",
            str(sum(letters.startswith(pattern, i) for i in range(len(letters)))),
        )
    elif variant == "longest_run":
        runs = [len(list(group)) for _, group in groupby(letters)]
        line, ask, answer = letters, "How long is its longest run of one repeated letter?", str(max(runs))
    elif variant == "reverse_words":
        line, ask, answer = (
            " ".join(words),
            "Give its words in reverse order, separated by single spaces.",
            " ".join(words[::-1]),
        )
    elif variant == "most_common_word":
        counts = Counter(words)
        best = min(counts, key=lambda w: (-counts[w], w))
        line, ask, answer = (
            " ".join(words),
            "Which word occurs most often (alphabetically first on a tie)?",
            best,
        )
    else:  # distinct_words
        line, ask, answer = " ".join(words), "How many distinct words does it have?", str(len(set(words)))
    return Task("text", variant, f"{about} {ask}", {"text.txt": line + "\n"}, answer)


# ---- array: array puzzles --------------------------------------------------------------------------


def _max_subarray(values: list[int]) -> int:
    best, run = values[0], 0
    for v in values:
        run = max(v, run + v)
        best = max(best, run)
    return best


def _longest_increasing_run(values: list[int]) -> int:
    best = run = 1
    for a, b in pairwise(values):
        run = run + 1 if b > a else 1
        best = max(best, run)
    return best


def array_task(rng: np.random.Generator, variant: str) -> Task:
    """`numbers.json`: a JSON list of 40 to 80 integers in [-50, 50]."""
    values = [int(v) for v in rng.integers(-50, 51, size=int(rng.integers(40, 81)))]
    target = int(rng.integers(-20, 21))
    about = "The file numbers.json holds a JSON list of integers."
    if variant == "max_subarray":
        ask, answer = "What is the largest sum of a non-empty contiguous slice of it?", _max_subarray(values)
    elif variant == "longest_increasing_run":
        ask, answer = (
            "How long is its longest strictly increasing contiguous run?",
            _longest_increasing_run(values),
        )
    elif variant == "pair_count":
        ask = f"How many pairs of positions i < j have values summing to {target}?"
        answer = sum(a + b == target for a, b in combinations(values, 2))
    elif variant == "second_largest":
        ask, answer = "What is its second largest distinct value?", sorted(set(values))[-2]
    else:  # inversions
        ask, answer = (
            "How many pairs of positions i < j have value[i] > value[j]?",
            sum(a > b for a, b in combinations(values, 2)),
        )
    return Task("array", variant, f"{about} {ask}", {"numbers.json": json.dumps(values) + "\n"}, str(answer))


# ---- edit: file edits ------------------------------------------------------------------------------


def edit_task(rng: np.random.Generator, variant: str) -> Task:
    """`settings.ini`: 6 to 9 lines `key = value`; the task edits it, then submits anything."""
    keys = [str(k) for k in rng.permutation(KEYS)[: int(rng.integers(6, 10))]]
    values = {
        k: str(int(rng.integers(1, 1000))) if rng.random() < 0.5 else str(rng.choice(WORDS)) for k in keys
    }
    unused = [k for k in KEYS if k not in values]
    key, new = keys[int(rng.integers(len(keys)))], str(int(rng.integers(1000, 10000)))
    lines = [f"{k} = {v}" for k, v in values.items()]
    if variant == "set_value":
        ask, edited = (
            f"Set the value of {key} to {new}.",
            [f"{k} = {new if k == key else v}" for k, v in values.items()],
        )
    elif variant == "delete_key":
        ask, edited = (
            f"Delete the line of {key}.",
            [line for k, line in zip(keys, lines, strict=True) if k != key],
        )
    elif variant == "rename_key":
        other = unused[int(rng.integers(len(unused)))] if unused else f"{key}_renamed"
        ask, edited = (
            f"Rename the key {key} to {other}, keeping its value.",
            [f"{other if k == key else k} = {v}" for k, v in values.items()],
        )
    elif variant == "sort_keys":
        ask, edited = "Sort its lines by key, alphabetically.", sorted(lines)
    else:  # append_key
        other = unused[0] if unused else "extra"
        ask, edited = f"Add a last line setting {other} to {new}.", [*lines, f"{other} = {new}"]
    prompt = (
        f"The file settings.ini has one setting per line, written `key = value`. {ask} Keep every other "
        "line as it is. Then submit anything (the file is checked)."
    )
    before, after = "\n".join(lines) + "\n", "\n".join(edited) + "\n"
    return Task("edit", variant, prompt, {"settings.ini": before}, expected_files={"settings.ini": after})


Generator = Callable[[np.random.Generator, str], Task]

FAMILIES: Mapping[str, Generator] = {
    "table": table_task,
    "text": text_task,
    "array": array_task,
    "edit": edit_task,
}
"""Every task family's generator."""

SPLITS: Mapping[Split, Mapping[str, tuple[str, ...]]] = {
    "train": {
        "table": ("revenue_of_region", "units_of_product", "rows_above"),
        "text": ("count_substring", "longest_run", "reverse_words"),
        "array": ("max_subarray", "longest_increasing_run", "pair_count"),
        "edit": ("set_value", "delete_key", "rename_key"),
    },
    "held_out": {
        "table": ("best_product", "mean_units"),
        "text": ("most_common_word", "distinct_words"),
        "array": ("second_largest", "inversions"),
        "edit": ("sort_keys", "append_key"),
    },
}
"""The variants of each family in each split (disjoint)."""


def make_task(rng: np.random.Generator, split: Split, families: tuple[str, ...]) -> Task:
    """A task of a family drawn from `families`, in a variant of `split`, with data drawn from `rng`."""
    family = families[int(rng.integers(len(families)))]
    variants = SPLITS[split][family]
    return FAMILIES[family](rng, variants[int(rng.integers(len(variants)))])
