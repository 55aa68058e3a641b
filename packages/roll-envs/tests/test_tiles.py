"""Tiled frames (the agent is drawn where the env state says), captions, filmstrips and GIF timing."""

from __future__ import annotations

import numpy as np
import pytest
import roll_envs
from PIL import Image
from roll_envs.envs.frozen_lake import FROZEN_LAKE_TILES
from roll_envs.envs.sokoban import Room
from roll_envs.envs.sokoban.env import SOKOBAN_TILES
from roll_envs.frames import caption_frame, filmstrip, save_gif
from roll_envs.tiles import Tile, tile_frame

CELL = 48


def cells_holding(frame: np.ndarray, color: tuple[int, int, int], cell: int = CELL) -> set[tuple[int, int]]:
    """(row, col) of every cell with at least a few pixels of exactly `color`."""
    match = np.all(frame == np.array(color, dtype=np.uint8), axis=-1)
    rows, cols = frame.shape[0] // cell, frame.shape[1] // cell
    return {
        (r, c)
        for r in range(rows)
        for c in range(cols)
        if match[r * cell : (r + 1) * cell, c * cell : (c + 1) * cell].sum() >= 20
    }


def mark_color(tile: Tile, shape: str) -> tuple[int, int, int]:
    return next(color for s, color in tile.marks if s == shape)


PLAYER_FL = mark_color(FROZEN_LAKE_TILES["P"], "figure")
HOLE_FL = mark_color(FROZEN_LAKE_TILES["O"], "hole")
GOAL_FL = mark_color(FROZEN_LAKE_TILES["G"], "flag")


def test_frozen_lake_frame_draws_the_player_where_the_state_says():
    env = roll_envs.make("frozen_lake", render_mode="rgb_array")
    env.reset(seed=0, options={"map": ["SFF", "FHF", "FFG"]})
    frame = env.render()
    assert frame.shape == (3 * CELL, 3 * CELL, 3) and frame.dtype == np.uint8
    assert cells_holding(frame, PLAYER_FL) == {(0, 0)}
    assert cells_holding(frame, HOLE_FL) == {(1, 1)}
    assert cells_holding(frame, GOAL_FL) == {(2, 2)}
    env.step("<answer>Right</answer>")
    assert cells_holding(env.render(), PLAYER_FL) == {(0, 1)}
    env.step("<answer>Down</answer>")  # into the hole: the player is drawn in it, crossed
    frame = env.render()
    assert env.text_observation().split("\n")[1][1] == "X"
    assert cells_holding(frame, PLAYER_FL) == {(1, 1)} and cells_holding(frame, HOLE_FL) == {(1, 1)}


def test_frozen_lake_goal_reached_has_its_own_background():
    env = roll_envs.make("frozen_lake", render_mode="rgb_array")
    env.reset(seed=0, options={"map": ["SG"]})
    env.step("<answer>Right</answer>")
    frame = env.render()
    assert cells_holding(frame, FROZEN_LAKE_TILES["√"].background) == {(0, 1)}
    assert cells_holding(frame, PLAYER_FL) == {(0, 1)}


def test_sokoban_frame_draws_walls_boxes_targets_and_player_by_role():
    # 5 x 5 room, one row of floor: player at (2,1), box at (2,2), target at (2,3)
    room = Room(5, 5, frozenset({11, 12, 13}), targets=frozenset({13}), boxes=frozenset({12}), player=11)
    for env_id in ("sokoban", "sokoban_different_grid_vocab"):  # every vocabulary is drawn alike
        env = roll_envs.make(env_id, render_mode="rgb_array")
        env.reset(seed=0, options={"room": room})
        frame = env.render()
        assert cells_holding(frame, mark_color(SOKOBAN_TILES["player"], "figure")) == {(2, 1)}
        assert cells_holding(frame, mark_color(SOKOBAN_TILES["box"], "crate")) == {(2, 2)}
        assert cells_holding(frame, mark_color(SOKOBAN_TILES["target"], "ring")) == {(2, 3)}
        assert len(cells_holding(frame, SOKOBAN_TILES["wall"].background)) == 25 - 3
        env.step("<answer>Right</answer>")  # the box lands on the target
        frame = env.render()
        assert cells_holding(frame, mark_color(SOKOBAN_TILES["box_on_target"], "crate")) == {(2, 3)}
        assert cells_holding(frame, mark_color(SOKOBAN_TILES["player"], "figure")) == {(2, 2)}


def test_an_unknown_symbol_is_a_grey_tile_not_an_error():
    frame = tile_frame(["a?"], {"a": Tile((255, 0, 0))}, cell=10)
    assert tuple(frame[5, 5]) == (255, 0, 0) and tuple(frame[5, 15]) == (128, 128, 128)


def test_caption_band_widens_to_the_text_and_keeps_the_frame():
    frame = np.full((30, 40, 3), 7, dtype=np.uint8)
    out = caption_frame(frame, ["x" * 200, "b"], band=(1, 2, 3), min_width=50)
    assert out.shape[1] > 200 and out.shape[0] > 30
    left = (out.shape[1] - 40) // 2
    assert (out[:30, left : left + 40] == 7).all()
    assert tuple(out[-1, -1]) == (1, 2, 3)


def test_filmstrip_keeps_first_and_last_frames_of_long_episodes():
    frames = [np.full((4, 4, 3), i, dtype=np.uint8) for i in range(30)]
    strip = filmstrip(frames, max_frames=5, gap=1)
    assert strip.shape == (4, 5 * 4 + 4, 3)
    assert strip[0, 0, 0] == 0 and strip[0, -1, 0] == 29
    with pytest.raises(ValueError, match="at least one frame"):
        filmstrip([])


def test_gif_holds_its_last_frame(tmp_path):
    frames = [np.full((8, 8, 3), v, dtype=np.uint8) for v in (0, 120, 250)]
    path = save_gif(frames, tmp_path / "g.gif", fps=4, last_frame_s=2.0)
    with Image.open(path) as gif:
        assert gif.n_frames == 3
        durations = []
        for i in range(gif.n_frames):
            gif.seek(i)
            durations.append(gif.info["duration"])
    assert durations == [250, 250, 2000]
