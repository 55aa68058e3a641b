"""Where metrics go: `metrics.jsonl` (always), TensorBoard event files, Weights & Biases, the console.

Images (the filmstrips of rendered validation episodes, `log_images`) go to TensorBoard and W&B.

The console gets one compact line per logged step (step, reward, success, validation when it ran,
step time, ETA); every metric goes to the other sinks. `verbose` prints the full metric set instead.
W&B (`track_with: [wandb]`, extra `roll-pipeline[wandb]`) takes `tracker_kwargs` (project, entity,
name, tags, notes, mode, ...) as `wandb.init` arguments; its run id is kept in the run folder and in
every checkpoint, so a resumed run continues the same W&B run. `WANDB_MODE=offline` works without an
account. On a resume from step N, what a killed run logged after N is dropped from metrics.jsonl (kept
in metrics.dropped.jsonl) and hidden in TensorBoard (`purge_step`), since the resumed run logs it again; a
fresh start in a used folder drops all of it the same way.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

VERBOSE_KEYS = (
    "env/",
    "val/env/",
    "val/score/mean",
    "critic/score/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/kl_loss",
    "time/step_total",
)
WANDB_ID_FILE = "wandb_run_id"


class Tracker:
    """Logs scalar metrics of a run to the sinks in `track_with` (and always to `metrics.jsonl`)."""

    def __init__(
        self,
        run_dir: Path,
        track_with: list[str],
        config: dict[str, Any] | None = None,
        *,
        verbose: bool = False,
        tracker_kwargs: Mapping[str, Any] | None = None,
        resume_step: int | None = None,
        wandb_run_id: str | None = None,
    ) -> None:
        """`resume_step`: the run resumes from a checkpoint of that step, so what a killed run logged after it
        is dropped (metrics.jsonl rows, TensorBoard events); None: a fresh start, so everything an earlier run
        of the folder logged is (a run killed before its first checkpoint would otherwise share the curve);
        `wandb_run_id`: the W&B run to continue (the checkpoint's), else the one kept in the run folder, else
        a new one."""
        self.run_dir = Path(run_dir)
        first_step = -1 if resume_step is None else resume_step
        drop_rows_after(self.run_dir / "metrics.jsonl", first_step)
        self.jsonl = (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8")
        self.stdout = "stdout" in track_with
        self.verbose = verbose
        self.total_steps = int(config["max_steps"]) if config and "max_steps" in config else None
        self._clock: tuple[float, int] | None = None  # (time, step) of the first logged training step
        self.writer = None
        if "tensorboard" in track_with:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step hides the events an earlier run of the folder logged from that step on
            self.writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"), purge_step=first_step + 1)
            if config is not None:
                self.writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```", 0)
        self.wandb_run = (
            start_wandb(self.run_dir, config, tracker_kwargs, wandb_run_id) if "wandb" in track_with else None
        )
        if config is not None:
            (self.run_dir / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")

    def run_ids(self) -> dict[str, str]:
        """The ids a resumed run continues under (for checkpoints): the W&B run id, when there is one."""
        id_file = self.run_dir / WANDB_ID_FILE
        if self.wandb_run is None and not id_file.exists():
            return {}
        run_id = self.wandb_run.id if self.wandb_run is not None else id_file.read_text(encoding="utf-8")
        return {"wandb_run_id": str(run_id).strip()}

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Write every scalar of `metrics` at `step`, a non-finite one as it is (NaN stays NaN in metrics.jsonl,
        TensorBoard and W&B: a diverging run shows where it diverged instead of leaving a gap)."""
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
        self.jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        self.jsonl.flush()
        if self.writer is not None:
            for key, value in clean.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()
        if self.wandb_run is not None:
            self.wandb_run.log(clean, step=step)
        if self.stdout:
            from tqdm.auto import tqdm

            tqdm.write(self._verbose_line(clean, step) if self.verbose else self._compact_line(clean, step))

    def log_images(self, images: Mapping[str, Any], step: int) -> None:
        """Write (H, W, 3) uint8 images at `step` to TensorBoard and W&B (rendered validation episodes)."""
        if not images:
            return
        if self.writer is not None:
            for key, image in images.items():
                self.writer.add_image(key, image, step, dataformats="HWC")
            self.writer.flush()
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({key: wandb.Image(image) for key, image in images.items()}, step=step)

    def _verbose_line(self, clean: dict[str, float], step: int) -> str:
        shown = {
            k: v for k, v in clean.items() if k.startswith(VERBOSE_KEYS) and not k.endswith(("/max", "/min"))
        }
        return f"[step {step}] " + "  ".join(f"{k}={v:.3g}" for k, v in sorted(shown.items()))

    def _compact_line(self, clean: dict[str, float], step: int) -> str:
        total = f"/{self.total_steps}" if self.total_steps else ""
        parts = [f"[step {step}{total}]"]
        if "critic/score/mean" in clean:
            parts.append(f"reward {clean['critic/score/mean']:.3f}")
        success = _mean_of(clean, "env/", "/success")
        if success is not None:
            parts.append(f"success {success:.3f}")
        val = _mean_of(clean, "val/env/", "/success")
        if val is not None:
            parts.append(f"val {val:.3f}")
        if "time/step_total" in clean:
            parts.append(f"{clean['time/step_total']:.1f}s/step")
            eta = self._eta(step)
            if eta is not None:
                parts.append(f"ETA {_duration(eta)}")
        return "  ".join(parts)

    def _eta(self, step: int) -> float | None:
        """Seconds left at the mean step time since the first logged training step."""
        now = time.monotonic()
        if self._clock is None:
            self._clock = (now, step)
            return None
        started, first = self._clock
        if not self.total_steps or step <= first:
            return None
        return (now - started) / (step - first) * max(self.total_steps - step, 0)

    def close(self) -> None:
        """Flush and close every sink."""
        self.jsonl.close()
        if self.writer is not None:
            self.writer.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def drop_rows_after(path: Path, step: int) -> int:
    """Keep the rows of `metrics.jsonl` up to `step` (a resume from that step logs the later ones again);
    the dropped rows, and a line cut short by a kill, move to `metrics.dropped.jsonl`. Returns how many."""
    if not path.exists():
        return 0
    kept, dropped = [], []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        try:
            row_step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):
            row_step = None
        (kept if isinstance(row_step, int) and row_step <= step else dropped).append(line)
    if dropped:
        with (path.parent / "metrics.dropped.jsonl").open("a", encoding="utf-8") as f:
            f.writelines(line if line.endswith("\n") else line + "\n" for line in dropped)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        tmp.replace(path)
    return len(dropped)


def start_wandb(
    run_dir: Path,
    config: dict[str, Any] | None,
    tracker_kwargs: Mapping[str, Any] | None,
    run_id: str | None = None,
) -> Any:
    """A W&B run for `run_dir`: `run_id` (a checkpoint's) when given, else the one the folder keeps, else a
    new one; the id is kept in the folder, and an existing run is continued."""
    try:
        import wandb
    except ImportError:
        raise ImportError(
            "track_with has 'wandb' but wandb is not installed: pip install 'roll-pipeline[wandb]' "
            "(or drop 'wandb' from track_with)"
        ) from None
    id_file = run_dir / WANDB_ID_FILE
    if run_id is None:
        run_id = id_file.read_text(encoding="utf-8").strip() if id_file.exists() else uuid.uuid4().hex[:12]
    id_file.write_text(run_id, encoding="utf-8")
    kwargs: dict[str, Any] = {
        "project": "roll",
        "name": run_dir.name,
        "dir": str(run_dir),
        "config": config,
        **dict(tracker_kwargs or {}),
        "id": run_id,
        "resume": "allow",
    }
    api_key = kwargs.pop("api_key", None)  # upstream configs carry it here
    if api_key:
        wandb.login(key=str(api_key), verify=False)
    return wandb.init(**kwargs)


def _mean_of(clean: Mapping[str, float], prefix: str, suffix: str) -> float | None:
    values = [v for k, v in clean.items() if k.startswith(prefix) and k.endswith(suffix)]
    return sum(values) / len(values) if values else None


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
