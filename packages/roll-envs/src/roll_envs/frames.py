"""Frames: RGB arrays of env states (coloured cells or drawn text), captions, filmstrips and GIFs.

Grid envs draw their frames with tiles (`roll_envs.tiles`); any other `BaseEnv` draws its text. The
pipeline captions each frame of a replayed validation episode (`caption_frame`), saves the episode as
a GIF (`save_gif`) and logs a `filmstrip` of it to TensorBoard.
"""

from __future__ import annotations

import functools
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


def save_gif(
    frames: Iterable[np.ndarray], path: str | Path, fps: float = 2.0, last_frame_s: float | None = None
) -> Path:
    """Write RGB frames as an animated GIF (looping) and return its path; frames are padded to one size.

    `last_frame_s` holds the last frame longer (the outcome of an episode). The pipeline calls it
    once per rendered validation episode under `render_save_dir`.
    """
    arrays = [np.asarray(f, dtype=np.uint8) for f in frames]
    if not arrays:
        raise ValueError("save_gif needs at least one frame; got none. Render with env.render('rgb_array').")
    images = _paletted(pad_to_one_size(arrays))
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    duration = max(int(1000 / max(fps, 0.01)), 20)
    durations = [duration] * len(images)
    if last_frame_s is not None:
        durations[-1] = max(int(last_frame_s * 1000), duration)
    images[0].save(target, save_all=True, append_images=images[1:], duration=durations, loop=0)
    return target


def _paletted(frames: Sequence[np.ndarray]) -> list[Any]:
    """The frames as palette images sharing one palette, built once from all of them (fast octree, no
    dithering: flat tiles stay flat, and it is several times faster than letting the GIF writer
    quantise every frame by median cut)."""
    from PIL import Image

    palette = Image.fromarray(np.concatenate(frames, axis=0)).quantize(
        255, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
    )
    return [Image.fromarray(f).quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]


def pad_to_one_size(frames: Sequence[np.ndarray], fill: int = 255) -> list[np.ndarray]:
    """Frames of different sizes placed top-left on canvases of the largest height and width."""
    height = max(f.shape[0] for f in frames)
    width = max(f.shape[1] for f in frames)
    out = []
    for f in frames:
        canvas = np.full((height, width, 3), fill, dtype=np.uint8)
        canvas[: f.shape[0], : f.shape[1]] = f[..., :3]
        out.append(canvas)
    return out


def caption_frame(
    frame: np.ndarray,
    lines: Sequence[str],
    *,
    band: Color = (255, 255, 255),
    ink: Color = (20, 20, 20),
    font_size: int = 13,
    min_width: int = 240,
) -> np.ndarray:
    """The frame above a band of text lines (one per line), widened to `min_width` and to fit the text.

    >>> caption_frame(np.zeros((48, 48, 3), np.uint8), ["turn 1/3: Left", "reward +0.00"]).shape
    (87, 240, 3)
    """
    from PIL import Image, ImageDraw

    font = _font(font_size)
    line_height = font_size + 4
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    text_width = max((int(measure.textlength(line, font=font)) for line in lines), default=0)
    height, width = frame.shape[0], max(frame.shape[1], min_width, text_width + 12)
    image = Image.new("RGB", (width, height + line_height * len(lines) + 5), band)
    image.paste(
        Image.fromarray(np.asarray(frame, dtype=np.uint8)[..., :3]), ((width - frame.shape[1]) // 2, 0)
    )
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((6, height + 3 + i * line_height), line, fill=ink, font=font)
    return np.asarray(image, dtype=np.uint8)


def filmstrip(frames: Sequence[np.ndarray], max_frames: int = 12, gap: int = 4) -> np.ndarray:
    """The frames side by side (one image of a whole episode); longer episodes keep `max_frames` evenly
    spaced frames, the first and the last included.

    >>> filmstrip([np.zeros((10, 20, 3), np.uint8)] * 3, gap=2).shape
    (10, 64, 3)
    """
    if not frames:
        raise ValueError("filmstrip needs at least one frame; got none.")
    if max_frames < 2:
        raise ValueError(
            f"filmstrip keeps the first and the last frame; max_frames must be >= 2, got {max_frames}."
        )
    if len(frames) > max_frames:
        picks = np.linspace(0, len(frames) - 1, max_frames).round().astype(int)
        frames = [frames[i] for i in sorted(set(picks.tolist()))]
    padded = pad_to_one_size([np.asarray(f, dtype=np.uint8) for f in frames])
    spacer = np.full((padded[0].shape[0], gap, 3), 255, dtype=np.uint8)
    parts = [p for f in padded for p in (f, spacer)][:-1]
    return np.concatenate(parts, axis=1)


@functools.lru_cache(maxsize=8)
def _font(size: int) -> Any:
    """Pillow's scalable default font (FreeType), or its bitmap font where FreeType is missing."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):  # Pillow < 10.1 or no FreeType
        return ImageFont.load_default()


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
