"""Rendered validation episodes: picking, replay with its consistency check, GIFs, TensorBoard images."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import roll_envs
from PIL import Image
from roll_pipeline.observe.render import (
    EnvSource,
    EpisodeRenderer,
    ReplayMismatch,
    gif_path,
    pick_episodes,
    renderer_of,
    replay_frames,
)
from roll_pipeline.observe.tracking import Tracker
from roll_rollout import Trajectory, Turn

FL = {"FrozenLake": EnvSource("frozen_lake", {"size": 4})}


def play(env_type: str, seed: int, responses: list[str], tag: str = "FrozenLake", **config) -> Trajectory:
    """A trajectory recorded as the env manager records one (observation before each turn, reward)."""
    env = roll_envs.make(env_type, **config)
    obs, _ = env.reset(seed=seed)
    traj = Trajectory(env_id=0, group_id=0, episode_id=seed, tag=tag, seed=seed)
    for text in responses:
        next_obs, reward, terminated, truncated, info = env.step(text)
        traj.turns.append(
            Turn(
                [1],
                [2],
                [0.0],
                float(reward),
                info["action_is_valid"],
                True,
                obs,
                response_text=text,
                observation=obs,
            )
        )
        obs, traj.success = next_obs, bool(info["success"])
        if terminated or truncated:
            traj.terminated, traj.truncated = terminated, truncated
            break
    return traj


MOVES = ["<answer>Down</answer>", "garbage", "<answer>Right</answer>", "<answer>Up</answer>"]


def test_replay_gives_one_captioned_frame_per_turn_plus_the_start():
    traj = play("frozen_lake", 5, MOVES, size=4)
    env = roll_envs.make("frozen_lake", render_mode="rgb_array", size=4)
    frames = replay_frames(env, traj)
    assert len(frames) == len(traj.turns) + 1
    assert all(f.dtype == np.uint8 and f.shape[2] == 3 for f in frames)
    assert frames[0].shape[0] > 4 * 48  # the board and its caption band


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: dataclasses.replace(t, reward=t.reward + 0.5), "reward"),
        (lambda t: dataclasses.replace(t, observation="elsewhere"), "observation"),
    ],
)
def test_replay_that_differs_from_the_record_is_a_mismatch(change, message):
    traj = play("frozen_lake", 5, MOVES, size=4)
    traj.turns[1] = change(traj.turns[1])
    env = roll_envs.make("frozen_lake", render_mode="rgb_array", size=4)
    with pytest.raises(ReplayMismatch, match=f"turn 2: replayed {message}"):
        replay_frames(env, traj)


def test_replay_catches_a_wrong_success_and_an_episode_that_ended_early():
    traj = play("frozen_lake", 5, MOVES, size=4)
    env = roll_envs.make("frozen_lake", render_mode="rgb_array", size=4)
    with pytest.raises(ReplayMismatch, match="success"):
        replay_frames(env, dataclasses.replace(traj, success=not traj.success))
    assert len(traj.turns) == 3 and traj.success  # seed 5: the goal on the third turn
    short = roll_envs.make("frozen_lake", max_steps=2, render_mode="rgb_array", size=4)
    with pytest.raises(ReplayMismatch, match="turn 3: the replayed episode already ended"):
        replay_frames(short, traj)


def test_pick_takes_the_lowest_healthy_seeds_of_each_tag_once():
    a = [Trajectory(i, 0, i, "A", seed) for i, seed in enumerate([9, 3, 3, 7, 1])]
    a[4].error = "env_error: boom"  # seed 1 failed: not drawn
    b = [Trajectory(10, 0, 10, "B", 4)]
    picked = pick_episodes([*a, *b], per_tag=2)
    assert [(t.tag, t.seed) for t in picked] == [("A", 3), ("A", 7), ("B", 4)]


def test_gif_names_carry_step_tag_seed_and_outcome(tmp_path):
    traj = Trajectory(0, 0, 0, "Sokoban 6x6/hard", 17, success=True)
    assert gif_path(tmp_path, 40, traj) == tmp_path / "step-000040" / "Sokoban_6x6_hard-seed17-success.gif"
    assert gif_path(tmp_path, 0, dataclasses.replace(traj, success=False)).name.endswith("-fail.gif")


def test_renderer_writes_gifs_that_read_back(tmp_path):
    trajs = [play("frozen_lake", seed, MOVES, size=4) for seed in (3, 4, 5)]
    renderer = EpisodeRenderer(tmp_path, FL, per_tag=2)
    report = renderer.render(trajs, step=7)
    assert len(report.gifs) == 2 and report.replay_mismatches == report.unrenderable == 0
    for path, traj in zip(report.gifs, trajs[:2], strict=True):
        assert path == gif_path(tmp_path, 7, traj) and path.exists()
        with Image.open(path) as gif:
            assert gif.n_frames == len(traj.turns) + 1
            assert gif.size[0] >= 4 * 48 and gif.size[1] > 4 * 48
    assert set(report.images) == {"val/render/FrozenLake/seed3", "val/render/FrozenLake/seed4"}
    logged: list[tuple[list[str], int]] = []
    renderer.render(trajs, 8, log_images=lambda images, step: logged.append((sorted(images), step)))
    assert logged == [(sorted(report.images), 8)]
    assert report.metrics()["val/render/gifs"] == 2.0 and report.metrics()["time/val_render"] > 0


def test_a_mismatch_is_skipped_counted_and_warned_once(tmp_path):
    trajs = [play("frozen_lake", seed, MOVES, size=4) for seed in (3, 4, 5)]
    for traj in trajs[:2]:
        traj.turns[0] = dataclasses.replace(traj.turns[0], reward=7.0)
    warnings: list[str] = []
    report = EpisodeRenderer(tmp_path, FL, per_tag=3, warn=warnings.append).render(trajs, step=0)
    assert report.replay_mismatches == 2 and [p.name for p in report.gifs] == [
        gif_path(tmp_path, 0, trajs[2]).name
    ]
    assert len(warnings) == 1 and "does not replay as recorded" in warnings[0] and "seed 3" in warnings[0]


class TextOnlyEnv:
    """A custom env whose render gives text only."""

    def __init__(self) -> None:
        self.inner = roll_envs.make("frozen_lake", size=4)

    def reset(self, seed):
        return self.inner.reset(seed=seed)

    def step(self, text):
        return self.inner.step(text)

    def render(self):
        return self.inner.text_observation()

    def close(self):
        pass


def test_an_env_without_rgb_frames_is_skipped_with_one_warning(tmp_path):
    trajs = [play("frozen_lake", seed, MOVES, size=4) for seed in (3, 4)]
    warnings: list[str] = []
    renderer = EpisodeRenderer(
        tmp_path, FL, per_tag=2, make_env=lambda source: TextOnlyEnv(), warn=warnings.append
    )
    for step in (0, 1):
        report = renderer.render(trajs, step)
        assert report.unrenderable == 2 and not report.gifs
    assert len(warnings) == 1 and "not an (H, W, 3) uint8 array" in warnings[0]
    unknown = EpisodeRenderer(tmp_path, {}, per_tag=2, warn=warnings.append).render(trajs, 0)
    assert unknown.unrenderable == 2 and not list(tmp_path.rglob("*.gif"))


def test_relative_render_dir_is_inside_the_run_folder(tmp_path):
    assert renderer_of(tmp_path, None, FL, 2) is None
    assert renderer_of(tmp_path, "renders", FL, 2).save_dir == tmp_path / "renders"
    assert renderer_of(tmp_path, str(tmp_path / "abs"), FL, 2).save_dir == tmp_path / "abs"


def test_tracker_writes_images_to_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker(tmp_path, ["tensorboard"])
    image = np.zeros((10, 30, 3), dtype=np.uint8)
    image[:, :10] = (255, 0, 0)
    tracker.log_images({"val/render/FrozenLake/seed3": image}, step=4)
    tracker.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0}).Reload()
    (event,) = events.Images("val/render/FrozenLake/seed3")
    assert (event.step, event.width, event.height) == (4, 30, 10)


def test_tracker_sends_images_to_wandb_when_active(tmp_path):
    wandb = pytest.importorskip("wandb")
    tracker = Tracker(tmp_path, [])
    logged = []
    tracker.wandb_run = SimpleNamespace(
        log=lambda data, step: logged.append((data, step)), finish=lambda: None
    )
    tracker.log_images({"val/render/A/seed1": np.zeros((4, 6, 3), dtype=np.uint8)}, step=2)
    tracker.log_images({}, step=3)  # nothing drawn: nothing logged
    tracker.close()
    ((data, step),) = logged
    assert step == 2 and isinstance(data["val/render/A/seed1"], wandb.Image)


def test_sokoban_episodes_replay_and_render(tmp_path):
    moves = [
        "<answer>Up</answer>",
        "<answer>Left</answer>",
        "<answer>Down</answer>",
        "<answer>Right</answer>",
    ]
    trajs = [play("larger_sokoban", seed, moves, tag="Sokoban") for seed in (1, 2)]
    sources = {"Sokoban": EnvSource("larger_sokoban")}
    report = EpisodeRenderer(tmp_path, sources, per_tag=2).render(trajs, step=1)
    assert report.replay_mismatches == 0 and len(report.gifs) == 2
    with Image.open(report.gifs[0]) as gif:
        assert gif.n_frames == len(trajs[0].turns) + 1 == 5
