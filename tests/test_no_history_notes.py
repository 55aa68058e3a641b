"""Comments and docstrings say what code does, not how it came to be: no issue numbers, no dates.

Every line of the code, test, benchmark, tool and example files (.py, .yaml, .yml, .toml, .sh) is scanned, so
comments, docstrings and YAML comments alike. An issue reference or a dated measurement belongs in a CHANGELOG
or in the docs (docs/benchmarks.md, docs/training.md, an example's README.md), which a comment may point to.
Excluded: CHANGELOGs, this file, and third-party files kept as test data.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("packages/*/src", "packages/*/tests", "tests", "benchmarks", "tools", "examples")
SUFFIXES = {".py", ".yaml", ".yml", ".toml", ".sh"}
DATA_FOLDERS = ("packages/roll-pipeline/tests/roll_configs", "packages/roll-pipeline/tests/data")
"""ROLL's own example configs, kept verbatim as the migration tests' input."""

ISSUE = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)
"""An issue reference: "issue" or "issues", then a number, with or without "#"."""
ISO_DATE = re.compile(r"\b(?:19|20)\d{2}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b")
"""A date as YYYY-MM-DD."""


def scanned_files() -> list[Path]:
    """The files under SCANNED with a scanned suffix, less CHANGELOGs, data folders and this file."""
    files = set()
    for pattern in SCANNED:
        for top in ROOT.glob(pattern):
            for path in top.rglob("*"):
                relative = path.relative_to(ROOT)
                if (
                    path.suffix in SUFFIXES
                    and path.is_file()
                    and path != Path(__file__).resolve()
                    and "changelog" not in path.name.lower()
                    and not any(part.startswith(".") or part == "__pycache__" for part in relative.parts)
                    and not any(relative.is_relative_to(folder) for folder in DATA_FOLDERS)
                ):
                    files.add(path)
    return sorted(files)


def history_notes(path: Path) -> list[str]:
    """`path:line: text` for each line of `path` holding an issue reference or an ISO date."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(lines, start=1)
        if ISSUE.search(line) or ISO_DATE.search(line)
    ]


def test_the_patterns_match_what_they_mean() -> None:
    # built from parts, so that a grep of the repository for such notes does not find these examples
    notes = ("(issue %d)", "Issue #%d", "issues %d-28", "ISSUE#%d", "on 2026-11-%d")
    for note in (template % 25 for template in notes):
        assert ISSUE.search(note) or ISO_DATE.search(note), note
    for text in ("tis" + "sue 3", "an issue with 3 rows", "seeds 0-19", "2.4e-5", "step 5-25", "v2026.11"):
        assert not (ISSUE.search(text) or ISO_DATE.search(text)), text


def test_the_scan_covers_the_code_and_skips_the_data() -> None:
    files = {path.relative_to(ROOT).as_posix() for path in scanned_files()}
    assert "tests/test_learning.py" in files
    assert "examples/tiny-cpu-agentic/agent_four_choice.yaml" in files
    assert not any(name.startswith(DATA_FOLDERS) for name in files)
    assert not any("changelog" in name.lower() for name in files)


def test_no_issue_numbers_or_dates_in_code_comments() -> None:
    notes = [note for path in scanned_files() for note in history_notes(path)]
    assert not notes, (
        "issue references or dates in code, comments or docstrings: say what the code does now, and move a "
        "dated measurement to the docs (docs/benchmarks.md, docs/training.md, the example's README.md), "
        "pointing there from the comment:\n" + "\n".join(notes)
    )
