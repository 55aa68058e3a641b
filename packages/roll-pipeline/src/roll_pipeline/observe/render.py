"""Rendered validation episodes: a GIF per episode under `render_save_dir`, a filmstrip in TensorBoard.

After each validation the first `render_episodes_per_tag` healthy episodes of every tag (lowest seeds,
so the same maps are drawn at every validation) are **replayed in the driver** from their trajectory:
the env is rebuilt from the tag's `env_type` / `env_config`, reset with the episode's seed and stepped
with the model's recorded response texts, drawing `env.render()` (`rgb_array`) after every turn.

Why replay rather than capture frames in the env workers: the env loop, the trajectory schema and the
wire stay untouched (no frames crossing processes, no rendering cost inside any episode, nothing at all
when rendering is off), and only the few drawn episodes pay. The price is determinism: the replay must
reproduce the episode. The replay runs the env as the env workers do, under its own state of `random`
and `np.random` (`roll_envs.IsolatedEnv`: built from `DEFAULT_SEED`, reseeded by each reset), so an env
drawing from those generators replays too. It is checked turn by turn (the observation before each turn,
`Turn.observation`, the reward, the final success); an episode that replays differently is skipped with a
warning and counted
(`val/render/replay_mismatches`), never drawn wrong. An env without an `rgb_array` render (a custom
env) is skipped with one warning per tag and counted (`val/render/unrenderable`); validation goes on.

Files: `{render_save_dir}/step-{step:06d}/{tag}-seed{seed}-{success|fail}.gif`; a relative
`render_save_dir` lives in the run folder. Each frame is captioned with the turn, the action the env
executed and the reward; the last frame says SUCCESS or FAIL and is held longer.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roll_envs.frames import caption_frame, filmstrip, save_gif
from roll_envs.random_state import IsolatedEnv
from roll_rollout import Trajectory

RENDER_FPS = 2.0
"""Frames per second of the GIFs."""
LAST_FRAME_S = 2.5
"""How long a GIF holds its last frame (the outcome)."""
_BAND = (255, 255, 255)
_SUCCESS_BAND = (190, 235, 190)
_FAIL_BAND = (245, 200, 195)
_MAX_ACTION_CHARS = 32


class ReplayMismatch(Exception):
    """The replayed episode differs from the recorded one (the env is not deterministic under its seed)."""


class Unrenderable(Exception):
    """The env cannot be built here or gives no RGB frame."""


@dataclass(frozen=True)
class EnvSource:
    """How a tag's env is built: its registry id and config (as the env workers build it)."""

    env_type: str
    env_config: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class RenderReport:
    """What one validation's rendering produced."""

    gifs: list[Path] = field(default_factory=list)
    images: dict[str, Any] = field(default_factory=dict)  # TensorBoard tag -> (H, W, 3) uint8 filmstrip
    replay_mismatches: int = 0
    unrenderable: int = 0
    seconds: float = 0.0

    def metrics(self) -> dict[str, float]:
        """`val/render/*` counts and `time/val_render`."""
        return {
            "val/render/gifs": float(len(self.gifs)),
            "val/render/replay_mismatches": float(self.replay_mismatches),
            "val/render/unrenderable": float(self.unrenderable),
            "time/val_render": self.seconds,
        }


def pick_episodes(trajectories: Sequence[Trajectory], per_tag: int) -> list[Trajectory]:
    """The `per_tag` healthy episodes of lowest seed of each tag (one per seed), in tag order."""
    picked: dict[str, dict[int, Trajectory]] = {}
    for traj in sorted(trajectories, key=lambda t: (t.tag, t.seed, t.env_id)):
        if traj.error is not None:
            continue
        seeds = picked.setdefault(traj.tag, {})
        if len(seeds) < per_tag and traj.seed not in seeds:
            seeds[traj.seed] = traj
    return [traj for tag in sorted(picked) for traj in picked[tag].values()]


def gif_path(save_dir: Path, step: int, traj: Trajectory) -> Path:
    """`{save_dir}/step-{step:06d}/{tag}-seed{seed}-{success|fail}.gif` (the tag made file-name safe)."""
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", traj.tag)
    outcome = "success" if traj.success else "fail"
    return save_dir / f"step-{step:06d}" / f"{tag}-seed{traj.seed}-{outcome}.gif"


def replay_frames(env: Any, traj: Trajectory) -> list[Any]:
    """Captioned RGB frames of `traj` replayed on `env`: the reset state, then one per turn.

    The env runs under its own random state (`IsolatedEnv`, as in the env workers; `env` may be one already).
    Raises `ReplayMismatch` naming the first turn whose observation or reward differs from the record
    (or a success that differs at the end), `Unrenderable` when `env.render()` gives no RGB frame.
    """
    env = env if isinstance(env, IsolatedEnv) else IsolatedEnv(env)
    obs, _ = env.reset(seed=traj.seed)
    n = len(traj.turns)
    frames = [_captioned(_frame(env), [f"{traj.tag} | seed {traj.seed} | start", "", ""], _BAND)]
    ret, info, ended = 0.0, {}, False
    for i, turn in enumerate(traj.turns, 1):
        if ended:
            raise ReplayMismatch(f"turn {i}: the replayed episode already ended, the recorded one went on")
        if obs != turn.observation:
            raise ReplayMismatch(
                f"turn {i}: replayed observation {obs!r:.80} != recorded {turn.observation!r:.80}"
            )
        obs, reward, terminated, truncated, info = env.step(turn.response_text)
        if not math.isclose(float(reward), turn.reward, rel_tol=1e-9, abs_tol=1e-9):
            raise ReplayMismatch(f"turn {i}: replayed reward {float(reward)} != recorded {turn.reward}")
        ret += turn.reward
        ended = bool(terminated or truncated)
        lines = [
            f"{traj.tag} | seed {traj.seed} | turn {i}/{n}",
            f"action: {_action_text(turn.response_text, info)}",
            f"reward {turn.reward:+.2f} | return {ret:+.2f}",
        ]
        band = _BAND
        if i == n:
            lines[2] += " | " + ("SUCCESS" if traj.success else "FAIL")
            band = _SUCCESS_BAND if traj.success else _FAIL_BAND
        frames.append(_captioned(_frame(env), lines, band))
    if n and bool(info.get("success", traj.success)) != traj.success:
        raise ReplayMismatch(f"replayed success {info.get('success')} != recorded {traj.success}")
    return frames


def _frame(env: Any) -> Any:
    try:
        frame = env.render()
    except Exception as exc:
        raise Unrenderable(f"env.render() raised {type(exc).__name__}: {exc}") from exc
    shape = getattr(frame, "shape", None)
    if shape is None or len(shape) != 3 or shape[2] not in (3, 4) or str(frame.dtype) != "uint8":
        raise Unrenderable(
            f"env.render() returned {type(frame).__name__} {shape}, not an (H, W, 3) uint8 array; "
            "give the env an rgb_array render mode (BaseEnv: render_frame)"
        )
    return frame


def _captioned(frame: Any, lines: list[str], band: tuple[int, int, int]) -> Any:
    return caption_frame(frame, lines, band=band)


def _action_text(response: str, info: Mapping[str, Any]) -> str:
    """What the env executed (`info["executed_actions"]`), else the response text, shortened."""
    executed = info.get("executed_actions") if isinstance(info, Mapping) else None
    if executed:
        return _short(" || ".join(map(str, executed)))
    text = _short(" ".join(response.split()))
    if info.get("action_is_valid", True) is False:
        return f"invalid: {text!r}" if text else "invalid: (empty)"
    return text or "(empty)"


def _short(text: str) -> str:
    return text if len(text) <= _MAX_ACTION_CHARS else text[: _MAX_ACTION_CHARS - 3] + "..."


def _make_env(source: EnvSource) -> Any:
    """The tag's env with an `rgb_array` render mode, built through the roll-envs registry."""
    import roll_envs

    return roll_envs.make(source.env_type, render_mode="rgb_array", **dict(source.env_config))


def _console_warning(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(f"[roll] WARNING: {message}")


class EpisodeRenderer:
    """Replays a few validation episodes per tag and saves them as GIFs (see the module docstring).

    `make_env(source)` builds a tag's env (default: the roll-envs registry, `rgb_array`); `warn` gets
    each warning, once per tag and kind.
    """

    def __init__(
        self,
        save_dir: Path,
        envs: Mapping[str, EnvSource],
        per_tag: int,
        *,
        make_env: Callable[[EnvSource], Any] = _make_env,
        warn: Callable[[str], None] = _console_warning,
    ) -> None:
        self.save_dir = Path(save_dir)
        self.envs = dict(envs)
        self.per_tag = per_tag
        self.make_env = make_env
        self.warn = warn
        self._warned: set[tuple[str, str]] = set()

    def render(
        self,
        trajectories: Sequence[Trajectory],
        step: int,
        log_images: Callable[[Mapping[str, Any], int], None] | None = None,
    ) -> RenderReport:
        """GIFs and filmstrips of the picked episodes of one validation at `step`; the filmstrips go to
        `log_images(images, step)` when given (`Tracker.log_images`), timed with the rest."""
        started = time.perf_counter()
        report = RenderReport()
        envs: dict[str, Any] = {}
        try:
            for traj in pick_episodes(trajectories, self.per_tag):
                self._render_one(traj, step, envs, report)
        finally:
            for env in envs.values():
                _close_quietly(env)
        if log_images is not None:
            log_images(report.images, step)
        report.seconds = time.perf_counter() - started
        return report

    def _render_one(self, traj: Trajectory, step: int, envs: dict[str, Any], report: RenderReport) -> None:
        try:
            if traj.tag not in envs:
                envs[traj.tag] = self._build(traj.tag)
            frames = replay_frames(envs[traj.tag], traj)
        except Unrenderable as exc:
            report.unrenderable += 1
            self._warn_once(
                traj.tag, "unrenderable", f"render_save_dir: env tag {traj.tag!r} is not drawn: {exc}"
            )
            return
        except Exception as exc:  # ReplayMismatch, or the env failing in the replay only
            report.replay_mismatches += 1
            envs.pop(traj.tag, None)  # its state is unknown: build a fresh one for the next episode
            self._warn_once(
                traj.tag,
                "mismatch",
                f"render_save_dir: episode {traj.tag!r} seed {traj.seed} does not replay as recorded ({exc}); "
                "it is not drawn (counted in val/render/replay_mismatches). Rendering replays episodes from "
                "their seed and responses, so the env must be deterministic under reset(seed=...)",
            )
            return
        report.gifs.append(save_gif(frames, gif_path(self.save_dir, step, traj), RENDER_FPS, LAST_FRAME_S))
        report.images[f"val/render/{traj.tag}/seed{traj.seed}"] = filmstrip(frames)

    def _build(self, tag: str) -> Any:
        source = self.envs.get(tag)
        if source is None:
            raise Unrenderable(f"no env source for tag {tag!r}")
        try:
            return IsolatedEnv.make(self.make_env, source)  # the constructor as the env workers run it
        except Exception as exc:
            raise Unrenderable(
                f"building {source.env_type!r} with render_mode='rgb_array' raised {type(exc).__name__}: {exc}"
            ) from exc

    def _warn_once(self, tag: str, kind: str, message: str) -> None:
        if (tag, kind) not in self._warned:
            self._warned.add((tag, kind))
            self.warn(message)


def env_sources(custom_envs: Mapping[str, Any]) -> dict[str, EnvSource]:
    """The env source of every tag of `custom_envs` (`CustomEnvConfig`s: `env_type`, `env_config`)."""
    return {tag: EnvSource(env.env_type, dict(env.env_config)) for tag, env in custom_envs.items()}


def renderer_of(
    run_dir: Path, render_save_dir: str | None, envs: Mapping[str, EnvSource], per_tag: int
) -> EpisodeRenderer | None:
    """The run's renderer, or None when `render_save_dir` is null; a relative folder is inside `run_dir`."""
    if render_save_dir is None:
        return None
    return EpisodeRenderer(Path(run_dir) / Path(render_save_dir).expanduser(), envs, per_tag)


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:
        return
