"""Tiles: grid frames drawn with simple shapes, so a person reads an episode at a glance.

A `Tile` is a background colour and marks painted on it in order (a ring under a figure is a player
standing on a target). `tile_frame(rows, tiles)` draws one tile per character of a text grid; the
built-in grid envs (FrozenLake, Sokoban) render their `rgb_array` frames with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Color = tuple[int, int, int]

Shape = Literal["disc", "hole", "ring", "crate", "cross", "flag", "figure", "bricks"]
"""The marks a tile can carry."""

UNKNOWN_TILE_COLOR: Color = (128, 128, 128)
"""Background of a character that has no tile."""


@dataclass(frozen=True, slots=True)
class Tile:
    """How one grid character is drawn: a background and `(shape, colour)` marks painted in order."""

    background: Color
    marks: tuple[tuple[Shape, Color], ...] = ()


def tile_frame(rows: Sequence[str], tiles: Mapping[str, Tile], cell: int = 48) -> np.ndarray:
    """An (H, W, 3) uint8 image of a text grid: one `cell` x `cell` tile per character.

    A character without a tile is a grey square, so a new symbol shows up instead of crashing.

    >>> frame = tile_frame(["P_", "OG"], {"P": Tile((255, 255, 255), (("figure", (200, 0, 0)),))})
    >>> frame.shape
    (96, 96, 3)
    """
    from PIL import Image, ImageDraw

    height, width = max(len(rows), 1), max((len(r) for r in rows), default=1) or 1
    image = Image.new("RGB", (width * cell, height * cell), UNKNOWN_TILE_COLOR)
    draw = ImageDraw.Draw(image)
    unknown = Tile(UNKNOWN_TILE_COLOR)
    for r, row in enumerate(rows):
        for c, symbol in enumerate(row):
            tile = tiles.get(symbol, unknown)
            box = (c * cell, r * cell, (c + 1) * cell - 1, (r + 1) * cell - 1)
            draw.rectangle(box, fill=tile.background)
            for shape, color in tile.marks:
                _MARKS[shape](draw, box, color)
    grid = _darker(UNKNOWN_TILE_COLOR, 0.3)
    for c in range(1, width):  # thin grid lines between cells
        draw.line([(c * cell, 0), (c * cell, height * cell)], fill=grid, width=1)
    for r in range(1, height):
        draw.line([(0, r * cell), (width * cell, r * cell)], fill=grid, width=1)
    return np.asarray(image, dtype=np.uint8)


def _inset(box: tuple[int, int, int, int], fraction: float) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = box
    d = round((x1 - x0) * fraction)
    return (x0 + d, y0 + d, x1 - d, y1 - d)


def _darker(color: Color, amount: float = 0.35) -> Color:
    r, g, b = color
    return (round(r * (1 - amount)), round(g * (1 - amount)), round(b * (1 - amount)))


def _disc(draw: Any, box: tuple[int, int, int, int], color: Color) -> None:
    draw.ellipse(_inset(box, 0.22), fill=color, outline=_darker(color), width=2)


def _hole(draw: Any, box: tuple[int, int, int, int], color: Color) -> None:
    x0, y0, x1, y1 = _inset(box, 0.1)
    draw.ellipse(
        (x0, y0 + (y1 - y0) // 6, x1, y1 - (y1 - y0) // 8), fill=color, outline=_darker(color), width=2
    )


def _ring(draw: Any, box: tuple[int, int, int, int], color: Color) -> None:
    draw.ellipse(_inset(box, 0.14), outline=color, width=max(2, (box[2] - box[0]) // 12))


def _crate(draw: Any, box: tuple[int, int, int, int], color: Color) -> None:
    x0, y0, x1, y1 = _inset(box, 0.12)
    edge = _darker(color)
    draw.rectangle((x0, y0, x1, y1), fill=color, outline=edge, width=3)
    draw.line([(x0, y0), (x1, y1)], fill=edge, width=2)
    draw.line([(x0, y1), (x1, y0)], fill=edge, width=2)


def _cross(draw: Any, box: tuple[int, int, int, int], color: Color) -> None:
    x0, y0, x1, y1 = _inset(box, 0.2)
    width = max(3, (x1 - x0) // 7)
    draw.line([(x0, y0), (x1, y1)], fill=color, width=width)
    draw.line([(x0, y1), (x1, y0)], fill=color, width=width)


def _flag(draw: Any, box: tuple[int, int, int, int], color: Color) -> None:
    x0, y0, x1, y1 = _inset(box, 0.18)
    pole = x0 + (x1 - x0) // 4
    draw.line([(pole, y0), (pole, y1)], fill=(70, 70, 70), width=max(2, (x1 - x0) // 14))
    draw.polygon([(pole, y0), (x1, y0 + (y1 - y0) // 4), (pole, y0 + (y1 - y0) // 2)], fill=color)


def _figure(draw: Any, box: tuple[int, int, int, int], color: Color) -> None:
    """A person: a head over a body, so the agent is never mistaken for a thing."""
    x0, y0, x1, y1 = _inset(box, 0.16)
    w, h = x1 - x0, y1 - y0
    edge = _darker(color)
    draw.polygon(
        [
            (x0 + w // 5, y1),
            (x1 - w // 5, y1),
            (x0 + 3 * w // 4, y0 + 2 * h // 5),
            (x0 + w // 4, y0 + 2 * h // 5),
        ],
        fill=color,
        outline=edge,
    )
    draw.ellipse((x0 + w // 3, y0, x1 - w // 3, y0 + w // 3), fill=color, outline=edge, width=2)


def _bricks(draw: Any, box: tuple[int, int, int, int], color: Color) -> None:
    x0, y0, x1, y1 = box
    rows = 3
    step = max((y1 - y0) // rows, 1)
    for i in range(1, rows):
        draw.line([(x0, y0 + i * step), (x1, y0 + i * step)], fill=color, width=2)
    for i in range(rows):
        x = x0 + ((x1 - x0) // 2 if i % 2 else (x1 - x0) // 4)
        draw.line([(x, y0 + i * step), (x, y0 + (i + 1) * step)], fill=color, width=2)


_MARKS: dict[str, Callable[[Any, tuple[int, int, int, int], Color], None]] = {
    "disc": _disc,
    "hole": _hole,
    "ring": _ring,
    "crate": _crate,
    "cross": _cross,
    "flag": _flag,
    "figure": _figure,
    "bricks": _bricks,
}
