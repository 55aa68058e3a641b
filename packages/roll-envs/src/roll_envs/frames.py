"""Frames: RGB arrays of env states (coloured cells or drawn text) and animated GIFs of episodes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

Color = tuple[int, int, int]

DEFAULT_CELL_COLOR: Color = (128, 128, 128)
"""Colour of a cell whose symbol has no entry in the palette."""


def grid_frame(
    rows: Sequence[str], palette: Mapping[str, Color], cell: int = 24, border: int = 1
) -> np.ndarray:
    """An (H, W, 3) uint8 image: one `cell` x `cell` square per character, coloured by `palette`.

    >>> grid_frame(["P_", "OG"], {"P": (255, 0, 0)}).shape
    (48, 48, 3)
    """
    height, width = len(rows), max((len(r) for r in rows), default=0)
    image = np.zeros((max(height, 1) * cell, max(width, 1) * cell, 3), dtype=np.uint8)
    for r, row in enumerate(rows):
        for c, symbol in enumerate(row):
            color = palette.get(symbol, DEFAULT_CELL_COLOR)
            image[
                r * cell + border : (r + 1) * cell - border, c * cell + border : (c + 1) * cell - border
            ] = color
    return image


def text_frame(text: str, width: int = 480, line_height: int = 12, max_lines: int = 40) -> np.ndarray:
    """The text drawn in black on white with Pillow's default font (fallback frame of any text env)."""
    from PIL import Image, ImageDraw

    lines = text.splitlines()[:max_lines] or [""]
    image = Image.new("RGB", (width, line_height * len(lines) + 8), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((4, 4 + i * line_height), line[:120], fill=(0, 0, 0))
    return np.asarray(image, dtype=np.uint8)


def save_gif(frames: Iterable[np.ndarray], path: str | Path, fps: float = 2.0) -> Path:
    """Write RGB frames as an animated GIF (looping) and return its path; frames are padded to one size.

    The pipeline calls it once per rendered episode under `render_save_dir`.
    """
    from PIL import Image

    arrays = [np.asarray(f, dtype=np.uint8) for f in frames]
    if not arrays:
        raise ValueError("save_gif needs at least one frame; got none. Render with env.render('rgb_array').")
    height = max(a.shape[0] for a in arrays)
    width = max(a.shape[1] for a in arrays)
    images = []
    for a in arrays:
        canvas = np.full((height, width, 3), 255, dtype=np.uint8)
        canvas[: a.shape[0], : a.shape[1]] = a[..., :3]
        images.append(Image.fromarray(canvas))
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    duration = max(int(1000 / max(fps, 0.01)), 20)
    images[0].save(target, save_all=True, append_images=images[1:], duration=duration, loop=0)
    return target


def replay_to_gif(env: Any, seed: int, responses: Sequence[str], path: str | Path, fps: float = 2.0) -> Path:
    """Replay an episode (its seed and the model's raw turns) on `env` and save its frames as a GIF.

    Envs are deterministic under a seed, so a trajectory recorded anywhere can be drawn here
    from its seed and responses alone; the replay stops where the episode ended.
    """
    env.reset(seed=seed)
    frames = [env.render("rgb_array")]
    for text in responses:
        _, _, terminated, truncated, _ = env.step(text)
        frames.append(env.render("rgb_array"))
        if terminated or truncated:
            break
    return save_gif(frames, path, fps)


def observations_to_gif(observations: Sequence[str], path: str | Path, fps: float = 2.0) -> Path:
    """Save text observations as a GIF of drawn text (for envs without a graphical frame)."""
    return save_gif([text_frame(o) for o in observations], path, fps)
