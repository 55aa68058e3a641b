"""What a migration did, key by key: `MigrationReport` and its text form (what `roll migrate` prints)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["Change", "Dropped", "MigrationError", "MigrationReport"]


class MigrationError(ValueError):
    """A ROLL config cannot be translated as is: the message lists each unsupported setting and the fix."""


class Change(NamedTuple):
    """A ROLL key that became a roll key (translated), possibly with another value (converted)."""

    source_key: str
    """The ROLL key path, or `(default)` for one of ROLL's defaults the file left out."""
    key: str
    """The roll key path it became."""
    source_value: Any = None
    """ROLL's value (converted and defaults entries)."""
    value: Any = None
    """roll's value (converted and defaults entries)."""
    why: str = ""
    roll_default: Any = None
    """roll's own default that a defaults entry replaces."""


class Dropped(NamedTuple):
    """A ROLL key that has no roll counterpart, and why."""

    source_key: str
    """The ROLL key path."""
    why: str


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class MigrationReport:
    """Every ROLL key of a migrated file, each in exactly one of translated / dropped / approximated /
    unsupported, plus the conversions and the ROLL defaults written explicitly."""

    source: str
    translated: list[Change] = field(default_factory=list)
    converted: list[Change] = field(default_factory=list)
    defaults: list[Change] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    approximated: list[Dropped] = field(default_factory=list)
    unsupported: list[Dropped] = field(default_factory=list)

    def format(self, *, drop_unsupported: bool = False) -> str:
        """The report as text: one section per kind, one line per key."""
        lines = [f"roll migrate: {self.source}"]
        lines += self._section(
            "translated (ROLL key -> roll key)", [f"{c.source_key} -> {c.key}" for c in self.translated]
        )
        lines += self._section(
            "converted values",
            [
                f"{c.source_key}: {_short(c.source_value)} -> {c.key}: {_short(c.value)}"
                + (f"  ({c.why})" if c.why else "")
                for c in self.converted
            ],
        )
        lines += self._section(
            "ROLL defaults that differ from roll's, now set explicitly",
            [
                f"{c.key}: {_short(c.value)} (roll's default: {_short(c.roll_default)})"
                + (f"  ({c.why})" if c.why else "")
                for c in self.defaults
            ],
        )
        lines += self._section(
            "dropped (no effect in roll)", [f"{d.source_key}: {d.why}" for d in self.dropped]
        )
        lines += self._section(
            "approximated (roll does it its own way; results can differ in detail)",
            [f"{d.source_key}: {d.why}" for d in self.approximated],
        )
        title = "unsupported, dropped (--drop-unsupported)" if drop_unsupported else "unsupported (errors)"
        lines += self._section(title, [f"{d.source_key}: {d.why}" for d in self.unsupported])
        return "\n".join(lines)

    @staticmethod
    def _section(title: str, rows: list[str]) -> list[str]:
        return [f"\n{title}: {len(rows)}", *(f"  {row}" for row in rows)] if rows else []

    def counts(self) -> dict[str, int]:
        """How many keys each section holds."""
        return {
            name: len(getattr(self, name))
            for name in ("translated", "converted", "defaults", "dropped", "approximated", "unsupported")
        }

    def error(self) -> MigrationError:
        """The error of a migration with unsupported settings (without `--drop-unsupported`)."""
        rows = "\n".join(f"  - {d.source_key}: {d.why}" for d in self.unsupported)
        return MigrationError(
            f"{self.source}: {len(self.unsupported)} setting(s) change what is trained and roll cannot honour"
            f" them:\n{rows}\nRemove them from the ROLL file, or pass --drop-unsupported to migrate without them"
            " (each is listed in the report)."
        )
